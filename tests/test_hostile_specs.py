"""Careless and hostile specs the CRD used to admit whose pods never ran or misbehaved (issue 31): each is now
refused at admission naming the field, or rendered so the pod runs as the user meant."""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import MODELS, cluster, node
from inference_backend.api import InferenceBackend
from inference_backend.quantity import decimal_text
from inference_backend.render import render
from inference_backend.selection import select

GPU = [node("h100", "h100", 8), node("cpu-a", cpu="32", memory="128Gi")]
CPU = [node("cpu-a", cpu="32", memory="128Gi")]


def ib(spec: dict[str, Any], name: str = "t") -> InferenceBackend:
    return InferenceBackend.model_validate(
        {
            "apiVersion": "serving.inferencebackend.io/v1alpha1",
            "kind": "InferenceBackend",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }
    )


def container(spec: dict[str, Any], nodes: list[dict[str, Any]] = GPU) -> dict[str, Any]:
    b = ib(spec)
    d = select(b.spec, cluster(*nodes), MODELS)
    assert d.backend is not None, d.reasons[-1]
    c: dict[str, Any] = render(b, d)[0]["spec"]["template"]["spec"]["containers"][0]
    return c


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1048576.0, "1048576"),
        (0.9, "0.9"),
        (1e-05, "0.00001"),
        (123456.7, "123456.7"),
        (0.1 + 0.2, "0.30000000000000004"),
        (2.0**70, "1180591620717411300000"),
        (-0.0, "0"),
    ],
)
def test_numbers_are_written_exactly(value: float, text: str) -> None:
    assert decimal_text(value) == text
    assert float(text) == value


def test_cpu_offload_reaches_vllm_exactly() -> None:
    """cpuOffloadGiB 1048576 reached vLLM as 1.04858e+06 (six significant digits)."""
    spec = {"model": {"modelRef": "llama-3-1-8b"}, "backend": "vllm", "kvCache": {"cpuOffloadGiB": 1048576}}
    args = container(spec, [node("h100", "h100", 8, memory="2Pi")])["args"]
    assert args[args.index("--kv-offloading-size") + 1] == "1048576"
    spec["kvCache"] = {"cpuOffloadGiB": 1.25, "memoryFraction": 0.123456789}
    args = container(spec)["args"]
    assert args[args.index("--kv-offloading-size") + 1] == "1.25"
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.123456789"


def _refused(body: dict[str, Any], field: str) -> str:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as info:
        ib(body)
    text = str(info.value)
    assert field in text, text
    return text


@pytest.mark.parametrize("name", ["--help", "-x", "a b", "tab\there", "new\nline", "nbsp\u00a0x", "\u2028", "x\x00"])
def test_a_served_name_that_an_engine_would_read_as_a_flag_or_split_is_refused(name: str) -> None:
    """servedName "--x" crash-looped the PyTorch runner (its parser read it as a flag)."""
    _refused({"model": {"modelRef": "m", "servedName": name}}, "servedName")


def test_a_served_name_reaches_the_runner_as_one_argument() -> None:
    from inference_backend.runners.pytorch.args import build_parser

    model = {
        "uri": "pvc://research-models/gpt-350m",
        "format": "pytorch",
        "parameters": "350M",
        "servedName": "a=b;c$(HF_TOKEN)",
    }
    spec = {"model": model, "hardware": {"accelerator": "cpu"}, "backend": "pytorch"}
    c = container(spec, CPU)
    assert c["args"][c["args"].index("--served-model-name") + 1] == "a=b;c$$(HF_TOKEN)"  # escaped for the kubelet
    args = build_parser().parse_args([a.replace("$$", "$") for a in c["args"]])
    assert args.served_model_name == "a=b;c$(HF_TOKEN)"


@pytest.mark.parametrize(
    "uri",
    [
        "pvc://models/../../etc/passwd.gguf",
        "pvc://models/./x.gguf",
        "pvc://Bad_Claim!/m.gguf",
        "pvc://UPPER/m.gguf",
        "pvc:///m.gguf",
        "pvc://" + "a" * 254 + "/m.gguf",
        "s3://b/../../x",
        "hf://org/repo/../x.gguf",
        "hf://org/a b",
        "https://h/a\x00b",
        "s3://b//x",
    ],
)
def test_uris_that_leave_their_store_or_name_no_claim_are_refused(uri: str) -> None:
    _refused({"model": {"uri": uri, "parameters": "1B"}}, "uri")
    from inference_backend.api.model import Model

    with pytest.raises(Exception, match="uri"):
        Model.model_validate({"metadata": {"name": "m"}, "spec": {"uri": uri}})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kvHeads": 64, "attentionHeads": 8}, "kvHeads"),
        ({"kvHeads": 3, "attentionHeads": 8}, "kvHeads"),
        ({"activeParameters": "13B", "parameters": "8B"}, "activeParameters"),
        ({"activeParameters": "8001M", "parameters": "8B"}, "activeParameters"),
        ({"hiddenSize": 4096, "headDim": 4096, "attentionHeads": 32}, "headDim"),
        ({"hiddenSize": 4096, "headDim": 32, "attentionHeads": 32}, "headDim"),
    ],
)
def test_inconsistent_models_are_refused(fields: dict[str, Any], message: str) -> None:
    """A Model with kvHeads 64 and attentionHeads 8 rendered, with the KV cache sized 8x."""
    from inference_backend.api.model import Model

    with pytest.raises(Exception, match=message):
        Model.model_validate({"metadata": {"name": "m"}, "spec": {"uri": "hf://o/m", **fields}})


@pytest.mark.parametrize(
    "fields",
    [
        {"kvHeads": 8, "attentionHeads": 32},
        {"kvHeads": 1, "attentionHeads": 14},
        {"activeParameters": "12.9B", "parameters": "46.7B"},
        {"activeParameters": "8000M", "parameters": "8B"},
        {"hiddenSize": 5376, "headDim": 128, "attentionHeads": 32},  # Gemma-3-27B
        {"hiddenSize": 1024, "headDim": 128, "attentionHeads": 16},  # Qwen3-0.6B
    ],
)
def test_published_model_shapes_are_admitted(fields: dict[str, Any]) -> None:
    from inference_backend.api.model import Model

    Model.model_validate({"metadata": {"name": "m"}, "spec": {"uri": "hf://o/m", **fields}})


def test_max_batch_tokens_follows_the_tightest_engine_flag() -> None:
    """batching.maxBatchTokens at its int64 maximum rendered llama-server's -b 9223372036854774784 (an int32)."""
    from inference_backend.decision import InvalidSpec
    from inference_backend.engines import check_spec

    cpu = {"model": {"modelRef": "llama-3-2-1b-gguf"}, "hardware": {"accelerator": "cpu"}, "backend": "llamacpp"}
    with pytest.raises(InvalidSpec, match=r"batching.maxBatchTokens must be at most 2147483647 \(llama.cpp's -b"):
        check_spec(ib({**cpu, "batching": {"maxBatchTokens": 2**31}}).spec)
    args = container({**cpu, "batching": {"maxBatchTokens": 2**31 - 1}}, CPU)["args"]
    assert args[args.index("-b") + 1] == "2147483647"


def test_a_derived_value_past_an_engine_bound_is_refused_naming_its_field() -> None:
    """llama-server's -c is the context times the slots: an int32 too."""
    from inference_backend.decision import InvalidSpec
    from inference_backend.engines import REGISTRY, llamacpp

    b = ib({"model": {"modelRef": "llama-3-2-1b-gguf"}, "hardware": {"accelerator": "cpu"}, "backend": "llamacpp"})
    d = select(b.spec, cluster(*CPU), MODELS)
    assert d.model is not None and d.backend == "llamacpp"
    from dataclasses import replace

    huge = replace(d, model=replace(d.model, context_length=2**30))
    with pytest.raises(InvalidSpec, match="renders -c") as info:
        llamacpp.container(huge, b.spec, "t")
    assert info.value.field == "spec.model.contextLength"
    assert all(b.maximum > 0 and b.source for c in REGISTRY for b in c.flag_bounds.values())


def _resources(user: dict[str, Any], nodes: list[dict[str, Any]] = GPU) -> dict[str, Any]:
    spec = {"model": {"modelRef": "llama-3-1-8b"}, "backend": "vllm", "resources": user}
    r: dict[str, Any] = container(spec, nodes)["resources"]
    return r


def test_a_request_above_the_computed_limit_raises_it() -> None:
    """requests.memory 1000Gi was merged key by key: the limit stayed at the computed value and the apiserver
    refused the Deployment on every reconcile."""
    r = _resources({"requests": {"memory": "1000Gi"}}, [node("h100", "h100", 8, memory="2Ti")])
    assert r["requests"]["memory"] == r["limits"]["memory"] == "1000Gi"


def test_a_limit_below_the_computed_request_caps_it() -> None:
    r = _resources({"limits": {"memory": "1Gi", "cpu": "500m"}})
    assert r["requests"]["memory"] == r["limits"]["memory"] == "1Gi"
    assert r["requests"]["cpu"] == r["limits"]["cpu"] == "500m"


@pytest.mark.parametrize("side", ["requests", "limits"])
def test_an_extended_resource_given_once_sets_request_and_limit(side: str) -> None:
    r = _resources({side: {"nvidia.com/gpu": 2, "hugepages-2Mi": "1Gi"}})
    for key, value in (("nvidia.com/gpu", 2), ("hugepages-2Mi", "1Gi")):
        assert r["requests"][key] == r["limits"][key] == value


@pytest.mark.parametrize(
    "user",
    [
        {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
        {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}},
        {"requests": {"hugepages-2Mi": "1Gi"}, "limits": {"hugepages-2Mi": "2Gi"}},
    ],
)
def test_requests_and_limits_that_kubernetes_refuses_are_refused_at_admission(user: dict[str, Any]) -> None:
    _refused({"model": {"modelRef": "m"}, "resources": user}, "resources")
