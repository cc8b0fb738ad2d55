"""Everything the harness does differently per engine, in one place: the model format each one serves (read from its
engine card) and how it is written, the server's command line, the API of the greedy request, the KV gauge and the
KV size in its log, the versions recorded, the dtype the weights are read in. run.py and report.py ask here and
compare no engine names (except that llama.cpp's own tools run when "llamacpp" is among the engines).

What an engine's renderer emits (the spec of each profile, the flags mapped to local values) is bench/profile_render.py;
llama.cpp's tools beside llama-server (llama-bench, the CUDA build, the second start) are llama.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ib_testkit.llama_server import llama_cpp_source
from inference_backend.engines import card

from bench import bench_model, procstats
from bench.bench_model import BenchModel
from bench.engine_profiles.llama import llama_version
from bench.engine_profiles.serving import Served, http_json, strip_eos
from bench.engine_profiles.steps import Budget, Skip, git_commit

RUNNER_MODULES = {"pytorch": "inference_backend.runners.pytorch", "onnxruntime": "inference_backend.runners.onnx"}
STEP_NAMES = {"safetensors": "safetensors", "onnx": "onnx export", "gguf": "gguf (convert_hf_to_gguf.py)"}
"""The formats the bench model can be written in, in order of preference, and the name of the step that writes it."""


# ---- the model, in the engine's format (from its card) --------------------------------------------------------------


def model_format(engine: str) -> str:
    """The weight format the bench writes for ``engine``: the first of STEP_NAMES its card says it serves."""
    formats = card(engine).formats
    return next(f for f in STEP_NAMES if f in formats)


def format_step(engine: str) -> str:
    return STEP_NAMES[model_format(engine)]


def needs_safetensors(engine: str) -> bool:
    """Whether ``engine``'s format is made from the safetensors checkpoint (written first)."""
    return model_format(engine) != "safetensors"


def write_model(engine: str, m: BenchModel, models: Path, device: str, paths: dict[str, Path], budget: Budget) -> Path:
    """Write the bench model in ``engine``'s format under ``models``; the others are made from paths["pytorch"]."""
    fmt = model_format(engine)
    if fmt == "safetensors":
        return bench_model.make_safetensors(m, models / m.name, device=device)
    elif fmt == "onnx":
        return bench_model.export_onnx(paths["pytorch"], models / f"{m.name}-onnx")
    else:
        src = llama_cpp_source()
        if not (src / "convert_hf_to_gguf.py").exists():
            raise Skip(f"llama.cpp source with convert_hf_to_gguf.py not found at {src}")
        gguf = models / f"{m.name}-{bench_model.GGUF_TYPES[m.dtype]}.gguf"
        return bench_model.convert_gguf(paths["pytorch"], gguf, m.dtype, timeout=budget.take(900))


def served_dtype(engine: str, device: str, dtype: str) -> str:
    """The dtype the served weights are read in: our ONNX exports are float32; the PyTorch runner on CPU casts to it."""
    return "float32" if model_format(engine) == "onnx" or (device == "cpu" and engine == "pytorch") else dtype


# ---- the server ---------------------------------------------------------------------------------------------------


def waits_for_llama_build(engine: str) -> bool:
    """Whether this engine's binary may come from the background CUDA build (llama.wait_build before it starts)."""
    return engine == "llamacpp"


def missing_server(engine: str, llama_bin: Path) -> str | None:
    """Why this engine's server cannot start here (a binary that was not built), or None."""
    if engine == "llamacpp" and not llama_bin.joinpath("llama-server").exists():
        return f"{llama_bin}/llama-server not built"
    return None


def server_argv(engine: str, llama_bin: Path, args: list[str]) -> list[str]:
    """The local command line: llama-server from ``llama_bin``, our runners as `python -m` modules."""
    if engine == "llamacpp":
        return [str(llama_bin / "llama-server"), *args]
    else:
        return [sys.executable, "-m", RUNNER_MODULES[engine], *args]


def version(engine: str, llama_bin: Path) -> dict[str, Any]:
    import inference_backend

    v: dict[str, Any] = {"inferenceBackend": inference_backend.__version__, "commit": git_commit()}
    if engine == "llamacpp":
        v["llamaServer"] = llama_version(llama_bin / "llama-server")
    elif engine == "pytorch":
        import torch
        import transformers

        v |= {"torch": torch.__version__, "transformers": transformers.__version__}
    else:
        import onnxruntime

        v |= {"onnxruntime": onnxruntime.__version__, "providers": onnxruntime.get_available_providers()}
    return v


def greedy(srv: Served, model: str, ids: list[int], n: int) -> list[int]:
    """Greedy continuation of ``ids`` as token ids, through each engine's own API."""
    if srv.engine == "llamacpp":  # tools/server /completion: token-array prompt, "tokens" in the reply
        body = {"prompt": ids, "n_predict": n, "temperature": 0, "cache_prompt": False, "return_tokens": True}
        status, out = http_json(srv.url + "/completion", body, timeout=600)
        assert status == 200, (status, out)
        return strip_eos([int(t) for t in out["tokens"]])
    body = {"model": model, "prompt": ids, "max_tokens": n, "temperature": 0, "return_token_ids": True}
    status, out = http_json(srv.url + "/v1/completions", body, timeout=600)
    assert status == 200, (status, out)
    return strip_eos([int(t) for t in out["choices"][0]["token_ids"]])


def has_server_timings(engine: str) -> bool:
    """Whether the server reports its own prompt/generation speeds (llama-server's `timings`: llama.py)."""
    return engine == "llamacpp"


# ---- the KV cache -------------------------------------------------------------------------------------------------


def kv_gauge(engine: str) -> str | None:
    """The /metrics gauge sampled during the load, or None."""
    # runners: reserved KV tokens / budget; llama-server b11312 exports no KV usage (allocated at start)
    return "ib:kv_cache_usage_perc" if engine != "llamacpp" else None


def kv_from_second_start(engine: str) -> bool:
    """Whether the KV size is read from a second start of the server at a higher log verbosity (llama.kv_log)."""
    return engine == "llamacpp"


def kv(engine: str, log_text: str, res: dict[str, Any]) -> dict[str, Any]:
    """The KV cache as the server's log states it (and, for the runners, the sampled peak of the gauge)."""
    if engine == "llamacpp":
        caches = procstats.parse_llama_kv(log_text)
        out: dict[str, Any] = {
            "source": "llama-server log at verbosity 4 (llama_kv_cache: size = ...); allocated at start",
            "caches": caches,
        }
        if caches:
            out["allocatedBytes"] = caches[0]["bytes"]
        return out
    budget = procstats.parse_runner_kv(log_text)
    out = {
        "source": "runner log (KV budget: N tokens (B bytes/token)); allocated on demand per sequence",
        "budget": budget,
    }
    if budget is not None and res.get("kvUsagePeak") is not None:
        # ib:kv_cache_usage_perc = reserved tokens (prompt + max_tokens of running requests) / budget
        out["peakReservedBytes"] = round(budget["budgetBytes"] * res["kvUsagePeak"])
    return out
