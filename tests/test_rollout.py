"""spec.rollout (issue 14 item 9): auto surges when the pool has free devices for one more replica when a rollout
starts, else replaces one pod at a time; the surge replica's GPUs are reserved while the rollout lasts; an explicit
surge with no room waits with the old pods serving; a change of free capacity alone never rewrites the strategy."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ib_testkit.factories import MODELS, backend, node
from ib_testkit.writer import FakeWriter
from inference_backend.api import InferenceBackend
from inference_backend.capacity import GpuLedger
from inference_backend.controller.reconcile import Outcome, reconcile
from inference_backend.controller.world import Child, Recent, World, slim_child
from inference_backend.facts import group_nodes
from inference_backend.render import render
from inference_backend.rollout import Live, choose
from inference_backend.selection import select
from inference_backend.vocabulary import APPLIED_HASH

GPU = {"model": {"modelRef": "llama-3-1-8b"}, "hardware": {"accelerator": "gpu"}}
A10G = ("nvidia.com/gpu", (("nvidia.com/gpu.product", "NVIDIA-A10G"),))


def body(name: str, spec: dict[str, Any], status: dict[str, Any] | None = None, generation: int = 1) -> dict[str, Any]:
    return backend(name, spec, status, generation=generation)


def live(obj: dict[str, Any], *, total: int | None = None, updated: int | None = None) -> Child:
    """The applied Deployment as the watch brings it back, with the rollout's progress in its status."""
    replicas = obj["spec"]["replicas"]
    st = {
        "readyReplicas": replicas,
        "replicas": replicas if total is None else total,
        "updatedReplicas": replicas if updated is None else updated,
        "conditions": [{"type": "Available", "status": "True"}],
    }
    return Child(obj["metadata"]["annotations"][APPLIED_HASH], slim_child("Deployment", obj["spec"], st))


def run(b: dict[str, Any], w: World) -> tuple[Outcome, FakeWriter]:
    rec = FakeWriter()
    return asyncio.run(reconcile(b, w, rec, "test", Recent())), rec


def deployment(rec: FakeWriter) -> dict[str, Any]:
    return next(o for o in rec.applied if o["kind"] == "Deployment")


def rolling(dep: dict[str, Any]) -> tuple[int, int]:
    r = dep["spec"]["strategy"]["rollingUpdate"]
    return r["maxSurge"], r["maxUnavailable"]


def changed(spec: dict[str, Any]) -> dict[str, Any]:
    """The same backend with a new pod template (an extra engine argument)."""
    return {**spec, "engine": {"extraArgs": ["--max-num-seqs=8"]}}


def serve(
    spec: dict[str, Any], gpus: int, ledger: GpuLedger, others: dict[tuple[str, str], int] | None = None
) -> tuple[Outcome, World, dict[Any, Child]]:
    """A backend serving on one A10G node with ``gpus`` devices, ``others`` holding some of them."""
    for owner, n in (others or {}).items():
        ledger.set(owner, (A10G, n))
    w = World(group_nodes([node("a10g-a", "a10g", gpus)]), {"ns": list(MODELS.items())}, {}, ledger=ledger)
    first, rec = run(body("chat", spec), w)
    children = {
        ("ns", o["metadata"]["name"], o["kind"]): live(o)
        if o["kind"] == "Deployment"
        else Child(o["metadata"]["annotations"][APPLIED_HASH])
        for o in rec.applied
    }
    w.children = children
    return first, w, children


def test_auto_surges_a_template_change_when_the_pool_holds_one_more_replica_and_reserves_it() -> None:
    ledger = GpuLedger()
    first, w, _ = serve(GPU, 2, ledger)
    out, rec = run(body("chat", changed(GPU), first.status, generation=2), w)
    assert rolling(deployment(rec)) == (1, 0), "a new pod starts before the old one stops"
    assert ledger.held(("ns", "chat")) == (A10G, 2), "the surge replica's GPU is reserved while the rollout lasts"
    assert out.status["rollout"]["strategy"] == "surge"
    assert "1 free NVIDIA-A10G (nvidia.com/gpu) hold one more replica's 1" in out.status["rollout"]["reason"]


def test_auto_replaces_one_at_a_time_when_the_pool_is_full() -> None:
    ledger = GpuLedger()
    first, w, _ = serve(GPU, 2, ledger, {("ns", "other"): 1})
    out, rec = run(body("chat", changed(GPU), first.status, generation=2), w)
    assert rolling(deployment(rec)) == (0, 1)
    assert ledger.held(("ns", "chat")) == (A10G, 1)
    assert out.status["rollout"] == {
        "strategy": "recreate",
        "reason": "auto: recreate, 0 free NVIDIA-A10G (nvidia.com/gpu) cannot hold one more replica's 1: one old "
        "pod stops before its replacement starts",
    }


def test_the_surge_reservation_ends_with_the_rollout() -> None:
    ledger = GpuLedger()
    first, w, children = serve(GPU, 2, ledger)
    second, rec = run(body("chat", changed(GPU), first.status, generation=2), w)
    dep = deployment(rec)
    key = ("ns", dep["metadata"]["name"], "Deployment")
    w.children = {**children, key: live(dep, total=2, updated=1)}  # old pod still there, new one starting
    _, rec = run(body("chat", changed(GPU), second.status, generation=2), w)
    assert rec.applied == [] and ledger.held(("ns", "chat")) == (A10G, 2)
    w.children = {**children, key: live(dep)}  # rolled out
    out, rec = run(body("chat", changed(GPU), second.status, generation=2), w)
    assert rec.applied == [] and ledger.held(("ns", "chat")) == (A10G, 1) and out.freed


def test_a_change_of_free_capacity_alone_never_rewrites_the_strategy() -> None:
    ledger = GpuLedger()
    first, w, _ = serve(GPU, 2, ledger)  # first apply: room for a surge
    assert first.status["rollout"]["strategy"] == "surge"
    ledger.set(("ns", "other"), (A10G, 1))  # the free GPU is taken
    out, rec = run(body("chat", GPU, first.status), w)
    assert rec.applied == [], "the live Deployment keeps its strategy until the next rollout"
    assert out.status["rollout"] == first.status["rollout"], "the reason given when it was chosen stays"
    assert "1 free NVIDIA-A10G" in out.status["rollout"]["reason"]


def test_a_status_without_the_reason_says_the_strategy_was_kept() -> None:
    ledger = GpuLedger()
    first, w, _ = serve(GPU, 2, ledger)
    out, _ = run(body("chat", GPU, {k: v for k, v in first.status.items() if k != "rollout"}), w)
    assert out.status["rollout"] == {
        "strategy": "surge",
        "reason": "auto: surge, chosen when the current template was rolled out",
    }


def test_explicit_surge_without_room_waits_and_the_old_pods_keep_serving() -> None:
    spec = {**GPU, "rollout": {"strategy": "surge"}}
    ledger = GpuLedger()
    first, w, _ = serve(spec, 1, ledger)
    out, rec = run(body("chat", changed(spec), first.status, generation=2), w)
    assert rec.applied == [], "nothing applied: the surge pod would never be scheduled"
    assert out.status["phase"] == "Degraded" and out.status["specHash"] == first.status["specHash"]
    ready = next(c for c in out.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "InsufficientCapacity"
    assert (
        "needs 2 NVIDIA-A10G (nvidia.com/gpu; 1 replica(s) + 1 surge replica (spec.rollout.strategy surge) x 1)"
        in ready["message"]
    )


def test_explicit_recreate_never_reserves_more() -> None:
    spec = {**GPU, "rollout": {"strategy": "recreate"}}
    ledger = GpuLedger()
    first, w, _ = serve(spec, 4, ledger)
    out, rec = run(body("chat", changed(spec), first.status, generation=2), w)
    assert rolling(deployment(rec)) == (0, 1) and ledger.held(("ns", "chat")) == (A10G, 1)
    assert out.status["rollout"] == {"strategy": "recreate", "reason": "spec.rollout.strategy is recreate"}


@pytest.mark.parametrize(("asked", "expected"), [("auto", None), ("surge", (1, 0)), ("recreate", (0, 1))])
def test_cpu_auto_keeps_kubernetes_default_and_explicit_choices_render(asked: str, expected: Any) -> None:
    ib = InferenceBackend.model_validate(
        {
            "metadata": {"name": "edge", "namespace": "ns"},
            "spec": {
                "model": {"modelRef": "llama-3-2-1b-gguf"},
                "hardware": {"accelerator": "cpu"},
                "rollout": {"strategy": asked},
            },
        }
    )
    decision = select(ib.spec, group_nodes([node("cpu-a")]), MODELS)
    dep = next(o for o in render(ib, decision) if o["kind"] == "Deployment")
    assert (rolling(dep) if "strategy" in dep["spec"] else None) == expected
    choice = choose(ib.spec, decision, group_nodes([node("cpu-a")]), {}, None, None)
    assert choice.surge == (None if asked == "auto" else asked == "surge") and choice.extra == 0


def test_live_reads_the_strategy_and_progress_of_a_deployment() -> None:
    def dep(strategy: dict[str, Any], st: dict[str, Any]) -> dict[str, Any]:
        return {
            "spec": {
                "replicas": 2,
                "strategy": {"rollingUpdate": strategy},
                "template": {"metadata": {"annotations": {"h": "x"}}},
            },
            "status": st,
        }

    assert Live.from_deployment(dep({"maxSurge": 1, "maxUnavailable": 0}, {"replicas": 3}), "h") == Live(
        "x", True, True
    )
    assert Live.from_deployment(dep({"maxSurge": 0, "maxUnavailable": 1}, {"updatedReplicas": 2}), "h") == Live(
        "x", False, False
    )
    assert Live.from_deployment(dep({}, {"updatedReplicas": 1}), "h") == Live("x", None, True)
    assert Live.from_deployment(None, "h") is None
