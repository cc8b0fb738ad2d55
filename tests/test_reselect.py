"""A placement whose pods stay unschedulable past the grace period is selected again elsewhere (issue 14 item 2):
only when every pod of the serving template waits for want of nodes (a volume problem stays put: moving would not
help), the reasons and status.decision.avoided say why, the next reconciles keep leaving it, and before the grace
period ends the reconcile asks to be run again when it does. The real scheduler's Pending pods are e2e's
(e2e/test_unschedulable.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from ib_testkit.factories import MODELS, backend, node
from ib_testkit.writer import FakeWriter
from inference_backend.controller.config import Config
from inference_backend.controller.reconcile import Outcome, reconcile
from inference_backend.controller.world import Child, Recent, World
from inference_backend.facts import group_nodes
from inference_backend.pods import PodProblem, PodSummary, stuck_since, summarize
from inference_backend.vocabulary import APPLIED_HASH

T0 = 1_800_000_000.0
STAMP = "2027-01-15T08:00:00Z"  # T0
NO_GPU = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available"


def pod(name: str, spec_hash: str, message: str = NO_GPU, scheduled: bool = False) -> dict[str, Any]:
    cond = {
        "type": "PodScheduled",
        "status": "True" if scheduled else "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": STAMP,
    }
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {"serving.inferencebackend.io/spec-hash": spec_hash},
        },
        "spec": {},
        "status": {"phase": "Pending", "conditions": [cond]},
    }


def test_a_pod_summary_keeps_when_it_became_unschedulable_its_template_and_whether_a_volume_is_why() -> None:
    s = summarize(pod("p", "h1"))
    assert s is not None and s.unschedulable_since == T0 and s.spec_hash == "h1" and not s.volume_bound
    pvc = summarize(pod("q", "h1", '0/3 nodes are available: persistentvolumeclaim "models" not found'))
    assert pvc is not None and pvc.volume_bound
    ok = summarize(pod("r", "h1", scheduled=True))
    assert ok is not None and ok.unschedulable_since is None


def test_stuck_only_when_every_pod_of_the_serving_template_waits_for_nodes() -> None:
    a, b = summarize(pod("a", "h1")), summarize(pod("b", "h1"))
    running = PodSummary("c", "Running", (), None, "h1")
    old = summarize(pod("d", "h0"))
    assert a is not None and b is not None and old is not None
    assert stuck_since([a, b], "h1") == (T0, NO_GPU)
    assert stuck_since([a, running], "h1") is None, "one pod runs: the nodes can take it"
    assert stuck_since([old], "h1") is None, "pods of an older template do not count"
    pvc = summarize(pod("e", "h1", "persistentvolumeclaim not found"))
    assert pvc is not None and stuck_since([a, pvc], "h1") is None


SPEC = {"model": {"modelRef": "llama-3-1-8b"}, "hardware": {"gpuProducts": ["NVIDIA-L4", "NVIDIA-A10G"]}}


def body(st: dict[str, Any] | None = None) -> dict[str, Any]:
    return backend("chat", SPEC, st, uid="u-1")


def children(applied: list[dict[str, Any]]) -> dict[tuple[str, str, str], Child]:
    """What the cluster holds after ``applied``: the Deployment live but with no ready replica."""
    live = {"spec": {"replicas": 1}, "status": {"readyReplicas": 0, "conditions": []}}
    return {
        ("ns", o["metadata"]["name"], o["kind"]): Child(
            o["metadata"]["annotations"][APPLIED_HASH], live if o["kind"] == "Deployment" else {}
        )
        for o in applied
    }


def world(
    pods: list[PodSummary], now: float, applied: list[dict[str, Any]], nodes: list[dict[str, Any]] | None = None
) -> World:
    classes = group_nodes(nodes or [node("l4-a", "l4"), node("a10g-a", "a10g")])
    return World(
        classes,
        {"ns": list(MODELS.items())},
        children(applied),
        pods={("ns", "chat"): pods},
        config=Config(unschedulable_grace=300),
        clock=lambda: now,
    )


def run(b: dict[str, Any], w: World) -> tuple[Outcome, FakeWriter]:
    rec = FakeWriter()
    return asyncio.run(reconcile(b, w, rec, "test", Recent())), rec


def product(out: Outcome) -> str:
    return str(out.status["decision"]["placement"]["gpuProduct"])


def test_past_the_grace_period_the_backend_moves_and_says_why_and_does_not_move_back() -> None:
    first, rec0 = run(
        body(), World(group_nodes([node("l4-a", "l4"), node("a10g-a", "a10g")]), {"ns": list(MODELS.items())}, {})
    )
    assert product(first) == "NVIDIA-L4"
    stuck = [PodSummary("chat-1", "Pending", (PodProblem("Unschedulable", NO_GPU),), T0, first.status["specHash"])]

    early, rec = run(body(first.status), world(stuck, T0 + 100, rec0.applied))
    assert product(early) == "NVIDIA-L4" and rec.applied == [], "within the grace period nothing moves"
    assert early.recheck_after is not None and 200 <= early.recheck_after <= 202

    moved, rec = run(body(first.status), world(stuck, T0 + 301, rec0.applied))
    assert product(moved) == "NVIDIA-A10G" and moved.recheck_after is None
    assert [o["kind"] for o in rec.applied][:1] == ["Deployment"]
    dep = next(o for o in rec.applied if o["kind"] == "Deployment")
    assert dep["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A10G"
    why = next(r for r in moved.status["decision"]["reasons"] if "stayed unschedulable" in r)
    assert "vllm on 1x NVIDIA-L4 stayed unschedulable past the grace period (300 s)" in why and NO_GPU in why
    avoided = moved.status["decision"]["avoided"]
    assert avoided["backend"] == "vllm" and avoided["placement"]["gpuProduct"] == "NVIDIA-L4"

    # The next reconcile: the new template has no pods yet and the old ones are going; the move holds.
    w = world(stuck, T0 + 302, rec0.applied + rec.applied)
    again, rec2 = run(body(moved.status), w)
    assert product(again) == "NVIDIA-A10G" and again.status["decision"]["avoided"] == avoided
    assert again.status["decision"]["reasons"] == moved.status["decision"]["reasons"]
    assert rec2.applied == [], "the moved children are in place: nothing is applied again"


def test_with_nowhere_else_to_go_it_stays_and_says_so() -> None:
    only = [node("l4-a", "l4")]
    first, rec0 = run(body(), World(group_nodes(only), {"ns": list(MODELS.items())}, {}))
    stuck = [PodSummary("chat-1", "Pending", (PodProblem("Unschedulable", NO_GPU),), T0, first.status["specHash"])]
    out, _ = run(body(first.status), world(stuck, T0 + 400, rec0.applied, only))
    assert product(out) == "NVIDIA-L4" and "avoided" not in out.status["decision"]
    assert any("no other placement fits, so it stays there" in r for r in out.status["decision"]["reasons"])
