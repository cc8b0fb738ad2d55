"""Every rendered `vllm serve` container is accepted by vLLM 0.33.0 itself and means what the spec asked.

Specs on GPU nodes (ib_testkit.factories) -> select -> engines.vllm.container -> the container's args, unchanged,
through vLLM's own parser, validate_parsed_serve_args, AsyncEngineArgs.from_cli_args and the no-model config
checks of hack/vllm_parse_args.py (one vLLM process for all cases). Then the parsed values are compared with the
spec's request, not with the renderer's output.
"""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import MODELS, node
from ib_testkit.rendered import Rendered, render_case
from inference_backend.decision import InvalidSpec

from tests.contracts.vllm import VllmArgsRejected, parse_vllm_args_many

pytestmark = pytest.mark.slow

L8 = {"modelRef": "llama-3-1-8b"}
L70 = {"modelRef": "llama-3-1-70b"}


def _quantized(q: str, dtype: str = "float16") -> dict[str, Any]:
    return {
        "uri": f"hf://acme/llama-70b-{q}",
        "architecture": "LlamaForCausalLM",
        "parameters": "70.6B",
        "dtype": dtype,
        "contextLength": 8192,
        "quantization": q,
    }


# name -> (spec body, nodes)
CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "tp1-batching": (
        {
            "model": {**L8, "servedName": "llama-8b"},
            "backend": "vllm",
            "batching": {"maxBatchSize": 64, "maxBatchTokens": 8192},
            "kvCache": {"memoryFraction": 0.85, "blockSize": 32},
        },
        [node("g", "h100")],
    ),
    "tp2": ({"model": L8, "backend": "vllm", "batching": {"maxBatchSize": 16}}, [node("g", "t4", 2)]),
    "tp4": ({"model": L70, "backend": "vllm"}, [node("g", "h100", 8)]),
    "tp8": ({"model": L70, "backend": "vllm", "kvCache": {"memoryFraction": 0.95}}, [node("g", "l4", 8)]),
    "draft": (
        {
            "model": L8,
            "backend": "vllm",
            "speculativeDecoding": {"draftModelRef": "llama-3-2-1b", "numSpeculativeTokens": 4},
        },
        [node("g", "h100")],
    ),
    "ngram": (
        {"model": L8, "backend": "vllm", "speculativeDecoding": {"method": "ngram", "numSpeculativeTokens": 3}},
        [node("g", "h100")],
    ),
    "prefix-off": ({"model": L8, "backend": "vllm", "prefixCache": {"enabled": False}}, [node("g", "h100")]),
    "kv-fp8": ({"model": L8, "backend": "vllm", "kvCache": {"dtype": "fp8"}}, [node("g", "h100")]),
    "kv-bf16-blocks8": (
        {"model": L8, "backend": "vllm", "kvCache": {"dtype": "bfloat16", "blockSize": 8}},
        [node("g", "h100")],
    ),
    "kv-offload": (
        {"model": L8, "backend": "vllm", "kvCache": {"cpuOffloadGiB": 16, "dtype": "fp8"}},
        [node("g", "h100", memory="256Gi")],
    ),
    "awq": ({"model": _quantized("awq"), "backend": "vllm"}, [node("g", "h100")]),
    "gptq": ({"model": _quantized("gptq"), "backend": "vllm"}, [node("g", "h100")]),
    "fp8-tp2": ({"model": {**L70, "quantization": "fp8"}, "backend": "vllm"}, [node("g", "h100", 8)]),
    "small-batches": (
        {"model": L8, "backend": "vllm", "batching": {"maxBatchSize": 4, "maxBatchTokens": 2048}},
        [node("g", "l4")],
    ),
    "long-context": (
        {
            "model": {
                "uri": "hf://Qwen/Qwen2.5-Coder-14B-Instruct",
                "parameters": "14.7B",
                "dtype": "bfloat16",
                "contextLength": 32768,
                "servedName": "coder",
            },
            "backend": "vllm",
        },
        [node("g", "h100")],
    ),
    "extra-args": (
        {"model": L8, "backend": "vllm", "engine": {"extraArgs": ["--enforce-eager", "--seed", "7"]}},
        [node("g", "h100")],
    ),
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, Rendered]:
    return {name: render_case(body, *nodes, engine="vllm") for name, (body, nodes) in CASES.items()}


SWAP_SPACE = "negative: rendered + --swap-space"


@pytest.fixture(scope="module")
def parsed(rendered: dict[str, Rendered]) -> dict[str, dict[str, Any] | VllmArgsRejected]:
    """One vLLM process for every case (importing vLLM takes ~10 s), the negative case included."""
    lists = {name: r.args for name, r in rendered.items()}
    lists[SWAP_SPACE] = [*rendered["tp1-batching"].args, "--swap-space", "4"]
    results = parse_vllm_args_many(list(lists.values()))
    return dict(zip(lists, results, strict=True))


def _ok(parsed: dict[str, Any], name: str) -> dict[str, Any]:
    r = parsed[name]
    assert not isinstance(r, VllmArgsRejected), str(r)
    assert r["vllm_version"] == "0.33.0"
    return dict(r)


@pytest.mark.parametrize("name", list(CASES))
def test_rendered_args_mean_what_the_spec_asked(
    name: str, rendered: dict[str, Rendered], parsed: dict[str, Any]
) -> None:
    r = _ok(parsed, name)
    e, cache = r["engine_args"], r["checks"]["cache_config"]
    s, d = rendered[name].spec, rendered[name].decision
    assert d.model is not None and d.placement is not None
    assert rendered[name].container.command == ("vllm", "serve")
    assert e["model"] == str(d.model.uri).removeprefix("hf://")
    assert r["args"]["host"] == "0.0.0.0" and r["args"]["port"] == 8000
    assert e["served_model_name"] == [s.model.served_name or "ib"]
    assert e["tensor_parallel_size"] == d.placement.gpus_per_replica
    assert e["max_model_len"] == d.model.context_length
    assert e["gpu_memory_utilization"] == s.kv_cache.memory_fraction
    assert e["block_size"] == s.kv_cache.block_size and cache["block_size"] == s.kv_cache.block_size
    assert e["max_num_seqs"] == s.batching.max_batch_size
    assert e["max_num_batched_tokens"] == s.batching.max_batch_tokens
    assert e["enable_prefix_caching"] is s.prefix_cache.enabled
    assert cache["enable_prefix_caching"] is s.prefix_cache.enabled
    want_kv = {"auto": "auto", "fp8": "fp8", "bfloat16": "bfloat16"}[s.kv_cache.dtype]
    assert e["kv_cache_dtype"] == want_kv and cache["cache_dtype"] == want_kv
    offload = s.kv_cache.cpu_offload_gi_b or None
    assert e["kv_offloading_size"] == offload and cache["kv_offloading_size"] == offload
    if offload:
        assert cache["kv_offloading_backend"] == "native"
    assert "--swap-space" not in rendered[name].args
    sd = s.speculative_decoding
    if sd is None:
        assert e["speculative_config"] is None
    elif sd.method == "ngram":
        assert e["speculative_config"] == {
            "method": "ngram",
            "num_speculative_tokens": sd.num_speculative_tokens,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        }
        assert r["checks"]["speculative"]["config"]["method"] == "ngram"
    else:
        assert sd.draft_model_ref is not None
        draft_uri = MODELS[sd.draft_model_ref].uri
        assert draft_uri is not None
        assert e["speculative_config"] == {
            "method": "draft_model",
            "model": draft_uri.removeprefix("hf://"),
            "num_speculative_tokens": sd.num_speculative_tokens,
        }
        assert r["checks"]["speculative"]["config"]["method"] == "draft_model"


def test_quantization(parsed: dict[str, Any]) -> None:
    # AWQ/GPTQ: the checkpoint's quantization_config decides (vLLM picks the marlin kernel), computed in float16
    for name in ("awq", "gptq"):
        e = _ok(parsed, name)["engine_args"]
        assert e["quantization"] is None and e["dtype"] == "float16"
    fp8 = _ok(parsed, "fp8-tp2")
    assert fp8["engine_args"]["quantization"] == "fp8" and fp8["checks"]["quantization"]["method"] == "fp8"
    assert fp8["engine_args"]["tensor_parallel_size"] == 2
    assert "bitsandbytes" not in fp8["checks"]["quantization"]["methods"]


def test_tensor_parallel_sizes_covered(rendered: dict[str, Rendered]) -> None:
    sizes = {r.decision.placement.gpus_per_replica for r in rendered.values() if r.decision.placement}
    assert {1, 2, 4, 8} <= sizes


def test_extra_args_reach_vllm(parsed: dict[str, Any]) -> None:
    e = _ok(parsed, "extra-args")["engine_args"]
    assert e["enforce_eager"] is True and e["seed"] == 7


# ---- negative: vLLM rejects what we must never render; the renderer refuses collisions ------------------------


def test_swap_space_fails_vllms_parser(parsed: dict[str, Any]) -> None:
    res = parsed[SWAP_SPACE]
    assert isinstance(res, VllmArgsRejected)
    assert res.stage == "parse" and "unrecognized arguments: --swap-space 4" in res.error


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--max-num-seqs", "8"], "--max-num-seqs"),
        (["--max_num_seqs=8"], "--max_num_seqs"),
        (["-tp", "2"], "-tp (same flag as --tensor-parallel-size)"),
        (["--no-enable-prefix-caching"], "--no-enable-prefix-caching (same flag as --enable-prefix-caching)"),
        (["-sc", "{}"], "-sc (same flag as --speculative-config)"),
    ],
)
def test_renderer_refuses_extra_args_repeating_its_flags(extra: list[str], named: str) -> None:
    body = {
        "model": L8,
        "backend": "vllm",
        "engine": {"extraArgs": extra},
        "batching": {"maxBatchSize": 32},
        "speculativeDecoding": {"method": "ngram"},
    }
    with pytest.raises(InvalidSpec, match=r"spec\.engine\.extraArgs") as info:
        render_case(body, node("g", "h100"))
    assert named in str(info.value)
