"""The memory estimator against published arithmetic (within 5%)."""

from __future__ import annotations

import pytest
from ib_testkit.factories import MODELS, cluster, node, spec
from inference_backend.memory import (
    GPU_OVERHEAD_BYTES,
    gpu_fit,
    kv_bytes_per_token,
    nearest_shape,
    tensor_parallel_options,
    weight_bytes,
)
from inference_backend.selection import select

GB = 1e9
GIB = 2**30


def close(value: float, expected: float, rel: float = 0.05) -> bool:
    return abs(value - expected) <= rel * expected


def test_llama2_7b_fp16_weights_about_13_5_gb() -> None:
    # Llama-2-7B has 6.74B parameters; the fp16 checkpoint is 13.5 GB.
    assert close(weight_bytes(6_738_000_000, "float16", None), 13.5 * GB)


def test_llama3_8b_kv_cache_128_kib_per_token_fp16() -> None:
    # 2 (K,V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes = 131072 bytes.
    assert kv_bytes_per_token(32, 8, 128, 2) == 128 * 1024
    shape = nearest_shape(8_030_000_000)
    assert kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 2) == 128 * 1024


def test_llama2_7b_kv_cache_512_kib_per_token() -> None:
    # Multi-head attention: 2 x 32 x 32 x 128 x 2 = 524288 bytes (0.5 MiB per token).
    shape = nearest_shape(6_740_000_000)
    assert shape.name == "Llama-2-7B"
    assert kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 2) == 512 * 1024


def test_llama2_70b_bf16_needs_more_than_one_80gb_gpu() -> None:
    weights = weight_bytes(68_980_000_000, "bfloat16", None)  # Llama-2-70B: 68.98B parameters, ~138 GB
    assert close(weights, 138 * GB)
    h100 = 81559 * 2**20
    assert not gpu_fit(weights, 0, h100, 1.0, 1).fits
    assert gpu_fit(weights, 0, h100, 0.9, 2).fits


@pytest.mark.parametrize(
    ("quant", "expected_gb"),
    [
        ("q4_k_m", 4.08),  # llama-2-7b.Q4_K_M.gguf is 4.08 GB
        ("q8_0", 7.16),  # llama-2-7b.Q8_0.gguf is 7.16 GB
        ("q4_0", 3.83),  # llama-2-7b.Q4_0.gguf is 3.83 GB
        ("awq", 3.89),  # Llama-2-7B-AWQ safetensors: 3.89 GB
    ],
)
def test_quantized_weights(quant: str, expected_gb: float) -> None:
    assert close(weight_bytes(6_738_000_000, None, quant), expected_gb * GB, rel=0.06)


@pytest.mark.parametrize(
    ("count", "mig", "heads", "kv", "layer_split", "widths"),
    [
        (8, False, 0, 0, False, [1, 2, 4, 8]),
        (7, False, 0, 0, False, [1, 2, 4]),  # 7 allocatable (one unhealthy): TP=4 still fits, 8 does not
        (6, False, 0, 0, False, [1, 2, 4]),
        (3, False, 0, 0, False, [1, 2]),
        (7, True, 0, 0, False, [1]),  # MIG slices: no tensor parallelism across slices
        (0, False, 0, 0, False, []),
        (8, False, 28, 4, False, [1, 2, 4]),  # Qwen2.5-7B: 28 % 8 = 4, so TP=8 is refused
        (8, False, 40, 10, False, [1, 2]),  # Phi-3-medium: 10 KV heads: 10 % 4 and 4 % 10 are both non-zero
        (8, False, 64, 8, False, [1, 2, 4, 8]),  # Llama-3.1-70B
        (16, False, 14, 2, False, [1, 2]),  # Qwen2.5-0.5B: 14 heads
        (8, False, 28, 4, True, [1, 2, 4, 8]),  # llama.cpp splits layers: no head constraint
    ],
    ids=lambda v: str(v),
)
def test_tensor_parallel_widths_fit_the_node_and_divide_the_heads(
    count: int, mig: bool, heads: int, kv: int, layer_split: bool, widths: list[int]
) -> None:
    got, why = tensor_parallel_options(count, mig, heads, kv, layer_split)
    assert got == widths
    assert len(why) == len([w for w in (1, 2, 4, 8, 16, 32) if w <= count]) - len(got) if not mig else not why


def test_kv_heads_are_replicated_beyond_tp_8_kv_heads_x_tp_16_is_16() -> None:
    from inference_backend.memory import kv_heads_per_replica

    assert kv_heads_per_replica(8, 4) == 8
    assert kv_heads_per_replica(8, 16) == 16
    assert kv_heads_per_replica(4, 8) == 8


def test_fit_boundary_is_inclusive() -> None:
    weights = 10 * GIB
    gpu = 20 * GIB
    overhead = GPU_OVERHEAD_BYTES + 0.05 * weights
    exact_kv = 0.5 * gpu - weights - overhead + 10 * GIB
    assert gpu_fit(weights, exact_kv, gpu, 1.0, 1).fits
    assert not gpu_fit(weights, exact_kv + 1, gpu, 1.0, 1).fits


def test_status_memory_matches_design_example() -> None:
    # shared/design/api.md shows 8B bf16 on an H100: weights 15.0 GiB, available 72.0 GiB.
    d = select(
        spec(model={"modelRef": "llama-3-1-8b"}, hardware={"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}),
        cluster(node("h", "h100", 8)),
        MODELS,
    )
    assert d.memory is not None
    report = d.memory.to_api()
    assert report.weights_gi_b == 15.0
    assert close(report.available_gi_b, 72.0, rel=0.01)
    assert report.required_gi_b < report.available_gi_b
    assert close(report.kv_cache_gi_b, report.available_gi_b - 15.0 - 2.25, rel=0.02)


def test_draft_weights_are_counted() -> None:
    base = select(spec(model={"modelRef": "llama-3-1-8b"}), cluster(node("h", "h100", 1)), MODELS)
    with_draft = select(
        spec(model={"modelRef": "llama-3-1-8b"}, speculativeDecoding={"draftModelRef": "llama-3-2-1b"}),
        cluster(node("h", "h100", 1)),
        MODELS,
    )
    assert base.memory is not None and with_draft.memory is not None
    assert with_draft.speculation.enabled
    assert close(with_draft.memory.weights - base.memory.weights, 1.24e9 * 2, rel=0.01)
