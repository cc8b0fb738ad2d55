"""The engine containers of the profiles, from the operator's real selection + renderers, and their local mapping.

An InferenceBackend spec per engine (accelerator, concurrency, batching) is selected against ONE node describing the
machine the profile runs on (ib_testkit.factories.node: this host's cores and memory, or an H200 node), rendered by
inference_backend.engines, and only these values are then mapped to local ones (``localize``):

    --model / -m          in-pod weights path (/models/...)   -> the bench model's local file or directory
    --host, --port        0.0.0.0:8000                        -> 127.0.0.1:<free port> (several servers, one host)
    --threads / -t        90% of the node's cores (floor)     -> --threads of the harness (default: all cores here;
                          the 10% is kept for kubelet/daemonsets on a node, which this machine does not run)
    env LLAMA_CACHE       /model-cache (for -hf downloads)    -> a local directory (unused: the model is local)

Everything else (batching, slots, context, KV type, prefix cache, ...) is passed exactly as rendered.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ib_testkit.factories import MODELS, node
from ib_testkit.llama_server import substitute_args
from ib_testkit.rendered import Rendered, render_case
from ib_testkit.runner_cases import localize as localize_runner
from inference_backend.api.model import ModelSpec

from bench.bench_model import BenchModel

ENGINES = ("pytorch", "onnxruntime", "llamacpp")
THREAD_FLAGS = {"pytorch": "--threads", "onnxruntime": "--threads", "llamacpp": "-t"}
H200_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.memory": "143771"}


def model_ref(engine: str, m: BenchModel) -> str:
    return {"pytorch": m.name, "onnxruntime": f"{m.name}-onnx", "llamacpp": f"{m.name}-gguf"}[engine]


def _parameters(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}".rstrip("0").rstrip(".") + unit
    return "1K"


def model_specs(m: BenchModel) -> dict[str, ModelSpec]:
    """The bench model as the model registry would describe it, once per format (all on one PVC)."""
    common = {
        "architecture": "LlamaForCausalLM",
        "parameters": _parameters(m.parameters()),
        "contextLength": m.context,
        "tokenizer": {"family": f"ib-bench-bpe-{m.vocab}", "vocabSize": m.vocab},
        "layers": m.layers,
        "kvHeads": m.kv_heads,
        "headDim": m.head_dim,
    }
    # the ONNX exporter writes float32 graphs (docs/runners.md), whatever the checkpoint's dtype
    return {
        model_ref("pytorch", m): ModelSpec.model_validate(
            {"uri": f"pvc://bench-models/{m.name}", "format": "safetensors", "dtype": m.dtype, **common}
        ),
        model_ref("onnxruntime", m): ModelSpec.model_validate(
            {"uri": f"pvc://bench-models/{m.name}-onnx", "format": "onnx", "dtype": "float32", **common}
        ),
        model_ref("llamacpp", m): ModelSpec.model_validate(
            {"uri": f"pvc://bench-models/{m.name}.gguf", "format": "gguf", "dtype": m.dtype, **common}
        ),
    }


def local_node(device: str) -> dict[str, Any]:
    """The node the spec is placed on: this host (cores, MemTotal) for cpu; one H200 with 16 cores for cuda."""
    if device == "cuda":
        return node("h200", "h100", cpu="16", memory="128Gi", labels=H200_LABELS)
    mem_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    return node("local", cpu=str(len(os.sched_getaffinity(0))), memory=f"{mem_kib}Ki")


def spec_body(engine: str, m: BenchModel, device: str, concurrency: int) -> dict[str, Any]:
    """The InferenceBackend spec of one profile: this engine, the accelerator, sized for ``concurrency`` streams.

    Batching: continuous where the engine has it (PyTorch runner, llama-server), dynamic for the ONNX Runtime
    server (its best mode); maxBatchSize = the highest measured concurrency, so every step fits one batch.
    """
    strategy = "dynamic" if engine == "onnxruntime" else "continuous"
    return {
        "backend": engine,
        "model": {"modelRef": model_ref(engine, m), "servedName": m.name},
        "hardware": {"accelerator": "cpu" if device == "cpu" else "gpu"},
        "objectives": {"concurrency": concurrency},
        "batching": {"strategy": strategy, "maxBatchSize": concurrency},
    }


def render(engine: str, m: BenchModel, device: str, concurrency: int) -> tuple[dict[str, Any], Rendered]:
    body = spec_body(engine, m, device, concurrency)
    rendered = render_case(body, local_node(device), models={**MODELS, **model_specs(m)}, name=m.name, engine=engine)
    return body, rendered


@dataclass(frozen=True)
class Localized:
    args: list[str]
    env: dict[str, str]
    mapped: list[dict[str, str]]
    """Each changed value: {"flag", "rendered", "local"} (and env entries with "env")."""


def localize(
    engine: str, rendered: Rendered, *, model_path: Path, port: int, threads: int | None, llama_cache: Path
) -> Localized:
    args: Sequence[str] = rendered.args
    if engine == "llamacpp":
        local = substitute_args(args, port=port, model=str(model_path))
    else:
        local = localize_runner(args, {"--model": str(model_path)}, port=port)
    flag = THREAD_FLAGS[engine]
    if threads is not None and flag in local:
        local[local.index(flag) + 1] = str(threads)
    mapped = [
        {"flag": args[i - 1], "rendered": a, "local": b}
        for i, (a, b) in enumerate(zip(args, local, strict=False))
        if a != b
    ]
    if len(local) != len(args):
        mapped.append({"flag": "(appended)", "rendered": "", "local": " ".join(local[len(args) :])})
    env = dict(rendered.env)
    if "LLAMA_CACHE" in env:
        mapped.append({"env": "LLAMA_CACHE", "rendered": env["LLAMA_CACHE"], "local": str(llama_cache)})
        env["LLAMA_CACHE"] = str(llama_cache)
    return Localized(local, env, mapped)
