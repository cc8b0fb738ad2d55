"""The plan of a reconcile as tables, with no writer at all: what is selected and rendered (complete children: the
strategy chosen from the cluster, the replicas owner), and which GPUs it holds (controller.plan)."""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import MODELS, backend, node
from inference_backend.capacity import GpuLedger
from inference_backend.controller.plan import Reservation, content_hash, make, reservation
from inference_backend.controller.world import World
from inference_backend.facts import group_nodes
from inference_backend.rollout import strategy
from inference_backend.vocabulary import APPLIED_HASH, AUTOSCALER, REPLICAS_OWNER

L4 = [node("l4-a", "l4", 1), node("l4-b", "l4", 1)]
CPU = [node("cpu-a")]
AUTO = {"minReplicas": 1, "maxReplicas": 4, "metric": "queueDepth", "target": 4}
LLAMA = {"modelRef": "llama-3-1-8b"}

# id, spec, nodes, (engine or None, a word of the error or None, the kinds rendered in order)
PLANS: list[tuple[str, dict[str, Any], list[dict[str, Any]], tuple[str | None, str | None, list[str]]]] = [
    ("one-gpu", {"model": LLAMA}, L4, ("vllm", None, ["Deployment", "Service"])),
    (
        "two-replicas",
        {"model": LLAMA, "replicas": 2},
        L4,
        ("vllm", None, ["Deployment", "Service", "PodDisruptionBudget"]),
    ),
    (
        "autoscaled",
        {"model": LLAMA, "autoscaling": AUTO},
        L4,
        ("vllm", None, ["Deployment", "Service", "PodDisruptionBudget", "ScaledObject"]),
    ),
    (
        "cpu-gguf",
        {"model": {"modelRef": "llama-3-2-3b-gguf"}, "hardware": {"accelerator": "cpu"}},
        CPU,
        ("llamacpp", None, ["Deployment", "Service"]),
    ),
    ("invalid", {"model": {"uri": "hf://x/y"}}, L4, (None, "spec.model.parameters", [])),
    ("unsatisfiable", {"model": {"modelRef": "llama-3-1-70b"}}, L4[:1], (None, None, [])),
]


def _world(nodes: list[dict[str, Any]], ledger: GpuLedger | None = None) -> World:
    return World(group_nodes(nodes), {"ns": list(MODELS.items())}, {}, ledger=ledger)


@pytest.mark.parametrize(("spec", "nodes", "expected"), [p[1:] for p in PLANS], ids=[p[0] for p in PLANS])
def test_plan(spec: dict[str, Any], nodes: list[dict[str, Any]], expected: tuple[Any, ...]) -> None:
    engine, error, kinds = expected
    plan = make(backend(spec=spec), _world(nodes), {})
    assert (plan.decision.backend if plan.satisfiable and plan.decision else None) == engine
    assert (error is None) == (plan.error is None) and (error is None or error in (plan.error or ""))
    assert [m["kind"] for m, _ in plan.manifests] == kinds
    for manifest, applied_hash in plan.manifests:
        assert applied_hash == content_hash(manifest), "the hash is of the child as applied"
        assert APPLIED_HASH not in manifest["metadata"].get("annotations", {}), "the executor adds the hash"
        assert "ownerReferences" not in manifest["metadata"], "the executor adds the owner"
    deployment = next((m for m, _ in plan.manifests if m["kind"] == "Deployment"), None)
    if deployment is not None and plan.spec is not None and plan.spec.autoscaling is not None:
        assert deployment["metadata"]["annotations"][REPLICAS_OWNER] == AUTOSCALER
        assert "replicas" not in deployment["spec"]
    if deployment is not None and plan.rollout is not None and plan.rollout.surge is not None:
        assert deployment["spec"]["strategy"] == strategy(plan.rollout.surge), "render writes the chosen strategy"


def test_the_rollout_is_chosen_from_the_cluster_and_written_by_render() -> None:
    """Two L4s, one replica: the free L4 holds a surge replica; with the other L4 held by another backend, not."""
    free = make(backend(spec={"model": LLAMA}), _world(L4), {})
    assert free.rollout is not None and free.rollout.surge is True
    ledger = GpuLedger()
    full = _world(L4, ledger)
    ledger.set(("ns", "other"), (("nvidia.com/gpu", (("nvidia.com/gpu.product", "NVIDIA-L4"),)), 1))
    held = make(backend(spec={"model": LLAMA}), full, {})
    assert held.rollout is not None and held.rollout.surge is False
    (dep, _), *_ = held.manifests
    assert dep["spec"]["strategy"] == strategy(False)


L4_POOL = ("nvidia.com/gpu", (("nvidia.com/gpu.product", "NVIDIA-L4"),))

# id, GPUs other backends hold, spec, whether something serves, expected reservation (change, hold, waits)
RESERVATIONS: list[tuple[str, int, dict[str, Any], bool, tuple[bool, Any, bool]]] = [
    ("fits", 0, {"model": LLAMA}, False, (True, (L4_POOL, 1), False)),
    ("fits-the-last", 1, {"model": LLAMA}, False, (True, (L4_POOL, 1), False)),
    ("full", 2, {"model": LLAMA}, False, (False, None, True)),
    ("two-replicas-one-free", 1, {"model": LLAMA, "replicas": 2}, False, (False, None, True)),
    ("invalid-serving", 0, {"model": {"uri": "hf://x/y"}}, True, (True, None, False)),
    ("invalid-not-serving", 0, {"model": {"uri": "hf://x/y"}}, False, (True, None, False)),
]


@pytest.mark.parametrize(
    ("others", "spec", "serving", "expected"), [r[1:] for r in RESERVATIONS], ids=[r[0] for r in RESERVATIONS]
)
def test_reservation(others: int, spec: dict[str, Any], serving: bool, expected: tuple[Any, ...]) -> None:
    ledger = GpuLedger()
    if others:
        ledger.set(("ns", "other"), (L4_POOL, others))
    world = _world(L4, ledger)
    held = reservation(make(backend(spec=spec), world, {}), world, ("ns", "chat"), serving)
    change, hold, waits = expected
    assert (held.change, held.hold, held.waiting is not None) == (change, hold, waits)


def test_without_a_ledger_nothing_is_reserved() -> None:
    world = _world(L4)
    assert reservation(make(backend(spec={"model": LLAMA}), world, {}), world, ("ns", "chat"), False) == Reservation()
