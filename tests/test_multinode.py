"""Multi-node serving in the operator: the LeaderWorkerSet child, its readiness roll-up, the GPU ledger (nodes x
GPUs per node, rebuilt from the applied LeaderWorkerSets), the planned switch between a Deployment and a
LeaderWorkerSet (the old one serves until the new one is available), and a cluster without the LWS CRD (a
condition naming it, a bounded recheck, no failure)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2 as httpx
import pytest
from ib_testkit.factories import MODELS, backend, node
from ib_testkit.writer import FakeWriter
from inference_backend.api.model import ModelSpec
from inference_backend.capacity import GpuLedger
from inference_backend.controller.actions import CRD_RECHECK
from inference_backend.controller.reconcile import reconcile
from inference_backend.controller.state import Indexes, OperatorState
from inference_backend.controller.world import Child, Recent, World, slim_child
from inference_backend.facts import group_nodes
from inference_backend.vocabulary import APPLIED_HASH
from lightkube.core.exceptions import ApiError

H100 = ("nvidia.com/gpu", (("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),))
"""The pool of GFD-labelled H100s (facts/pools.py: resource, identifying label)."""
REGISTRY = dict(MODELS) | {
    "llama-3-1-405b": ModelSpec.model_validate(
        {
            "uri": "hf://meta-llama/Llama-3.1-405B-Instruct",
            "parameters": "405B",
            "dtype": "bfloat16",
            "contextLength": 8192,
        }
    ),
}
BIG = {"model": {"modelRef": "llama-3-1-405b"}}
SMALL = {"model": {"modelRef": "llama-3-1-8b"}}


def _not_found(namespace: str, name: str, as_json: bool = False) -> Exception:
    """What lightkube raises for an apply of a kind the apiserver does not serve: kube-apiserver v1.36.3 answers an
    unknown group/version with a plain-text "404 page not found" (seen in e2e/test_multinode_operator.py), which
    lightkube leaves as the HTTP client's HTTPStatusError; a JSON Status body becomes an ApiError."""
    url = f"https://127.0.0.1/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets/{name}"
    request = httpx.Request("PATCH", url)
    if as_json:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "NotFound",
            "code": 404,
            "message": "the server could not find the requested resource",
        }
        return ApiError(request=request, response=httpx.Response(404, json=body, request=request))
    response = httpx.Response(
        404, text="404 page not found\n", request=request, headers={"Content-Type": "text/plain; charset=utf-8"}
    )
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError("a 404 response raises")


def body(spec: dict[str, Any], status: dict[str, Any] | None = None, name: str = "big") -> dict[str, Any]:
    return backend(name, spec, status, uid="u-1")


def h100s(n: int) -> list[dict[str, Any]]:
    return [node(f"h100-{i}", "h100", 8, cpu="192", memory="1900Gi") for i in range(n)]


def world(
    children: dict[tuple[str, str, str], Child] | None = None, ledger: GpuLedger | None = None, nodes: int = 2
) -> World:
    return World(group_nodes(h100s(nodes)), {"ns": list(REGISTRY.items())}, children or {}, ledger=ledger)


def run(b: dict[str, Any], w: World, rec: FakeWriter) -> Any:
    return asyncio.run(reconcile(b, w, rec, "test"))


def ready(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def child(obj: dict[str, Any], st: dict[str, Any] | None = None, owner: str = "big") -> Child:
    """What the handlers' index keeps of an applied object (handlers._child), with the status the controller set."""
    slim = slim_child(obj["kind"], obj.get("spec") or {}, st or {})
    return Child(obj["metadata"]["annotations"][APPLIED_HASH], slim, owner=owner)


def available(ready_replicas: int = 1) -> dict[str, Any]:
    return {"readyReplicas": ready_replicas, "conditions": [{"type": "Available", "status": "True"}]}


def test_405b_applies_a_leaderworkerset_and_the_ledger_holds_nodes_x_gpus_per_node() -> None:
    ledger, rec = GpuLedger(), FakeWriter()
    out = run(body({**BIG, "replicas": 1}), world(ledger=ledger), rec)
    assert [o["kind"] for o in rec.applied] == ["LeaderWorkerSet", "Service"]
    lws = rec.applied[0]
    assert lws["metadata"]["name"] == "big-lws" and lws["metadata"]["ownerReferences"][0]["name"] == "big"
    assert ledger.held(("ns", "big")) == (H100, 16), "2 nodes x 8 GPUs per replica"
    placement = out.status["decision"]["placement"]
    assert (placement["nodes"], placement["gpusPerNode"], placement["pipelineParallelSize"]) == (2, 8, 2)
    assert out.status["phase"] == "Deploying" and out.status["specHash"]
    selected = next(c for c in out.status["conditions"] if c["type"] == "BackendSelected")
    assert "2 nodes x 8x NVIDIA-H100-80GB-HBM3" in selected["message"]
    reasons = "\n".join(out.status["decision"]["reasons"])
    assert "memory per node: " in reasons and "NVLink" in reasons and "cluster network" in reasons


def test_ready_rolls_up_the_leaderworkerset_status() -> None:
    rec = FakeWriter()
    first = run(body(BIG), world(), rec)
    children = {("ns", o["metadata"]["name"], o["kind"]): child(o) for o in rec.applied}
    lws_key = ("ns", "big-lws", "LeaderWorkerSet")
    children[lws_key] = child(
        rec.applied[0],
        {
            "readyReplicas": 0,
            "conditions": [{"type": "Available", "status": "False"}, {"type": "Progressing", "status": "True"}],
        },
    )
    out = run(body(BIG, first.status), world(children), FakeWriter())
    assert out.status["phase"] == "Deploying" and out.status["ready"] == "0/1"
    children[lws_key] = child(rec.applied[0], available())
    again = FakeWriter()
    out = run(body(BIG, out.status), world(children), again)
    assert out.status["phase"] == "Ready" and out.status["ready"] == "1/1" and ready(out.status)["status"] == "True"
    assert again.applied == [] and again.deleted == [], "nothing to apply: the hashes match"


@pytest.mark.parametrize("as_json", [False, True], ids=["plain-text-404", "json-status-404"])
def test_without_the_lws_crd_the_status_names_it_and_rechecks_later(as_json: bool) -> None:
    """No crash, no hot loop: a condition naming the CRD, a recheck a minute later, nothing else applied."""
    missing = _not_found("ns", "big-lws", as_json)
    ledger, rec = GpuLedger(), FakeWriter().fail(missing, call="apply", kind="LeaderWorkerSet")
    out = run(body(BIG), world(ledger=ledger), rec)
    assert rec.applied == [], "no Service for a workload that cannot exist"
    cond = ready(out.status)
    assert cond["reason"] == "CRDMissing" and cond["status"] == "False"
    assert "leaderworkersets.leaderworkerset.x-k8s.io" in cond["message"]
    assert out.status["phase"] == "Pending" and out.recheck_after == CRD_RECHECK
    reconciled = next(c for c in out.status["conditions"] if c["type"] == "Reconciled")
    assert reconciled["status"] == "True", "a missing CRD is a state of the cluster, not a failed reconcile"


def test_a_single_node_backend_keeps_working_without_the_lws_crd() -> None:
    rec = FakeWriter().fail(_not_found("ns", "chat-lws"), call="apply", kind="LeaderWorkerSet")
    out = run(body(SMALL, name="chat"), world(), rec)
    assert [o["kind"] for o in rec.applied] == ["Deployment", "Service"]
    assert out.status["phase"] == "Deploying" and ready(out.status)["reason"] == "Deploying"


def _deployed(spec: dict[str, Any], nodes: int) -> tuple[dict[str, Any], dict[tuple[str, str, str], Child]]:
    """The status and children of ``spec`` applied and available."""
    rec = FakeWriter()
    out = run(body(spec), world(nodes=nodes), rec)
    workload = rec.applied[0]["kind"]
    children = {
        ("ns", o["metadata"]["name"], o["kind"]): child(o, available() if o["kind"] == workload else None)
        for o in rec.applied
    }
    return out.status, children


def test_deployment_to_leaderworkerset_keeps_the_deployment_serving_until_the_new_one_is_available() -> None:
    # serving on one node: 8B on a Deployment, Service selecting every serving pod
    status, children = _deployed(SMALL, 2)
    dep_service = children[("ns", "big", "Service")]
    # the spec grows to a model larger than a node: the LeaderWorkerSet is applied, the Service is not touched
    grown = {**BIG}
    rec = FakeWriter()
    out = run(body(grown, status), world(children), rec)
    assert [o["kind"] for o in rec.applied] == ["LeaderWorkerSet"], "the Service keeps routing to the Deployment"
    assert rec.deleted == []
    cond = ready(out.status)
    assert (cond["reason"], cond["status"], out.status["phase"]) == ("SwitchingWorkload", "True", "Deploying")
    assert "the Deployment keeps serving until the LeaderWorkerSet is available" in cond["message"]
    # the LeaderWorkerSet comes up but is not available yet: still nothing more
    lws = rec.applied[0]
    children[("ns", "big-lws", "LeaderWorkerSet")] = child(lws, {"readyReplicas": 0, "conditions": []})
    rec = FakeWriter()
    out = run(body(grown, out.status), world(children), rec)
    assert rec.applied == [] and rec.deleted == [] and ready(out.status)["reason"] == "SwitchingWorkload"
    # available: the Service moves to the leaders and the Deployment is deleted
    children[("ns", "big-lws", "LeaderWorkerSet")] = child(lws, available())
    rec = FakeWriter()
    out = run(body(grown, out.status), world(children), rec)
    assert [o["kind"] for o in rec.applied] == ["Service"]
    assert rec.applied[0]["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert rec.applied[0]["metadata"]["annotations"][APPLIED_HASH] != dep_service.applied_hash
    assert rec.deleted == [("Deployment", "ns", "big")]
    assert out.status["phase"] == "Ready"


def test_leaderworkerset_to_deployment_is_the_same_planned_switch() -> None:
    status, children = _deployed(BIG, 2)
    rec = FakeWriter()
    out = run(body(SMALL, status), world(children), rec)
    assert [o["kind"] for o in rec.applied] == ["Deployment"] and rec.deleted == []
    assert "the LeaderWorkerSet keeps serving until the Deployment is available" in ready(out.status)["message"]
    dep = rec.applied[0]
    children[("ns", "big", "Deployment")] = child(dep, available())
    rec = FakeWriter()
    out = run(body(SMALL, out.status), world(children), rec)
    assert [o["kind"] for o in rec.applied] == ["Service"] and rec.deleted == [("LeaderWorkerSet", "ns", "big-lws")]
    assert "leaderworkerset.sigs.k8s.io/worker-index" not in rec.applied[0]["spec"]["selector"]


def test_reservations_are_rebuilt_from_the_applied_leaderworkersets() -> None:
    """A restarted operator holds what each LeaderWorkerSet requests: replicas x group size pods of 8 GPUs."""
    rec = FakeWriter()
    run(body({**BIG, "replicas": 2}), world(nodes=4), rec)
    lws = rec.applied[0]
    assert lws["spec"]["replicas"] == 2 and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    index = {("ns", "big-lws", "LeaderWorkerSet"): [child(lws)]}
    st = OperatorState(Indexes(models={}, deployments={}, services={}, pdbs={}, backends={}, lws=index))
    st.seed_reservations()
    assert st.gpus.held(("ns", "big")) == (H100, 32), "2 replicas x 2 nodes x 8 GPUs, held by the owner"
    assert st.gpus.held(("ns", "big-lws")) is None


def test_gpus_in_use_without_a_ledger_counts_leaderworkersets_by_their_owner() -> None:
    rec = FakeWriter()
    run(body(BIG), world(), rec)
    w = world({("ns", "big-lws", "LeaderWorkerSet"): child(rec.applied[0])})
    assert w.gpus_in_use(("ns", "other")) == {H100: 16}
    assert w.gpus_in_use(("ns", "big")) == {}, "its own GPUs are not in use by others"


def test_switching_back_within_moments_applies_the_deleted_workload_again() -> None:
    """One node -> several -> one again, quicker than the operator's trust in its own recent writes (15 s): the
    Deployment deleted by the first switch is applied again by the second, not skipped as "applied lately" (found on
    the real control plane, e2e/test_multinode_operator.py)."""
    recent, children = Recent(), {}

    def step(spec: dict[str, Any], status: dict[str, Any]) -> tuple[FakeWriter, Any]:
        rec = FakeWriter()
        out = asyncio.run(reconcile(body(spec, status), world(children), rec, "test", recent))
        for o in rec.applied:
            workload = o["kind"] in ("Deployment", "LeaderWorkerSet")
            children[("ns", o["metadata"]["name"], o["kind"])] = child(o, available() if workload else None)
        for kind, _, name in rec.deleted:
            children.pop(("ns", name, kind))
        return rec, out

    rec, out = step(SMALL, {})
    assert [o["kind"] for o in rec.applied] == ["Deployment", "Service"]
    rec, out = step(BIG, out.status)  # the LeaderWorkerSet, available at once
    rec, out = step(BIG, out.status)  # the Service moves, the Deployment is deleted
    assert rec.deleted == [("Deployment", "ns", "big")]
    rec, out = step(SMALL, out.status)
    assert [o["kind"] for o in rec.applied] == ["Deployment"], "the same Deployment as before, applied again"
    rec, out = step(SMALL, out.status)
    assert rec.deleted == [("LeaderWorkerSet", "ns", "big-lws")] and out.status["phase"] == "Ready"


def test_autoscaling_a_replica_spanning_nodes_is_refused_naming_the_field() -> None:
    rec = FakeWriter()
    spec = {**BIG, "autoscaling": {"minReplicas": 1, "maxReplicas": 2, "metric": "queueDepth", "target": 4}}
    out = run(body(spec), world(nodes=4), rec)
    assert rec.applied == [] and out.error is not None
    assert out.error.startswith("spec.autoscaling: a replica spanning nodes (a LeaderWorkerSet) is not autoscaled")
