"""What a reconcile writes, as tables, with no writer at all (controller.actions): the order of the writes and the
guard each is under (never adopt, the replicas hand-off, the hash already applied, the children left alone while
the workload changes kind, the deletion of what the plan no longer has, a CRD found missing lately)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ib_testkit import platforms as P
from ib_testkit.factories import MODELS, backend, node
from ib_testkit.golden import INPUTS, decide
from inference_backend.api import InferenceBackend
from inference_backend.api.model import ModelSpec
from inference_backend.controller.actions import (
    CHILDREN,
    SCALER_RETRY,
    Apply,
    Delete,
    child_kind,
    kept,
    live_workloads,
    plan_writes,
)
from inference_backend.controller.plan import Plan, make
from inference_backend.controller.world import Child, Recent, World, slim_child
from inference_backend.facts import group_nodes
from inference_backend.render import render_result

OWNER = ("ns", "chat")
LLAMA = {"modelRef": "llama-3-1-8b"}
AUTO = {"minReplicas": 1, "maxReplicas": 4, "metric": "queueDepth", "target": 4}
BIG = {"modelRef": "llama-3-1-405b"}
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
NODES = [node(f"h100-{i}", "h100", 8, cpu="192", memory="1900Gi") for i in range(2)]
AVAILABLE = {"readyReplicas": 1, "replicas": 1, "conditions": [{"type": "Available", "status": "True"}]}
STARTING = {"readyReplicas": 0, "replicas": 1, "conditions": []}


def _world(children: dict[tuple[str, str, str], Child] | None = None, nodes: list[Any] | None = None) -> World:
    return World(group_nodes(nodes or NODES), {"ns": list(REGISTRY.items())}, children or {})


def _plan(spec: dict[str, Any], previous: dict[str, Any] | None = None) -> Plan:
    return make(backend(spec=spec), _world(), previous or {})


def _live(
    plan: Plan,
    status: dict[str, Any] | None = None,
    *,
    kinds: tuple[str, ...] = (),
    hashes: dict[str, str] | None = None,
    owner: str | None = "autoscaler",
) -> dict[Any, Child]:
    """The children of ``plan`` as the index holds them once applied (``kinds``: only those), its workload with
    ``status``; ``hashes``: kind -> another applied hash (drift); ``owner``: the Deployment's replicas owner."""
    out = {}
    for manifest, applied in plan.manifests:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        if kind == "ScaledObject" or (kinds and kind not in kinds):
            continue
        slim = slim_child(kind, manifest["spec"], status or AVAILABLE)
        out[("ns", name, kind)] = Child(
            (hashes or {}).get(kind, applied), slim, owner if kind == "Deployment" else None
        )
    return out


def _writes(
    plan: Plan,
    children: dict[Any, Child],
    previous: dict[str, Any] | None = None,
    recent: Recent | None = None,
    now: float = 100.0,
) -> list[tuple[Any, ...]]:
    world = _world(children)
    actions = plan_writes(
        plan, OWNER, world, previous or {}, recent or Recent(), live_workloads(world, OWNER, plan), now
    )
    return [
        ("apply", a.child.kind, a.manifest["metadata"]["name"], a.adopt_check, a.hand_off)
        if isinstance(a, Apply)
        else ("delete", a.kind, a.name, a.reason)
        for a in actions.writes
    ]


SMALL = _plan({"model": LLAMA})
SCALED = _plan({"model": LLAMA, "autoscaling": AUTO})
FIXED2 = _plan({"model": LLAMA, "replicas": 2})
MULTI = _plan({"model": BIG})
ROUTED = _plan({"model": LLAMA, "routing": {"inferencePool": {"enabled": True}}})
SCALER_ENTRY = {"scaledObject": "chat", "appliedHash": "old"}
POOL_ENTRY = {"inferencePool": "chat", "endpointPicker": "chat-epp", "appliedHash": "old"}
PICKER = [
    ("apply", k, "chat-epp", True, None) for k in ("ServiceAccount", "Role", "RoleBinding", "Deployment", "Service")
]

# id, plan, live children, the status before, the writes in order: (apply, kind, name, adopt check, hand-off) or
# (delete, kind, name, failure reason)
TABLE: list[tuple[str, Plan, dict[Any, Child], dict[str, Any], list[tuple[Any, ...]]]] = [
    (
        "first-apply",
        SMALL,
        {},
        {},
        [("apply", "Deployment", "chat", True, None), ("apply", "Service", "chat", True, None)],
    ),
    ("unchanged", SMALL, _live(SMALL), {}, []),
    (
        "drift-of-one-child",
        SMALL,
        _live(SMALL, hashes={"Service": "x"}),
        {},
        [("apply", "Service", "chat", False, None)],
    ),
    (
        "autoscaling-on-hands-off-first",
        SCALED,
        _live(FIXED2, kinds=("Deployment",), owner=None),
        {},
        [
            ("apply", "Deployment", "chat", False, 2),
            ("apply", "Service", "chat", True, None),
            ("apply", "PodDisruptionBudget", "chat", True, None),
            ("apply", "ScaledObject", "chat", True, None),
        ],
    ),
    (
        "autoscaled-already-owned",
        SCALED,
        _live(SCALED, hashes={"Deployment": "x"}),
        {"autoscaling": SCALER_ENTRY},
        [("apply", "Deployment", "chat", False, None), ("apply", "ScaledObject", "chat", False, None)],
    ),
    (
        "scaler-recorded-in-the-status",
        SCALED,
        _live(SCALED),
        {
            "autoscaling": {
                **SCALER_ENTRY,
                "appliedHash": dict((m["kind"], h) for m, h in SCALED.manifests)["ScaledObject"],
            }
        },
        [],
    ),
    (
        "autoscaling-off-deletes-the-scaler-first",
        FIXED2,
        _live(FIXED2, hashes={"Deployment": "x"}),
        {"autoscaling": SCALER_ENTRY},
        [("delete", "ScaledObject", "chat", "ApplyFailed"), ("apply", "Deployment", "chat", False, None)],
    ),
    (
        "routing-first-apply",
        ROUTED,
        {},
        {},
        [
            ("apply", "Deployment", "chat", True, None),
            ("apply", "Service", "chat", True, None),
            ("apply", "InferencePool", "chat", True, None),
            *PICKER,
        ],
    ),
    (
        "routing-pool-recorded-in-the-status",
        ROUTED,
        _live(ROUTED, kinds=("Deployment", "Service")),
        {"routing": {**POOL_ENTRY, "appliedHash": dict((m["kind"], h) for m, h in ROUTED.manifests)["InferencePool"]}},
        [("apply", k, "chat-epp", True, None) for k in ("ServiceAccount", "Role", "RoleBinding")],
    ),
    (
        "routing-off-deletes-the-pool-and-its-picker",
        SMALL,
        _live(SMALL),
        {"routing": POOL_ENTRY},
        [
            ("delete", "InferencePool", "chat", "ApplyFailed"),
            *[
                ("delete", k, "chat-epp", "DeleteFailed")
                for k in ("Deployment", "Service", "RoleBinding", "Role", "ServiceAccount")
            ],
        ],
    ),
    ("switch-to-lws-first-apply", MULTI, _live(SMALL), {}, [("apply", "LeaderWorkerSet", "chat-lws", True, None)]),
    ("switch-to-lws-while-it-starts", MULTI, {**_live(SMALL), **_live(MULTI, STARTING)}, {}, []),
    (
        "switch-to-lws-once-available",
        MULTI,
        {**_live(SMALL), **_live(MULTI, kinds=("LeaderWorkerSet",))},
        {},
        [("apply", "Service", "chat", False, None), ("delete", "Deployment", "chat", "DeleteFailed")],
    ),
    (
        "switch-back-once-available",
        SMALL,
        {**_live(MULTI), **_live(SMALL, kinds=("Deployment",))},
        {},
        [("apply", "Service", "chat", False, None), ("delete", "LeaderWorkerSet", "chat-lws", "DeleteFailed")],
    ),
]


@pytest.mark.parametrize(("plan", "live", "previous", "expected"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_writes(plan: Plan, live: dict[Any, Child], previous: dict[str, Any], expected: list[tuple[Any, ...]]) -> None:
    assert _writes(plan, live, previous) == expected


def test_our_own_recent_apply_is_trusted_until_the_index_catches_up() -> None:
    recent = Recent()
    for manifest, applied in SMALL.manifests:
        recent.applied[("ns", manifest["metadata"]["name"], manifest["kind"])] = (applied, 95.0)
    assert _writes(SMALL, {}, recent=recent, now=100.0) == [], "applied 5 s ago: not again"
    assert _writes(SMALL, {}, recent=recent, now=200.0) == [
        ("apply", "Deployment", "chat", False, None),
        ("apply", "Service", "chat", False, None),
    ], "past the TTL it is applied again, without asking whose the name is (it was ours)"


def test_a_scaler_refused_for_want_of_its_crd_waits_for_its_retry() -> None:
    recent = Recent()
    recent.missing[("ns", "chat", "ScaledObject")] = ("no KEDA", 90.0)
    world = _world(_live(SCALED))
    workloads = live_workloads(world, OWNER, SCALED)
    actions = plan_writes(SCALED, OWNER, world, {}, recent, workloads, 100.0)
    assert actions.writes == () and actions.noted == {"ScaledObject": "no KEDA"} and actions.retry_after == SCALER_RETRY
    later = plan_writes(SCALED, OWNER, world, {}, recent, workloads, 90.0 + SCALER_RETRY)
    assert [a.child.kind for a in later.writes if isinstance(a, Apply)] == ["ScaledObject"]


def test_while_waiting_for_gpus_the_status_keeps_what_was_applied() -> None:
    assert kept(SCALED, {"autoscaling": SCALER_ENTRY}) == {"autoscaling": SCALER_ENTRY}
    assert kept(SMALL, {"autoscaling": SCALER_ENTRY}) == {}


def test_every_child_render_emits_has_its_entry_and_every_entry_is_rendered() -> None:
    """The golden inputs and the multi-node plan between them render every kind CHILDREN handles."""
    seen = set()
    for path in sorted(Path(INPUTS).glob("*.yaml")):
        ib, decision = decide(path)
        assert isinstance(ib, InferenceBackend)
        if not decision.satisfiable:
            continue  # test_golden says so
        for obj in render_result(ib, decision).objects:
            seen.add(child_kind(obj, ib.metadata.name).kind)
    devices = [P.dra_node("dra-1"), P.nvidia_slice("dra-1")]
    dra = make(backend(spec={"model": {"modelRef": "llama-3-1-70b", "cache": {"pvc": "w"}}}), _world(nodes=devices), {})
    cache = {"modelRef": "llama-3-1-8b", "cache": {"storageClass": "standard-rwo", "size": "40Gi"}}
    claimed = make(backend(spec={"model": cache}), _world(nodes=[P.gke_a3("a3-1")]), {})
    for plan in (MULTI, dra, claimed):
        for manifest, _ in plan.manifests:
            seen.add(child_kind(manifest, "chat").kind)
    assert seen == {c.kind for c in CHILDREN}
    with pytest.raises(KeyError, match="no entry"):
        child_kind({"kind": "Secret", "metadata": {"name": "x"}}, "chat")


def test_deletes_are_typed() -> None:
    assert Delete("Deployment", "ns", "chat", "DeleteFailed").key == ("ns", "chat", "Deployment")
