"""Everything the harness does differently per engine, in one place: the model format each one serves (read from its
engine card) and how it is written, the server's command line, the API of the greedy request, the KV gauge and the
KV size in its log, the versions recorded, the dtype the weights are read in. The format comes from the engine's card;
the local process around it is one Launcher per locally runnable engine (LAUNCHERS), read through its fields and
methods: run.py and report.py compare no engine names (except that llama.cpp's own tools run when "llamacpp" is
among the engines).

What an engine's renderer emits (the spec of each profile, the flags mapped to local values) is bench/profile_render.py;
llama.cpp's tools beside llama-server (llama-bench, the CUDA build, the second start) are llama.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ib_testkit.llama_server import llama_cpp_source
from inference_backend.engines import card

from bench import bench_model, procstats
from bench.bench_model import BenchModel
from bench.engine_profiles.llama import llama_version
from bench.engine_profiles.serving import Served, http_json, strip_eos
from bench.engine_profiles.steps import Budget, Skip, git_commit

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


# ---- how each engine runs here: one launcher per locally runnable engine ---------------------------------------------


@dataclass(frozen=True)
class Launcher:
    """How the harness starts one engine on this machine and reads what it reports. The engine's product facts (its
    format, endpoints, flags) come from its card and renderer; this is only the local process around them."""

    engine: str
    kv_gauge: str | None
    """The /metrics gauge sampled during the load, or None."""
    cpu_dtype: str | None = None
    """The dtype the served weights are computed in on CPU when the engine casts them (None: as written)."""
    waits_for_llama_build: bool = False
    """Whether the binary may come from the background CUDA build (llama.wait_build before it starts)."""
    server_timings: bool = False
    """Whether the server reports its own prompt/generation speeds (llama-server's `timings`: llama.py)."""
    kv_from_second_start: bool = False
    """Whether the KV size is read from a second start of the server at a higher log verbosity (llama.kv_log)."""

    def missing(self, llama_bin: Path) -> str | None:
        """Why this engine's server cannot start here (a binary that was not built), or None."""
        return None

    def argv(self, llama_bin: Path, args: list[str]) -> list[str]:
        raise NotImplementedError

    def versions(self, llama_bin: Path) -> dict[str, Any]:
        raise NotImplementedError

    def greedy(self, srv: Served, model: str, ids: list[int], n: int) -> list[int]:
        """Greedy continuation of ``ids`` as token ids (OpenAI completions with ``return_token_ids``)."""
        body = {"model": model, "prompt": ids, "max_tokens": n, "temperature": 0, "return_token_ids": True}
        status, out = http_json(srv.url + "/v1/completions", body, timeout=600)
        assert status == 200, (status, out)
        return strip_eos([int(t) for t in out["choices"][0]["token_ids"]])

    def kv(self, log_text: str, res: dict[str, Any]) -> dict[str, Any]:
        """The KV cache as the server's log states it (and, for the runners, the sampled peak of the gauge)."""
        budget = procstats.parse_runner_kv(log_text)
        out: dict[str, Any] = {
            "source": "runner log (KV budget: N tokens (B bytes/token)); allocated on demand per sequence",
            "budget": budget,
        }
        if budget is not None and self.kv_gauge and res.get("kvUsagePeak") is not None:
            # the gauge = reserved tokens (prompt + max_tokens of running requests) / budget
            out["peakReservedBytes"] = round(budget["budgetBytes"] * res["kvUsagePeak"])
        return out


@dataclass(frozen=True)
class Runner(Launcher):
    """One of our runners, as a `python -m` module of this checkout."""

    module: str = ""
    packages: tuple[str, ...] = ()
    """The Python packages whose versions are recorded (onnxruntime: with its execution providers)."""

    def argv(self, llama_bin: Path, args: list[str]) -> list[str]:
        return [sys.executable, "-m", self.module, *args]

    def versions(self, llama_bin: Path) -> dict[str, Any]:
        import importlib

        v: dict[str, Any] = {name: importlib.import_module(name).__version__ for name in self.packages}
        if "onnxruntime" in self.packages:
            import onnxruntime

            v["providers"] = onnxruntime.get_available_providers()
        return v


@dataclass(frozen=True)
class LlamaServer(Launcher):
    """llama.cpp's tools/server, built by hack/build-llama-server (or the background CUDA build)."""

    def missing(self, llama_bin: Path) -> str | None:
        return None if llama_bin.joinpath("llama-server").exists() else f"{llama_bin}/llama-server not built"

    def argv(self, llama_bin: Path, args: list[str]) -> list[str]:
        return [str(llama_bin / "llama-server"), *args]

    def versions(self, llama_bin: Path) -> dict[str, Any]:
        return {"llamaServer": llama_version(llama_bin / "llama-server")}

    def greedy(self, srv: Served, model: str, ids: list[int], n: int) -> list[int]:
        """tools/server /completion: a token-array prompt, "tokens" in the reply."""
        body = {"prompt": ids, "n_predict": n, "temperature": 0, "cache_prompt": False, "return_tokens": True}
        status, out = http_json(srv.url + "/completion", body, timeout=600)
        assert status == 200, (status, out)
        return strip_eos([int(t) for t in out["tokens"]])

    def kv(self, log_text: str, res: dict[str, Any]) -> dict[str, Any]:
        caches = procstats.parse_llama_kv(log_text)
        out: dict[str, Any] = {
            "source": "llama-server log at verbosity 4 (llama_kv_cache: size = ...); allocated at start",
            "caches": caches,
        }
        if caches:
            out["allocatedBytes"] = caches[0]["bytes"]
        return out


LAUNCHERS: dict[str, Launcher] = {
    launcher.engine: launcher
    for launcher in (
        Runner(
            "pytorch",
            kv_gauge="vllm:kv_cache_usage_perc",
            cpu_dtype="float32",
            module="inference_backend.runners.pytorch",
            packages=("torch", "transformers"),
        ),
        Runner(
            "onnxruntime",
            kv_gauge="vllm:kv_cache_usage_perc",
            module="inference_backend.runners.onnx",
            packages=("onnxruntime",),
        ),
        # b11312 exports no KV usage gauge (the cache is allocated at start): its size comes from the log
        LlamaServer(
            "llamacpp", kv_gauge=None, waits_for_llama_build=True, server_timings=True, kv_from_second_start=True
        ),
    )
}
"""The engines this harness runs as local processes (the GPU-only engines run only in bench/gpu/h200.sh)."""


def launcher(engine: str) -> Launcher:
    card(engine)  # a registered engine, or KeyError
    if engine not in LAUNCHERS:
        raise Skip(f"{engine} has no local launcher here (GPU-only engines run in bench/gpu/h200.sh)")
    return LAUNCHERS[engine]


def served_dtype(engine: str, device: str, dtype: str) -> str:
    """The dtype the served weights are read in: our ONNX exports are float32; a launcher may cast on CPU."""
    cpu_dtype = launcher(engine).cpu_dtype
    return "float32" if model_format(engine) == "onnx" else (cpu_dtype or dtype) if device == "cpu" else dtype


def version(engine: str, llama_bin: Path) -> dict[str, Any]:
    import inference_backend

    v: dict[str, Any] = {"inferenceBackend": inference_backend.__version__, "commit": git_commit()}
    return v | launcher(engine).versions(llama_bin)


def greedy(srv: Served, model: str, ids: list[int], n: int) -> list[int]:
    """Greedy continuation of ``ids`` as token ids, through each engine's own API."""
    return launcher(srv.engine).greedy(srv, model, ids, n)
