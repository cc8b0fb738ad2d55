"""SGLang, the sixth engine: where the tree chooses it, how it explains losing, and what its renderer emits.

The rendered args are checked against SGLang 0.5.23's own parser in tests/contracts/test_sglang_contract.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import MODELS, cluster, node, spec
from inference_backend.api import InferenceBackend
from inference_backend.decision import InvalidSpec
from inference_backend.engines import card, sglang
from inference_backend.render import render_result
from inference_backend.selection import select

LLAMA_8B = {
    "uri": "hf://meta-llama/Llama-3.1-8B-Instruct",
    "parameters": "8B",
    "dtype": "bfloat16",
    "contextLength": 8192,
}


def _rejected(d: Any) -> dict[str, str]:
    return dict(d.rejected)


def test_bitsandbytes_below_compute_8_goes_to_sglang() -> None:
    """vLLM 0.33.0 lacks bitsandbytes and TGI needs compute 8.0: on T4s the tree picks SGLang (7.5+)."""
    d = select(spec(model={**LLAMA_8B, "quantization": "bitsandbytes"}), cluster(node("t4-1", "t4")), {})
    assert d.backend == "sglang", d.reasons
    assert "quantization bitsandbytes is not one it runs" in _rejected(d)["vllm"]
    assert "needs 8.0+" in _rejected(d)["tgi"]


def test_sglang_loses_to_vllm_on_registry_order_and_says_so() -> None:
    d = select(spec(model=LLAMA_8B), cluster(node("h100-1", "h100")), {})
    assert d.backend == "vllm"
    assert _rejected(d)["sglang"] == "ranked below vllm: registry order (equal on objectives and features)"


def test_a_throughput_objective_picks_the_engine_that_needs_fewer_gpus() -> None:
    """SGLang and vLLM rated by the workload model on the same H100: at a tokensPerSecond objective where one
    needs more replicas than the other, the one needing fewer GPUs is chosen and the other's rejection names the
    objective's arithmetic."""
    nodes = cluster(node("h100-1", "h100", 8, cpu="192", memory="1900Gi"))

    def gpus(engine: str, target: int) -> int:
        d = select(spec(model=LLAMA_8B, backend=engine, objectives={"tokensPerSecond": target}), nodes, {})
        assert d.placement is not None and d.plan is not None
        return d.placement.gpus_per_replica * d.plan.replicas

    target = next((t for t in range(2000, 200_001, 2000) if gpus("vllm", t) != gpus("sglang", t)), None)
    assert target is not None, "the two engines' estimates never differ in GPUs"
    fewer, more = sorted(("vllm", "sglang"), key=lambda e: gpus(e, target))
    d = select(spec(model=LLAMA_8B, objectives={"tokensPerSecond": target}), nodes, {})
    assert d.backend == fewer, d.reasons
    assert "tokensPerSecond" in _rejected(d)[more]


def test_sglang_needs_a_gpu_and_the_error_names_the_field() -> None:
    with pytest.raises(InvalidSpec) as e:
        select(spec(model=LLAMA_8B, backend="sglang", hardware={"accelerator": "cpu"}), cluster(node("c", None)), {})
    assert e.value.field == "spec.hardware.accelerator" and "sglang" in e.value.message


def test_sglang_refused_below_its_minimum_compute() -> None:
    d = select(spec(model=LLAMA_8B, backend="sglang"), cluster(node("v100-1", "v100")), {})
    assert d.backend is None and "needs 7.5+" in d.reasons[-1]


def _args(**changes: Any) -> list[str]:
    body = {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": "chat", "namespace": "ml"},
        "spec": {"backend": "sglang", "model": {"modelRef": "llama-3-1-8b"}, **changes},
    }
    ib = InferenceBackend.model_validate(body)
    d = select(ib.spec, cluster(node("h100-1", "h100", 8)), MODELS)
    pod = render_result(ib, d).objects[0]["spec"]["template"]["spec"]  # type: ignore[index]
    c = pod["containers"][0]
    assert c["image"] == sglang.IMAGE and c["command"] == list(sglang.COMMAND)
    return [str(a) for a in c["args"]]


def _value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_rendered_flags_follow_the_spec() -> None:
    args = _args(batching={"maxBatchSize": 32, "maxBatchTokens": 4096}, kvCache={"memoryFraction": 0.8})
    assert _value(args, "--max-running-requests") == "32" and _value(args, "--chunked-prefill-size") == "4096"
    assert _value(args, "--mem-fraction-static") == "0.8" and _value(args, "--tp-size") == "1"
    assert _value(args, "--port") == "8000" and "--enable-metrics" in args and "--disable-radix-cache" not in args
    assert "--disable-radix-cache" in _args(prefixCache={"enabled": False})


def test_speculation_and_kv_flags() -> None:
    ngram = _args(speculativeDecoding={"method": "ngram", "numSpeculativeTokens": 3})
    assert (
        _value(ngram, "--speculative-algorithm") == "NGRAM" and _value(ngram, "--speculative-num-draft-tokens") == "4"
    )
    draft = _args(speculativeDecoding={"method": "draft", "draftModelRef": "llama-3-2-1b", "numSpeculativeTokens": 4})
    assert _value(draft, "--speculative-algorithm") == "STANDALONE"
    assert _value(draft, "--speculative-draft-model-path") == "meta-llama/Llama-3.2-1B-Instruct"
    fp8 = _args(kvCache={"dtype": "fp8", "cpuOffloadGiB": 2.5})
    assert _value(fp8, "--kv-cache-dtype") == "fp8_e4m3" and _value(fp8, "--hicache-size") == "3"


def test_extra_args_cannot_override_a_flag_through_an_alias() -> None:
    with pytest.raises(InvalidSpec, match="--tp-size"):
        _args(engine={"extraArgs": ["--tensor-parallel-size", "4"]})


def test_card_is_gpu_only_with_the_documented_quirks() -> None:
    c = card("sglang")
    assert c.gpu_required and c.own_hf_loader and c.kv_offload and c.multi_node
    assert c.profiles["gpu"].provenance.startswith("published: ")
