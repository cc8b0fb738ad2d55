"""spec.routing.inferencePool rendered (routing.py): an InferencePool over exactly the pods the backend's Service
selects (a LeaderWorkerSet's leaders across nodes), the endpoint picker it names with its Service, ServiceAccount and
a Role of get/list/watch on pods and inferencepools only; the picker pinned to the Inference Extension version that
e2e builds (e2e/gomod/gie/go.mod)."""

from __future__ import annotations

import re
from typing import Any

from ib_testkit import ROOT
from ib_testkit.factories import MODELS, backend, cluster, node
from inference_backend import routing
from inference_backend.api import InferenceBackend
from inference_backend.render import render
from inference_backend.selection import select
from inference_backend.vocabulary import WORKER_INDEX_LABEL

LLAMA = {"modelRef": "llama-3-1-8b"}
ON = {"inferencePool": {"enabled": True}}


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
    args = dict(zip(c["args"][::2], c["args"][1::2], strict=True))
    assert args["--pool-name"] == "chat" and args["--pool-namespace"] == "ns"
    assert c["image"] == f"registry.k8s.io/gateway-api-inference-extension/lwepp:{routing.PICKER_VERSION}"
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
