"""Status computation: phases, conditions with observedGeneration, stable transition times, Argo CD health."""

from __future__ import annotations

from typing import Any

from ib_testkit.factories import MODELS, cluster, node, spec
from inference_backend.selection import select
from inference_backend.status import Input, Observed, build

from tests.test_argocd_health import health

NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"
GOOD = select(spec(model={"modelRef": "llama-3-1-8b"}), cluster(node("l4", "l4", 1)), MODELS)
BAD = select(spec(model={"modelRef": "llama-3-1-70b"}), cluster(node("l4", "l4", 1)), MODELS)


def make(
    decision: Any = GOOD,
    observed: Observed | None = None,
    error: str | None = None,
    previous: dict[str, Any] | None = None,
    now: str = NOW,
    generation: int = 1,
    pod_problem: Any = None,
) -> dict[str, Any]:
    return build(
        Input(
            generation=generation,
            decision=None if error else decision,
            error=error,
            workload=observed,
            endpoint="http://x.ns.svc:8000",
            previous=previous,
            now=now,
            spec_hash="abc",
            pod_problem=pod_problem,
        )
    )


def conds(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_deploying_then_ready() -> None:
    st = make(observed=None)
    assert st["phase"] == "Deploying" and st["backend"] == "vllm" and st["ready"] == "0/0"
    types = ["BackendSelected", "Fits", "SpeculativeDecoding", "Ready", "Reconciled"]
    assert [c["type"] for c in st["conditions"]] == types
    assert all(c["observedGeneration"] == 1 for c in st["conditions"])
    ready = make(observed=Observed(1, 1, True), previous=st, now=LATER)
    assert ready["phase"] == "Ready" and ready["ready"] == "1/1" and ready["readyReplicas"] == 1
    c = conds(ready)
    assert c["Ready"]["status"] == "True" and c["Ready"]["lastTransitionTime"] == LATER
    assert c["BackendSelected"]["lastTransitionTime"] == NOW, "unchanged conditions keep their transition time"
    assert ready["decision"]["placement"]["gpuProduct"] == "NVIDIA-L4"
    assert health({"metadata": {"generation": 1}, **{"status": ready}})[0] == "Healthy"


def test_same_inputs_give_identical_status() -> None:
    first = make(observed=Observed(1, 1, True))
    assert make(observed=Observed(1, 1, True), previous=first, now=LATER) == first


def test_invalid_spec_fails_with_field() -> None:
    st = make(error="spec.model.parameters: needed to size the model")
    assert st["phase"] == "Failed"
    c = conds(st)
    assert (
        c["BackendSelected"]["reason"] == "InvalidSpec" and "spec.model.parameters" in c["BackendSelected"]["message"]
    )
    assert health({"metadata": {"generation": 1}, "status": st})[0] == "Degraded"


def test_unsatisfiable_update_keeps_serving_and_says_why() -> None:
    serving = make(observed=Observed(1, 1, True))
    st = make(BAD, observed=Observed(1, 1, True), previous=serving, generation=2, now=LATER)
    assert st["phase"] == "Degraded" and st["backend"] == "vllm", "status still names what serves"
    assert st["specHash"] == "abc" and st["observedGeneration"] == 2
    c = conds(st)
    assert c["BackendSelected"]["status"] == "False" and "does not fit" in c["Fits"]["message"]
    assert c["Ready"]["status"] == "True" and "keeps serving" in c["Ready"]["message"]
    # 70B on one L4: larger than any one node, reported with the nodes it would take
    assert st["decision"]["reasons"][-1].startswith("larger than any one node")


def test_unsatisfiable_without_deployment_fails() -> None:
    st = make(BAD)
    assert st["phase"] == "Failed" and "backend" not in st


def test_progress_deadline_is_degraded() -> None:
    st = make(observed=Observed(2, 1, True, progress_deadline_exceeded=True))
    assert st["phase"] == "Degraded" and conds(st)["Ready"]["reason"] == "ProgressDeadlineExceeded"


def test_observed_from_deployment() -> None:
    dep = {
        "spec": {"replicas": 3},
        "status": {
            "readyReplicas": 2,
            "conditions": [
                {"type": "Available", "status": "True"},
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"},
            ],
        },
    }
    assert Observed.from_deployment(dep) == Observed(3, 2, True, True)
    assert Observed.from_deployment(None) is None


def test_a_lost_replica_of_a_complete_rollout_is_degraded_then_ready() -> None:
    """A pod of a Ready backend deleted (or evicted, or killed) while the others serve: Degraded with the Ready
    condition's reason ReplicasUnavailable, until the replacement is ready; a rollout or a scale-up is Deploying."""
    ready = make(observed=Observed(2, 2, True))
    lost = make(observed=Observed(2, 1, False), previous=ready, now=LATER)
    c = conds(lost)["Ready"]
    assert (lost["phase"], lost["ready"], c["status"], c["reason"]) == (
        "Degraded",
        "1/2",
        "True",
        "ReplicasUnavailable",
    )
    assert c["message"].startswith("1/2 replicas ready: 1 of this rollout's pods stopped serving")
    still = make(observed=Observed(2, 1, False), previous=lost, now=LATER)
    assert still["phase"] == "Degraded"
    assert make(observed=Observed(2, 2, True), previous=still, now=LATER)["phase"] == "Ready"
    scaled_up = make(observed=Observed(3, 2, True), previous=ready, now=LATER)
    assert scaled_up["phase"] == "Deploying", "more replicas asked for: they are being deployed, nothing was lost"
    other = Input(2, GOOD, None, ready, LATER, "e", spec_hash="def", workload=Observed(2, 1, False))
    new_spec = build(other)
    assert new_spec["phase"] == "Deploying", "a rollout of another spec"
    assert make(observed=Observed(2, 0, False), previous=ready, now=LATER)["phase"] == "Deploying", "nothing serves"


def test_the_status_patch_nulls_what_disappeared_at_every_depth() -> None:
    """A re-selection from an L4 (GFD labels) to an A10G known by its instance type: the placement's nodeSelector
    loses the product label. A merge patch of the new status alone would keep it (merge patches merge objects key by
    key), and the status would name a selector the Deployment does not have."""
    from inference_backend.status import merge_patch

    before = {
        "phase": "Ready",
        "message": "x",
        "decision": {"placement": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}, "gpus": 1}},
        "conditions": [{"type": "Ready"}],
    }
    after = {
        "phase": "Ready",
        "decision": {"placement": {"nodeSelector": {"node.kubernetes.io/instance-type": "g5.2xlarge"}, "gpus": 1}},
        "conditions": [],
    }
    patch = merge_patch(before, after)
    assert patch == {
        "message": None,
        "phase": "Ready",
        "decision": {
            "placement": {
                "nodeSelector": {"nvidia.com/gpu.product": None, "node.kubernetes.io/instance-type": "g5.2xlarge"},
                "gpus": 1,
            }
        },
        "conditions": [],
    }
    assert merge_patch({}, after) == after and merge_patch(after, after) == after
