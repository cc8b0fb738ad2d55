"""The engine catalog, kept as data: what each engine can do, and its performance profile with provenance.

The selection tree reads only this module for engine facts. Catalog order is the documented tie-break: when two
engines are equal on every criterion, the one listed first wins (vLLM first: highest throughput and the most
features on GPU; PyTorch eager last: the research fallback).
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_backend.api.common import GGUF_QUANTIZATIONS
from inference_backend.profiles_measured import MEASURED_CPU

ENGINES = ("vllm", "tgi", "llamacpp", "onnxruntime", "pytorch")


@dataclass(frozen=True)
class Capabilities:
    name: str
    formats: frozenset[str]
    gpu_required: bool
    batching: tuple[str, ...]
    """Batching strategies the engine has natively, best first."""
    prefix_cache: bool
    speculative: frozenset[str]
    """Speculative methods: draft (a draft model), ngram (prompt lookup)."""
    quantizations: frozenset[str]
    kv_dtypes: frozenset[str]
    multi_gpu: bool
    """Can split one replica over several GPUs (tensor parallel or layer split)."""
    min_compute: tuple[int, int] = (0, 0)
    """Lowest CUDA compute capability its GPU kernels support."""
    bf16_min_compute: tuple[int, int] = (8, 0)


_GPU_QUANT = frozenset({"none", "awq", "gptq", "fp8", "int8", "bitsandbytes"})
CATALOG: dict[str, Capabilities] = {
    c.name: c
    for c in (
        # vLLM 0.33: continuous batching only (its scheduler admits requests every step, which subsumes dynamic
        # batching); spec decode with a draft model or n-gram lookup; compute capability >= 7.0. No bitsandbytes:
        # 0.33.0's QUANTIZATION_METHODS has none (its parser rejects `--quantization bitsandbytes`; see
        # docs/engine-flags/vllm-0.33.0.md and tests/contracts/test_vllm_harness.py).
        Capabilities("vllm", frozenset({"safetensors"}), True, ("continuous",), True,
                     frozenset({"draft", "ngram"}), _GPU_QUANT - {"bitsandbytes"},
                     frozenset({"auto", "fp8", "float16", "bfloat16"}),
                     True, (7, 0)),
        # TGI 3.3: continuous batching; --speculate is n-gram (or Medusa heads), no separate draft model;
        # flash-attention kernels need Ampere (8.0)+; no int8 weight scheme of ours maps to its --quantize.
        Capabilities("tgi", frozenset({"safetensors"}), True, ("continuous",), True, frozenset({"ngram"}),
                     _GPU_QUANT - {"int8"}, frozenset({"auto", "fp8"}), True, (8, 0)),
        # llama.cpp llama-server: continuous batching over -np slots (static with --no-cont-batching); GGUF only;
        # draft-model speculation; quantized KV cache types.
        Capabilities("llamacpp", frozenset({"gguf"}), False, ("continuous", "static"), True, frozenset({"draft"}),
                     GGUF_QUANTIZATIONS | {"none"}, frozenset({"auto", "float16", "bfloat16", "q8_0", "q4_0"}),
                     True, (5, 0), (0, 0)),
        # Our ONNX Runtime server: dynamic and static batching, prefix cache, one device per replica.
        Capabilities("onnxruntime", frozenset({"onnx"}), False, ("dynamic", "static"), True, frozenset(),
                     frozenset({"none", "int8", "int4"}), frozenset({"auto"}), False, (6, 0)),
        # Our PyTorch eager runner: every batching strategy, prefix cache, assisted generation with a draft.
        Capabilities("pytorch", frozenset({"safetensors", "pytorch"}), False, ("continuous", "dynamic", "static"),
                     True, frozenset({"draft"}), frozenset({"none"}), frozenset({"auto", "float16", "bfloat16"}),
                     False, (6, 0)),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Profile:
    """Performance of one engine on a reference machine, for a 7B model; scaled by the selection."""

    ttft_ms: float
    """p95 time to first token for a 512-token prompt at low load."""
    tokens_per_second: float
    """Aggregate output tokens/s of one replica at saturation."""
    memory_gib_per_7b: float
    """Memory taken by a 7B model's weights plus runtime (before KV cache)."""
    bytes_per_param: float
    """Weight bytes per parameter of the reference model (decoding speed scales with the bytes read)."""
    provenance: str
    """Where the values come from: "measured: <hardware, model, engine version, date, command>", "published: <source>"
    or "estimate: <reasoning>"."""
    reference_cores: int = 16
    """CPU rows: the cores the reference measurement used (the selection scales by a node's cores over these)."""


REFERENCE = {"gpu": "1x NVIDIA A100 80GB, Llama-2-7B bf16", "cpu": "this project's 2-core build machine, scaled to 7B"}
_VLLM_BLOG = (
    "published: vLLM blog 2023-06-20 'vLLM: Easy, Fast, and Cheap LLM Serving with PagedAttention' (up to 24x the "
    "throughput of HF Transformers and 3.5x of TGI; LLaMA-7B on A10G, LLaMA-13B on A100-40GB) and Anyscale 2023 "
    "'How continuous batching enables 23x throughput in LLM inference' (A100); not measured here (no GPU lent yet: "
    "bench/gpu/h200.sh)"
)
_NO_GPU = "estimate: not measured on a GPU yet (bench/gpu/h200.sh measures it when a GPU is lent); "
PROFILES: dict[tuple[str, str], Profile] = {
    ("vllm", "gpu"): Profile(60, 2500, 15.0, 2, _VLLM_BLOG),
    ("tgi", "gpu"): Profile(70, 2000, 15.0, 2, _VLLM_BLOG + "; TGI at 1/3.5 of vLLM at saturation, rounded up"),
    ("llamacpp", "gpu"): Profile(90, 600, 7.5, 8.5 / 8, _NO_GPU + "public llama-bench reports for Llama-2-7B q8_0"),
    ("onnxruntime", "gpu"): Profile(90, 300, 15.0, 2, _NO_GPU + "eager-like decode with dynamic batches"),
    ("pytorch", "gpu"): Profile(80, 110, 15.0, 2, _NO_GPU + "HF generate, 1/24 of vLLM per the vLLM blog"),
    # CPU: measured here (bench/results/cpu-profiles.json), scaled to 7B by bench/profiles.py.
    **{(engine, "cpu"): Profile(**row) for engine, row in MEASURED_CPU.items()},
}

# Relative speed of GPU products against the reference A100 (memory bandwidth ratio, which bounds decoding).
GPU_SPEED: tuple[tuple[str, float], ...] = (
    ("H200", 2.4), ("H100", 1.65), ("B200", 3.9), ("A100", 1.0), ("L40S", 0.43), ("L40", 0.43), ("A10G", 0.3),
    ("A10", 0.3), ("L4", 0.15), ("T4", 0.16), ("V100", 0.45),
)  # fmt: skip
UNKNOWN_GPU_SPEED = 0.15


def gpu_speed(product: str) -> float:
    """Bandwidth ratio of a GPU product to the A100; the first matching name wins (H200 before H100...)."""
    upper = product.upper()
    for name, speed in GPU_SPEED:
        if name in upper:
            return speed
    return UNKNOWN_GPU_SPEED
