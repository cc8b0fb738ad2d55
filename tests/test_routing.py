"""spec.routing.inferencePool rendered (routing.py, picker.py): an InferencePool over exactly the pods the backend's
Service selects (a LeaderWorkerSet's leaders across nodes), the endpoint picker it names with its Service,
ServiceAccount and a Role of get/list/watch on what the picker reads only; the picker pinned to the Inference
Extension version that e2e builds (e2e/gomod/gie/go.mod); its scorers configured from each engine's card, each left
out (and said so) where the engine exports no metric for it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from ib_testkit import ROOT
from ib_testkit.endpoint_picker import flags
from ib_testkit.factories import MODELS, backend, cluster, node
from inference_backend import picker, routing
from inference_backend.api import InferenceBackend
from inference_backend.decision import NO_ADAPTERS, Decision
from inference_backend.engines import REGISTRY, card
from inference_backend.render import render
from inference_backend.selection import select
from inference_backend.vocabulary import WORKER_INDEX_LABEL

LLAMA = {"modelRef": "llama-3-1-8b"}
ON = {"inferencePool": {"enabled": True}}


def _config(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    deploy = next(o for k, o in objs.items() if k.startswith("Deployment/") and k.endswith("-epp"))
    text = flags(deploy["spec"]["template"]["spec"]["containers"][0]["args"])["--config-text"]
    config: dict[str, Any] = json.loads(text)
    return config


def _scorers(config: dict[str, Any]) -> dict[str, float]:
    (profile,) = config["schedulingProfiles"]
    return {p["pluginRef"]: p["weight"] for p in profile["plugins"] if "weight" in p}


def _engine_config(config: dict[str, Any]) -> dict[str, str]:
    (extractor,) = [p for p in config["plugins"] if p["type"] == "core-metrics-extractor"]
    (engine,) = extractor["parameters"]["engineConfigs"]
    assert extractor["parameters"]["defaultEngine"] == engine["name"]
    out: dict[str, str] = engine
    return out


def _objects(spec: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    ib = InferenceBackend.model_validate(backend(spec=spec))
    decision = select(ib.spec, cluster(*nodes), MODELS)
    assert decision.satisfiable, decision.reasons[-1]
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in render(ib, decision)}


def test_pool_selects_what_the_service_selects_and_names_its_picker() -> None:
    objs = _objects({"model": LLAMA, "replicas": 2, "routing": ON}, [node("g", "h100", 2)])
    pool, svc = objs["InferencePool/chat"], objs["Service/chat"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    ref = pool["spec"]["endpointPickerRef"]
    picker = objs["Service/chat-epp"]
    assert (ref["name"], ref["port"]["number"]) == ("chat-epp", picker["spec"]["ports"][0]["port"])
    deploy = objs["Deployment/chat-epp"]
    assert picker["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    # the picker's pods are not the pool's: the selectors differ on the component
    assert (
        not pool["spec"]["selector"]["matchLabels"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    args = flags(c["args"])
    assert args["--pool-name"] == "chat" and args["--pool-namespace"] == "ns"
    assert args["--metrics-endpoint-auth"] == "false" and args["--tracing"] == "false"
    assert c["image"] == f"registry.k8s.io/gateway-api-inference-extension/epp:{routing.PICKER_VERSION}"
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    assert c["readinessProbe"]["grpc"] == {"port": 9003, "service": "inference-extension"}
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == "chat-epp"


def test_least_rbac() -> None:
    objs = _objects({"model": LLAMA, "routing": ON}, [node("g", "h100")])
    role = objs["Role/chat-epp"]
    assert {
        (g, r, tuple(rule["verbs"])) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    } == {
        ("", "pods", ("get", "list", "watch")),
        ("inference.networking.k8s.io", "inferencepools", ("get", "list", "watch")),
        ("inference.networking.x-k8s.io", "inferenceobjectives", ("get", "list", "watch")),
        ("inference.networking.x-k8s.io", "inferencemodelrewrites", ("get", "list", "watch")),
    }
    binding = objs["RoleBinding/chat-epp"]
    assert binding["roleRef"]["name"] == "chat-epp"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "chat-epp", "namespace": "ns"}]


def test_off_by_default_and_across_nodes_the_leaders() -> None:
    plain = _objects({"model": LLAMA}, [node("g", "h100")])
    assert not [k for k in plain if k.startswith(("InferencePool/", "Role/"))]
    big = {
        "uri": "hf://meta-llama/Llama-3.1-405B-Instruct",
        "parameters": "405B",
        "dtype": "bfloat16",
        "contextLength": 8192,
    }
    objs = _objects(
        {"model": big, "routing": ON}, [node(f"h100-{i}", "h100", 8, cpu="192", memory="1900Gi") for i in range(2)]
    )
    assert "LeaderWorkerSet/chat-lws" in objs
    selector = objs["InferencePool/chat"]["spec"]["selector"]["matchLabels"]
    assert selector[WORKER_INDEX_LABEL] == "0" and selector == objs["Service/chat"]["spec"]["selector"]


def test_picker_version_is_the_one_e2e_builds() -> None:
    gomod = (ROOT / "e2e" / "gomod" / "gie" / "go.mod").read_text()
    assert re.search(r"sigs.k8s.io/gateway-api-inference-extension (v[0-9.]+)", gomod)[1] == routing.PICKER_VERSION  # type: ignore[index]


def test_vllm_with_adapters_scores_queue_kv_prefix_and_lora_from_its_card() -> None:
    adapters = [{"name": "sql", "uri": "hf://acme/sql-lora", "rank": 16}]
    objs = _objects({"model": LLAMA, "backend": "vllm", "adapters": adapters, "routing": ON}, [node("g", "h100")])
    config = _config(objs)
    assert config["apiVersion"] == "inference.networking.x-k8s.io/v1alpha1"
    assert _scorers(config) == {
        "queue-scorer": 2.0,
        "kv-cache-utilization-scorer": 2.0,
        "prefix-cache-scorer": 3.0,
        "lora-affinity-scorer": 1.0,
    }
    signals = REGISTRY[0].autoscaling.signals
    assert _engine_config(config) == {
        "name": "vllm",
        "queuedRequestsSpec": signals["queueDepth"].metric,
        "runningRequestsSpec": signals["runningRequests"].metric,
        "kvUsageSpec": signals["kvCacheUsage"].metric,
        "loraSpec": "vllm:lora_requests_info",
        "cacheInfoSpec": "",
    }
    assert config["schedulingProfiles"][0]["plugins"][-1] == {"pluginRef": "max-score-picker"}


def test_our_pytorch_runner_with_adapters_is_scored_by_adapter_too() -> None:
    """runners/common/metrics.py exports vLLM's vllm:lora_requests_info (tests/runners/test_adapters.py reads it)."""
    adapters = [{"name": "sql", "uri": "hf://acme/sql-lora"}]
    body = {"model": LLAMA, "backend": "pytorch", "hardware": {"accelerator": "cpu"}, "adapters": adapters}
    objs = _objects({**body, "routing": ON}, [node("c", cpu="64", memory="256Gi")])
    config = _config(objs)
    assert _scorers(config)["lora-affinity-scorer"] == 1.0
    assert _engine_config(config)["loraSpec"] == "vllm:lora_requests_info"


@pytest.mark.parametrize("engine_card", REGISTRY, ids=lambda c: c.name)
def test_each_engine_scores_only_what_its_card_exports(engine_card: Any) -> None:
    decision = Decision(backend=engine_card.name, reasons=(), prefix_cache=True, adapters=NO_ADAPTERS)
    config = picker.config(engine_card, decision)
    engine = _engine_config(config)
    scorers = _scorers(config)
    signals = engine_card.autoscaling.signals
    # a scorer on reads the card's metric; one whose metric the card lacks is off, and its spec empty (no metric)
    assert ("queue-scorer" in scorers) == ("queueDepth" in signals)
    assert engine["queuedRequestsSpec"] == (signals["queueDepth"].metric if "queueDepth" in signals else "")
    assert ("kv-cache-utilization-scorer" in scorers) == ("kvCacheUsage" in signals)
    assert engine["kvUsageSpec"] == (signals["kvCacheUsage"].metric if "kvCacheUsage" in signals else "")
    assert "lora-affinity-scorer" not in scorers and engine["loraSpec"] == ""
    (source,) = [p for p in config["plugins"] if p["type"] == "metrics-data-source"]
    assert source["parameters"]["path"] == engine_card.endpoints.metrics
    lines = picker.lines(engine_card, decision)
    assert len(lines) == 4
    for line in lines:
        kind = line.split(" ", 1)[0].rstrip(":")
        assert (kind in scorers) == ("left out" not in line), line


def test_llamacpp_and_tgi_leave_the_kv_scorer_out_and_say_why() -> None:
    for name in ("llamacpp", "tgi"):
        c = card(name)
        lines = picker.lines(c, Decision(backend=name, reasons=(), prefix_cache=True))
        (kv,) = [ln for ln in lines if ln.startswith("kv-cache-utilization-scorer")]
        assert "left out" in kv and c.autoscaling.lacks in kv


def test_no_prefix_scorer_without_the_engines_prefix_cache_and_no_lora_scorer_without_its_metric() -> None:
    sglang = card("sglang")
    assert sglang.lora.serves and not sglang.lora.info_metric
    objs = _objects(
        {
            "model": LLAMA,
            "backend": "sglang",
            "adapters": [{"name": "sql", "uri": "hf://acme/sql-lora", "rank": 16}],
            "routing": ON,
        },
        [node("g", "h100")],
    )
    assert "lora-affinity-scorer" not in _scorers(_config(objs))
    lines = picker.lines(sglang, Decision(backend="sglang", reasons=(), prefix_cache=False))
    assert any(ln.startswith("prefix-cache-scorer: left out") for ln in lines)
    config = picker.config(sglang, Decision(backend="sglang", reasons=(), prefix_cache=False))
    assert "prefix-cache-scorer" not in _scorers(config)
