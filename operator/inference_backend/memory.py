"""Memory fit: weights, KV cache per token, runtime overhead, and the tensor-parallel width that fits.

Arithmetic (all documented in docs/selection.md):
- weights = parameters x bytes per parameter (from the quantization when set, else the dtype);
- KV cache per token = 2 (K and V) x layers x KV heads x head dim x KV dtype bytes;
- required per replica = weights (+ draft weights) + overhead + the KV cache of one full-context sequence
  (an engine refuses to start without room for one sequence of max model length);
- available = memoryFraction x memory of the replica's GPUs (or of the node on CPU);
- KV cache = available - weights - overhead (what the engine will allocate for KV blocks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inference_backend.quantity import GIB

# Bytes per parameter of each weight dtype.
DTYPE_BYTES: dict[str, float] = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
# Bytes per parameter of each quantization, scales and zero points included. GGUF figures are llama.cpp's
# bits per weight (ggml/src/ggml-common.h block layouts; K-quant mixes as measured on Llama-2-7B by
# `llama-quantize`): q4_k_m 4.89 bpw, q8_0 8.5 bpw. AWQ/GPTQ: 4-bit with group-128 fp16 scales, embeddings and
# LM head left in fp16: a Llama-2-7B AWQ/GPTQ checkpoint is ~3.9 GB, i.e. ~4.6 bits per parameter overall.
QUANT_BYTES: dict[str, float] = {
    "awq": 4.62 / 8, "gptq": 4.62 / 8, "bitsandbytes": 4.5 / 8, "fp8": 1.0, "int8": 1.0,
    "f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 8.5 / 8, "q6_k": 6.56 / 8, "q5_k_m": 5.69 / 8, "q5_k_s": 5.54 / 8,
    "q5_0": 5.5 / 8, "q4_k_m": 4.89 / 8, "q4_k_s": 4.58 / 8, "q4_0": 4.5 / 8, "q3_k_m": 3.91 / 8, "q2_k": 3.35 / 8,
}  # fmt: skip
KV_DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "q8_0": 8.5 / 8, "q4_0": 4.5 / 8,
}  # fmt: skip

# Runtime overhead per GPU: CUDA context, cuBLAS/NCCL workspaces, activations of one prefill (vLLM's profiling
# run typically measures 1-3 GiB for 7B-70B models); on CPU the engine process and activations.
GPU_OVERHEAD_BYTES = int(1.5 * GIB)
GPU_OVERHEAD_WEIGHT_SHARE = 0.05
CPU_OVERHEAD_BYTES = int(0.5 * GIB)


@dataclass(frozen=True)
class ArchShape:
    """Attention shape of a known architecture, for KV sizing when a Model gives none."""

    name: str
    parameters: int
    layers: int
    kv_heads: int
    head_dim: int
    context: int


# Built-in shapes of common open models (their config.json), used when the Model lacks layers/kvHeads/headDim:
# the entry nearest in parameter count (by ratio) stands in, and the reasons say which one.
ARCH_TABLE: tuple[ArchShape, ...] = (
    ArchShape("Qwen2.5-0.5B", 494_000_000, 24, 2, 64, 32768),
    ArchShape("Llama-3.2-1B", 1_236_000_000, 16, 8, 64, 131072),
    ArchShape("Qwen2.5-1.5B", 1_544_000_000, 28, 2, 128, 32768),
    ArchShape("Llama-3.2-3B", 3_213_000_000, 28, 8, 128, 131072),
    ArchShape("Llama-2-7B", 6_738_000_000, 32, 32, 128, 4096),
    ArchShape("Llama-3.1-8B", 8_030_000_000, 32, 8, 128, 131072),
    ArchShape("Llama-2-13B", 13_016_000_000, 40, 40, 128, 4096),
    ArchShape("Qwen2.5-14B", 14_770_000_000, 48, 8, 128, 32768),
    ArchShape("Qwen2.5-32B", 32_764_000_000, 64, 8, 128, 32768),
    ArchShape("Llama-3.1-70B", 70_554_000_000, 80, 8, 128, 131072),
    ArchShape("Llama-3.1-405B", 405_853_000_000, 126, 8, 128, 131072),
)


def nearest_shape(parameters: int) -> ArchShape:
    """The built-in shape nearest by parameter ratio; ties go to the smaller model (first in the table)."""
    return min(ARCH_TABLE, key=lambda s: abs(math.log(parameters / s.parameters)))


def weight_bytes(parameters: int, dtype: str | None, quantization: str | None) -> float:
    if quantization and quantization != "none":
        return parameters * QUANT_BYTES[quantization]
    return parameters * DTYPE_BYTES[dtype or "bfloat16"]


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, kv_dtype_bytes: float) -> float:
    return 2 * layers * kv_heads * head_dim * kv_dtype_bytes


@dataclass(frozen=True)
class Fit:
    fits: bool
    gpus: int
    weights: float
    overhead: float
    min_kv: float
    available: float

    @property
    def required(self) -> float:
        return self.weights + self.overhead + self.min_kv

    @property
    def kv_cache(self) -> float:
        return max(0.0, self.available - self.weights - self.overhead)


def gpu_fit(
    weights: float, min_kv: float, memory_per_gpu: float, fraction: float, gpus: int
) -> Fit:  # fmt: skip
    overhead = gpus * GPU_OVERHEAD_BYTES + GPU_OVERHEAD_WEIGHT_SHARE * weights
    available = fraction * memory_per_gpu * gpus
    return Fit(weights + overhead + min_kv <= available, gpus, weights, overhead, min_kv, available)


def cpu_fit(weights: float, min_kv: float, node_memory: float, fraction: float) -> Fit:
    available = fraction * node_memory
    overhead = float(CPU_OVERHEAD_BYTES)
    return Fit(weights + overhead + min_kv <= available, 0, weights, overhead, min_kv, available)


def tensor_parallel_options(gpu_count: int, mig: bool) -> list[int]:
    """Powers of two that divide the node's GPU count (one node per replica); 1 only on MIG slices."""
    if gpu_count <= 0:
        return []
    if mig:
        return [1]
    return [tp for tp in (1, 2, 4, 8, 16, 32) if tp <= gpu_count and gpu_count % tp == 0]
