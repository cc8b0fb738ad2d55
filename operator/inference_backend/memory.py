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

from inference_backend.architectures import ARCH_TABLE, ArchShape, nearest_shape
from inference_backend.quantity import GIB

__all__ = [
    "ARCH_TABLE",
    "CPU_OVERHEAD_BYTES",
    "DTYPE_BYTES",
    "GPU_OVERHEAD_BYTES",
    "KV_DTYPE_BYTES",
    "QUANT_BYTES",
    "TP_WIDTHS",
    "ArchShape",
    "Fit",
    "cpu_fit",
    "disk_bytes",
    "gpu_fit",
    "kv_bytes_per_token",
    "kv_heads_per_replica",
    "nearest_shape",
    "tensor_parallel_options",
    "weight_bytes",
]

# Bytes per parameter of each weight dtype.
DTYPE_BYTES: dict[str, float] = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
# Bytes per parameter of each quantization, scales and zero points included. GGUF figures are llama.cpp's
# bits per weight (ggml/src/ggml-common.h block layouts; K-quant mixes as measured on Llama-2-7B by
# `llama-quantize`): q4_k_m 4.89 bpw, q8_0 8.5 bpw. AWQ/GPTQ: 4-bit with group-128 fp16 scales, embeddings and
# LM head left in fp16: a Llama-2-7B AWQ/GPTQ checkpoint is ~3.9 GB, i.e. ~4.6 bits per parameter overall.
QUANT_BYTES: dict[str, float] = {
    "awq": 4.62 / 8,
    "gptq": 4.62 / 8,
    "bitsandbytes": 4.5 / 8,
    "fp8": 1.0,
    "int8": 1.0,
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 8.5 / 8,
    "q6_k": 6.56 / 8,
    "q5_k_m": 5.69 / 8,
    "q5_k_s": 5.54 / 8,
    "q5_0": 5.5 / 8,
    "q4_k_m": 4.89 / 8,
    "q4_k_s": 4.58 / 8,
    "q4_0": 4.5 / 8,
    "q3_k_m": 3.91 / 8,
    "q2_k": 3.35 / 8,
}
KV_DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp8": 1,
    "q8_0": 8.5 / 8,
    "q4_0": 4.5 / 8,
}

# Runtime overhead per GPU: CUDA context, cuBLAS/NCCL workspaces, activations of one prefill (vLLM's profiling
# run typically measures 1-3 GiB for 7B-70B models); on CPU the engine process and activations.
GPU_OVERHEAD_BYTES = int(1.5 * GIB)
GPU_OVERHEAD_WEIGHT_SHARE = 0.05
CPU_OVERHEAD_BYTES = int(0.5 * GIB)


def weight_bytes(parameters: int, dtype: str | None, quantization: str | None) -> float:
    if quantization and quantization != "none":
        return parameters * QUANT_BYTES[quantization]
    return parameters * DTYPE_BYTES[dtype or "bfloat16"]


def disk_bytes(weights: float) -> int:
    """Node disk (an emptyDir's sizeLimit and the pod's ephemeral-storage request) for one copy of weights of
    ``weights`` bytes: a tenth and 1 GiB of headroom (tokenizer, config, a partial download), whole GiB."""
    return (math.ceil(weights * 1.1 / GIB) + 1) * GIB


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, kv_dtype_bytes: float, latent: int = 0) -> float:
    """KV bytes one token stores: a key and a value of ``head_dim`` per KV head and layer; or, under multi-head
    latent attention (``latent`` > 0: DeepSeek-V2/V3/R1, Kimi K2), one compressed latent of ``latent`` elements
    per layer, kv_lora_rank + qk_rope_head_dim (DeepSeek-V2, arXiv 2405.04434 section 2.1: keys and values are
    rebuilt from it; vLLM's MLA backends cache [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim], SGLang's
    MLATokenToKVPool the same), and ``kv_heads`` then counts the copies of it (see kv_heads_per_replica)."""
    if latent > 0:
        return layers * kv_heads * latent * kv_dtype_bytes
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


def gpu_fit(weights: float, min_kv: float, memory_per_gpu: float, fraction: float, gpus: int) -> Fit:
    overhead = gpus * GPU_OVERHEAD_BYTES + GPU_OVERHEAD_WEIGHT_SHARE * weights
    available = fraction * memory_per_gpu * gpus
    return Fit(weights + overhead + min_kv <= available, gpus, weights, overhead, min_kv, available)


def cpu_fit(weights: float, min_kv: float, node_memory: float, fraction: float) -> Fit:
    available = fraction * node_memory
    overhead = float(CPU_OVERHEAD_BYTES)
    return Fit(weights + overhead + min_kv <= available, 0, weights, overhead, min_kv, available)


TP_WIDTHS = (1, 2, 4, 8, 16, 32)


def tensor_parallel_options(
    gpu_count: int, mig: bool, attention_heads: int = 0, kv_heads: int = 0, layer_split: bool = False
) -> tuple[list[int], list[str]]:
    """The tensor-parallel widths one replica can take on one node, and why the others cannot.

    A width is a power of two up to the node's allocatable GPUs (not a divisor of the count: a node with 7
    allocatable GPUs, one unhealthy, still runs TP=4). Tensor parallelism splits the attention heads, so the width
    must divide the query heads and either divide the KV heads or be a multiple of them (the KV heads are then
    replicated): vLLM's ModelConfig.verify_with_parallel_config ("Total number of attention heads must be divisible
    by tensor parallel size") and QKVParallelLinear (``divide(total_num_kv_heads, tp_size)`` or
    ``divide(tp_size, total_num_kv_heads)``); TGI and SGLang shard the same way. An engine that splits a replica
    by layers (llama.cpp ``--split-mode layer``) has no head constraint. MIG slices: 1 (no NCCL across slices).
    """
    if gpu_count <= 0:
        return [], []
    if mig:
        return [1], []
    widths: list[int] = []
    why: list[str] = []
    for tp in (w for w in TP_WIDTHS if w <= gpu_count):
        if not layer_split and attention_heads and attention_heads % tp:
            why.append(f"TP={tp} does not divide the {attention_heads} attention heads")
        elif not layer_split and kv_heads and kv_heads % tp and tp % kv_heads:
            why.append(f"TP={tp} neither divides nor is a multiple of the {kv_heads} KV heads")
        else:
            widths.append(tp)
    return widths, why


def kv_heads_per_replica(kv_heads: int, tp: int, latent: int = 0) -> int:
    """KV heads stored across one replica: each GPU keeps kv_heads / tp, or one replicated head when tp > kv_heads
    (so TP beyond the KV heads stops adding KV capacity). Multi-head latent attention (``latent`` > 0) has one
    latent "head" that tensor parallelism does not split: each of the ``tp`` ranks holds it whole (vLLM's and
    SGLang's MLA caches are per rank, unsharded), so ``tp`` copies; data-parallel attention stores a request's
    latent in its own group only (pass the group's width as ``tp``)."""
    if latent > 0:
        return max(tp, 1)
    return max(kv_heads, tp) if tp > 0 else kv_heads
