"""What a reconcile writes, in what order, and under which guard: a pure function of the plan, the read model, the
status as last written and what this process wrote lately. Nothing here calls the API (controller.execute does).

Each child the renderer emits is handled as its entry in :data:`CHILDREN` says:

- ``workload``: it runs the backend's pods (a Deployment on one node, a LeaderWorkerSet across nodes). When the plan
  changes the workload's kind, the old one keeps serving until the new one is available, then it is deleted;
- ``follows``: it points at the workload (Service, PodDisruptionBudget, ScaledObject), so while the workload
  changes kind it is left as it is, routing to the old one;
- ``watched``: the operator indexes it (a kopf index in handlers.py): its applied hash is read from the index. An
  unwatched child (the ScaledObject, whose CRD may be absent) records its hash in the status instead, under
  ``status_key`` (with ``status_entry`` making that entry), and is deleted when the plan no longer has it;
- ``crd``: an API the cluster may not serve. ``missing`` says what the status says then; with ``stop`` nothing
  after it is applied (the plan cannot run without it), otherwise the rest is applied and this child is tried again
  every ``retry`` seconds;
- every child is applied only when its content hash differs from the one last applied; the first apply of a name
  first checks that no object of someone else holds it (never adopt); a Deployment whose replicas go to the
  autoscaler hands them over first.

Adding a child (a PersistentVolumeClaim from a StorageClass, a ResourceClaimTemplate, an InferencePool with its
endpoint picker's Deployment, Service and RBAC) is: render it (render.py, in the order it must be applied:
what the pods need before the workload), add its entry here (a kind with several children of that kind, such as a
second Deployment, matches by ``name``), and, for a watched kind, its kopf index and event handler in handlers.py,
its index in state.Indexes and its verbs in the chart's RBAC. The tests in tests/test_actions.py walk every entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inference_backend import picker, status
from inference_backend.api.inferencebackend import Autoscaling
from inference_backend.controller.plan import Plan
from inference_backend.controller.world import WORKLOADS, Child, Recent, World
from inference_backend.engines import card
from inference_backend.render import lws_name
from inference_backend.routing import PICKER_VERSION, picker_name_of
from inference_backend.vocabulary import AUTOSCALER, INFERENCE_POOL_CRD, KEDA_CRD, LWS_CRD, LWS_GROUP, LWS_VERSION

Json = dict[str, Any]
Key = tuple[str, str, str]
"""(namespace, name, kind) of a child."""
CRD_RECHECK = 60.0
"""Seconds before a plan that needs a CRD the cluster lacks is tried again (one apply a minute, not a hot loop; kopf
also starts watching LeaderWorkerSets as soon as their CRD is installed)."""
SCALER_RETRY = 60.0
"""Seconds between attempts to apply a ScaledObject while the KEDA CRD is missing (the backend is reconciled again
then, so installing KEDA is noticed within this)."""


def _lws_missing(plan: Plan, name: str, error: str) -> str:
    d = plan.decision
    nodes = d.placement.pipeline_parallel if d is not None and d.placement is not None else 0
    return (
        f"the plan runs one replica across {nodes} nodes as a LeaderWorkerSet, and this cluster does not serve "
        f"its CRD ({LWS_CRD}, {LWS_GROUP}/{LWS_VERSION}): install LeaderWorkerSet (sigs.k8s.io/lws v0.7.0); "
        f"nothing else is applied meanwhile, checked again every {CRD_RECHECK:.0f} s"
    )


def _keda_missing(plan: Plan, name: str, error: str) -> str:
    return (
        f"the CRD {KEDA_CRD} (KEDA) is not installed, so ScaledObject {name} cannot be created: {error}; the "
        f"Deployment keeps its replicas; tried again every {SCALER_RETRY:.0f} s"
    )


def _pool_missing(plan: Plan, name: str, error: str) -> str:
    return (
        f"the CRD {INFERENCE_POOL_CRD} (Gateway API Inference Extension) is not installed, so InferencePool {name} "
        f"cannot be created: {error}; install its CRDs ({PICKER_VERSION}, docs/routing.md); the Service keeps "
        f"serving; tried again every {CRD_RECHECK:.0f} s"
    )


def _pool_entry(manifest: Json, applied_hash: str, plan: Plan) -> Json:
    """status.routing: the InferencePool and the endpoint picker it names, the pool's applied hash, and the picker's
    scorers (what each reads, or why it is left out: picker.py)."""
    entry: Json = {
        "inferencePool": manifest["metadata"]["name"],
        "endpointPicker": manifest["spec"]["endpointPickerRef"]["name"],
        "appliedHash": applied_hash,
    }
    d = plan.decision
    if d is not None and d.backend is not None:
        entry["scorers"] = picker.lines(card(d.backend), d)
    return entry


PICKER_KINDS = ("Deployment", "Service", "RoleBinding", "Role", "ServiceAccount")
"""The endpoint picker's children, deleted with the InferencePool when spec.routing.inferencePool goes off."""


def _scaler_entry(manifest: Json, applied_hash: str, plan: Plan) -> Json:
    """status.autoscaling: the ScaledObject, what it scales, on which metric and query, and its applied hash."""
    target = manifest["spec"]["scaleTargetRef"]
    metric, query = plan.scaler or ("", "")
    return {
        "scaledObject": manifest["metadata"]["name"],
        "target": f"{target['kind']}/{target['name']}",
        "metric": metric,
        "query": query,
        "appliedHash": applied_hash,
    }


@dataclass(frozen=True)
class ChildKind:
    """How the reconcile treats one kind of child (see the module's docstring)."""

    kind: str
    workload: bool = False
    follows: bool = True
    watched: bool = True
    name: Callable[[str], str] | None = None
    """The child's name from the backend's, for a kind with several children (and for the workloads)."""
    hands_off_replicas: bool = False
    crd: str | None = None
    missing: Callable[[Plan, str, str], str] | None = None
    """(plan, child name, the API server's answer) -> what the status says while the CRD is missing."""
    stop: bool = False
    retry: float = CRD_RECHECK
    status_key: str | None = None
    status_entry: Callable[[Json, str, Plan], Json] | None = None
    name_field: str = "name"
    """The field of the status entry naming the child (to delete it once the plan no longer has it)."""
    with_it: tuple[tuple[str, Callable[[str], str]], ...] = ()
    """(kind, name from the backend's) of the children deleted with this unwatched one."""


CHILDREN: tuple[ChildKind, ...] = (
    # Not indexed yet (no kopf index, no event handler): looked up like a watched child, so applied again once our
    # own apply is past Recent.ttl, as before the split. Skipped while the workload changes kind, as every child
    # that is not a workload was.
    ChildKind("ResourceClaimTemplate"),
    ChildKind("PersistentVolumeClaim"),
    # The adapters loaded while the pods serve (engines/lora.py runtime_served): applied before the workload whose
    # sidecar mounts it; indexed (handlers.configmaps), so applied again only when the list changes.
    ChildKind("ConfigMap"),
    ChildKind("Deployment", workload=True, follows=False, name=lambda n: n, hands_off_replicas=True),
    ChildKind(
        "LeaderWorkerSet", workload=True, follows=False, name=lws_name, crd=LWS_CRD, missing=_lws_missing, stop=True
    ),
    ChildKind("Service"),
    ChildKind("PodDisruptionBudget"),
    # spec.routing.inferencePool (routing.py): the pool is recorded in status.routing (its CRD may be absent) and
    # takes its picker's children with it when routing is turned off. The picker's Deployment is watched (as every
    # Deployment we label); its ServiceAccount, Role and RoleBinding are not indexed, like the claims above.
    ChildKind(
        "InferencePool",
        watched=False,
        crd=INFERENCE_POOL_CRD,
        missing=_pool_missing,
        status_key="routing",
        status_entry=_pool_entry,
        name_field="inferencePool",
        with_it=tuple((kind, picker_name_of) for kind in PICKER_KINDS),
    ),
    ChildKind("Deployment", name=picker_name_of),
    ChildKind("ServiceAccount"),
    ChildKind("Role"),
    ChildKind("RoleBinding"),
    ChildKind(
        "ScaledObject",
        watched=False,
        crd=KEDA_CRD,
        missing=_keda_missing,
        retry=SCALER_RETRY,
        status_key="autoscaling",
        status_entry=_scaler_entry,
        name_field="scaledObject",
    ),
)
assert tuple(c.kind for c in CHILDREN if c.workload) == WORKLOADS


def child_kind(manifest: Mapping[str, Any], backend: str) -> ChildKind:
    """The entry of CHILDREN that ``manifest`` (a child of the backend named ``backend``) is."""
    name = manifest["metadata"]["name"]
    for c in CHILDREN:
        if c.kind == manifest["kind"] and (c.name is None or c.name(backend) == name):
            return c
    raise KeyError(f"{manifest['kind']} {name}: no entry in controller.actions.CHILDREN")


@dataclass(frozen=True)
class Apply:
    """Server-side apply of one child (with the applied hash and the owner reference, added by the executor)."""

    manifest: Json
    hash: str
    child: ChildKind
    adopt_check: bool
    """Ask first whether an object of that name exists that this backend does not own (never adopt it)."""
    hand_off: int | None = None
    """Hand the Deployment's replicas (this many) to another field manager first: the apply leaves them out."""
    records: Json | None = None
    """For an unwatched child: the status entry recording it once applied."""

    @property
    def key(self) -> Key:
        meta = self.manifest["metadata"]
        return (meta["namespace"], meta["name"], self.manifest["kind"])


@dataclass(frozen=True)
class Delete:
    kind: str
    namespace: str
    name: str
    reason: str
    """The ReconcileFailure reason when the API server refuses it."""

    @property
    def key(self) -> Key:
        return (self.namespace, self.name, self.kind)


Action = Apply | Delete


@dataclass(frozen=True)
class Workloads:
    """The live workloads of one backend: the one of the plan's kind and the one of the other kind."""

    kind: str | None
    """The plan's workload kind (None when nothing is rendered)."""
    new: Child | None
    """The workload of the plan's kind (without a plan: whichever exists)."""
    old: Child | None
    """The workload of the other kind, while the plan has a kind."""
    old_kind: str | None

    @property
    def switching(self) -> bool:
        """The other kind's workload still serves and the new one is not available yet."""
        return self.old is not None and not available(self.new)

    @property
    def serving(self) -> bool:
        return self.new is not None or self.old is not None

    def observed(self) -> tuple[status.Observed | None, status.Observed | None]:
        """(the plan's workload, or without a plan whichever exists; the other kind's) as the status sees them."""
        return _observed(self.new), _observed(self.old)


@dataclass(frozen=True)
class Actions:
    writes: tuple[Action, ...] = ()
    recorded: Mapping[str, Json] = field(default_factory=dict)
    """Status entries of unwatched children already applied with this hash (status_key -> entry)."""
    noted: Mapping[str, str] = field(default_factory=dict)
    """Children tried again later for want of their CRD (kind -> the message recorded when it was refused)."""
    retry_after: float | None = None
    """Seconds until the first of those is tried again."""


def live_workloads(world: World, owner: tuple[str, str], plan: Plan | None) -> Workloads:
    namespace, name = owner
    kind = next((m["kind"] for m, _ in plan.manifests if m["kind"] in WORKLOADS), None) if plan else None
    live = {c.kind: world.children.get((namespace, (c.name or str)(name), c.kind)) for c in CHILDREN if c.workload}
    if kind is None:
        return Workloads(None, next((c for c in live.values() if c is not None), None), None, None)
    old_kind = next((k for k, c in live.items() if k != kind and c is not None), None)
    return Workloads(kind, live[kind], live[old_kind] if old_kind else None, old_kind)


def available(child: Child | None) -> bool:
    observed = _observed(child)
    return observed is not None and observed.available and (observed.ready_replicas > 0 or observed.replicas == 0)


def _observed(child: Child | None) -> status.Observed | None:
    return status.Observed.from_deployment(child.body) if child is not None else None


def plan_writes(
    plan: Plan,
    owner: tuple[str, str],
    world: World,
    previous: Mapping[str, Any],
    recent: Recent,
    workloads: Workloads,
    now: float,
) -> Actions:
    """The writes of a plan that is to be applied now (satisfiable, its GPUs reserved): unwatched children the plan
    no longer has are deleted first, then each child applied unless its hash is applied already, then the old
    workload deleted once the new one is available. ``now``: time.monotonic()."""
    namespace, name = owner
    writes: list[Action] = [*_stale(plan, previous, namespace, name)]
    recorded: dict[str, Json] = {}
    noted: dict[str, tuple[str, float]] = {}
    autoscaling = plan.spec.autoscaling if plan.spec is not None else None
    for manifest, wanted in plan.manifests:
        child = child_kind(manifest, name)
        if workloads.switching and child.follows:
            continue  # it keeps its target until the new workload is available
        key: Key = (namespace, manifest["metadata"]["name"], child.kind)
        if not child.watched:
            action = _unwatched(child, manifest, wanted, plan, previous, recent, now, recorded, noted)
        else:
            action = _watched(child, manifest, wanted, world.children.get(key), recent, now, autoscaling)
        if action is not None:
            writes.append(action)
    if workloads.old is not None and workloads.old_kind is not None and not workloads.switching:
        old = next(c for c in CHILDREN if c.kind == workloads.old_kind)
        writes.append(Delete(old.kind, namespace, (old.name or str)(name), "DeleteFailed"))
    retry = min((r for _, r in noted.values()), default=None)
    return Actions(tuple(writes), recorded, {k: why for k, (why, _) in noted.items()}, retry)


def _stale(plan: Plan, previous: Mapping[str, Any], namespace: str, name: str) -> list[Action]:
    """Unwatched children the status records and the plan no longer has (spec.autoscaling removed: its ScaledObject,
    and with it KEDA's HPA, goes first, so nothing scales the Deployment once the operator's apply takes its
    replicas back)."""
    kinds = {m["kind"] for m, _ in plan.manifests}
    out: list[Action] = []
    for c in CHILDREN:
        entry = previous.get(c.status_key) if c.status_key else None
        if c.watched or c.kind in kinds or not entry:
            continue
        out.append(Delete(c.kind, namespace, str(entry.get(c.name_field) or name), "ApplyFailed"))
        out.extend(Delete(kind, namespace, of(name), "DeleteFailed") for kind, of in c.with_it)
    return out


def _unwatched(
    child: ChildKind,
    manifest: Json,
    wanted: str,
    plan: Plan,
    previous: Mapping[str, Any],
    recent: Recent,
    now: float,
    recorded: dict[str, Json],
    noted: dict[str, tuple[str, float]],
) -> Apply | None:
    """An unwatched child: applied unless the status records this hash, or its CRD was found missing lately."""
    assert child.status_key is not None and child.status_entry is not None
    entry = child.status_entry(manifest, wanted, plan)
    said = previous.get(child.status_key) or {}
    if said.get("appliedHash") == wanted:
        recorded[child.status_key] = entry
        return None
    meta = manifest["metadata"]
    refused = recent.missing.get((meta["namespace"], meta["name"], child.kind))
    if refused is not None and now - refused[1] < child.retry:
        noted[child.kind] = (refused[0], child.retry)
        return None
    return Apply(manifest, wanted, child, adopt_check=not said, records=entry)


def _watched(
    child: ChildKind,
    manifest: Json,
    wanted: str,
    live: Child | None,
    recent: Recent,
    now: float,
    autoscaling: Autoscaling | None,
) -> Apply | None:
    """A watched child: applied unless the index (or our own apply, until the index catches up) has this hash."""
    meta = manifest["metadata"]
    key = (meta["namespace"], meta["name"], child.kind)
    if (live is not None and live.applied_hash == wanted) or recent.applied_lately(key, wanted, now):
        return None
    hand_off = None
    if child.hands_off_replicas and autoscaling is not None and live is not None and live.replicas_owner != AUTOSCALER:
        # Autoscaling turned on: the operator's manager owns replicas and its next apply drops them, which would
        # reset them to 1. Another manager takes them first (vocabulary.HANDOFF_MANAGER).
        hand_off = _clamped(live, autoscaling)
    return Apply(manifest, wanted, child, adopt_check=live is None and key not in recent.applied, hand_off=hand_off)


def _clamped(child: Child, a: Autoscaling) -> int:
    """The live replicas within [minReplicas, maxReplicas], at least 1: what the hand-over keeps."""
    live = int((child.body.get("spec") or {}).get("replicas", 1) or 0)
    return max(1, a.min_replicas, min(live, a.max_replicas))


def kept(plan: Plan, previous: Mapping[str, Any]) -> dict[str, Json]:
    """While nothing is applied (the placement waits for GPUs), the status entries of unwatched children still hold:
    what was applied before is still there."""
    kinds = {m["kind"] for m, _ in plan.manifests}
    return {
        c.status_key: dict(previous[c.status_key])
        for c in CHILDREN
        if c.status_key and c.kind in kinds and previous.get(c.status_key)
    }
