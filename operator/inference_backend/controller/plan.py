"""The pure part of a reconcile: from the InferenceBackend, the read model and the status as last written, what
should run (validate, select, render with the rollout chosen, hash each child), and which GPUs to hold for it.

Nothing here calls the API, reads a clock or changes anything: :func:`make` and :func:`reservation` are functions
of their arguments (the GPU ledger is read, and the reconcile applies the reservation returned).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from inference_backend import autoscaling
from inference_backend.api import InferenceBackend, InferenceBackendSpec
from inference_backend.capacity import Shortfall, shortfall, wanted
from inference_backend.controller.world import Child, World
from inference_backend.engines import lora
from inference_backend.facts import Pool
from inference_backend.manifests import explain
from inference_backend.pods import stuck_since
from inference_backend.render import render_result
from inference_backend.rollout import Choice, Context, Live
from inference_backend.selection import Current, Decision, InvalidSpec, select
from inference_backend.vocabulary import SPEC_HASH

Json = dict[str, Any]


@dataclass(frozen=True)
class Plan:
    """What should run, kept per InferenceBackend and reused while its inputs (``key``) are unchanged: most
    reconciles are triggered by a child's status and need only the status computed."""

    key: tuple[Any, ...]
    decision: Decision | None
    error: str | None
    replicas: int
    manifests: tuple[tuple[Json, str], ...]
    """Each rendered child, complete but for the applied hash and the owner reference, with its content hash."""
    spec_hash: str | None
    spec: InferenceBackendSpec | None = None
    rollout: Choice | None = None
    """How the Deployment's pods are replaced (rollout.py), and the replicas reserved beyond spec.replicas."""
    scaler: tuple[str, str] | None = None
    """With spec.autoscaling: (the engine metric and its source, the trigger's query), for status.autoscaling."""

    @property
    def satisfiable(self) -> bool:
        return self.decision is not None and self.decision.satisfiable

    @property
    def per_replica(self) -> int:
        """GPUs per replica of the decided placement (0 without one)."""
        d = self.decision
        return d.placement.gpus_per_replica if d is not None and d.placement is not None else 0

    @property
    def runtime_adapters(self) -> tuple[str, ...] | None:
        """The adapters the pods load while they serve (the ConfigMap their sidecar reads: engines/lora.py), or
        None where they are given at start."""
        for manifest, _ in self.manifests:
            if manifest["kind"] == "ConfigMap" and lora.CONFIG_FILE in (manifest.get("data") or {}):
                listed = json.loads(manifest["data"][lora.CONFIG_FILE])["adapters"]
                return tuple(str(a["name"]) for a in listed)
        return None

    @property
    def surging(self) -> bool:
        return self.rollout is not None and self.rollout.extra > 0


def content_hash(obj: Json) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def key(
    body: Mapping[str, Any], world: World, previous: Mapping[str, Any], stuck: tuple[Current, str] | None
) -> tuple[Any, ...]:
    """Everything :func:`make` reads, as a comparable value (with the node and Model versions of ``world``)."""
    meta = body["metadata"]
    owner = (meta["namespace"], meta["name"])
    generation = int(meta.get("generation") or 1)
    keep = current(previous, generation) if stuck is None else None
    gpus = world.gpus_in_use(owner)
    deployment = world.children.get((*owner, "Deployment"))
    live = Live.from_deployment(deployment.body if deployment else None, SPEC_HASH)
    spec = json.dumps(body.get("spec"), sort_keys=True)
    return (
        world.version,
        meta.get("uid"),
        generation,
        spec,
        keep,
        tuple(sorted(gpus.items())),
        stuck or left(previous, generation),
        live,
    )


def make(
    body: Mapping[str, Any],
    world: World,
    previous: Mapping[str, Any],
    stuck: tuple[Current, str] | None = None,
    plan_key: tuple[Any, ...] | None = None,
) -> Plan:
    """Validate, select (keeping the placement serving now unless ``stuck`` says to leave it), render and hash.
    ``plan_key``: :func:`key` of the same arguments, when the caller has it already."""
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], int(meta.get("generation") or 1)
    plan_key = plan_key or key(body, world, previous, stuck)
    keep = current(previous, generation) if stuck is None else None
    stuck = stuck or left(previous, generation)
    gpus = world.gpus_in_use((namespace, name))
    deployment = world.children.get((namespace, name, "Deployment"))
    try:
        ib = InferenceBackend.model_validate(
            {
                "apiVersion": body.get("apiVersion"),
                "kind": "InferenceBackend",
                "metadata": {"name": name, "namespace": namespace},
                "spec": body.get("spec") or {},
            }
        )
        replicas = _replicas(ib.spec, deployment)
        avoid, why = stuck if stuck is not None else (None, "")
        decision = select(
            ib.spec, world.cluster(), world.registry(namespace), keep=keep, gpus_in_use=gpus, avoid=avoid, avoid_why=why
        )
    except (ValidationError, InvalidSpec) as exc:
        error = explain(exc) if isinstance(exc, ValidationError) else str(exc)
        return Plan(plan_key, None, error, 1, (), None)
    if not decision.satisfiable:
        return Plan(plan_key, decision, None, replicas, (), None, ib.spec)
    live = Live.from_deployment(deployment.body if deployment else None, SPEC_HASH)
    cfg = world.config
    try:
        rendered = render_result(
            ib,
            decision,
            scaling=cfg.scaling,
            image_policy=cfg.image_policy,
            host_paths=cfg.host_paths,
            rollout=Context(world.cluster(), gpus, live),
        )
        scaler = autoscaling.describe(ib, decision.backend or "", cfg.scaling) if ib.spec.autoscaling else None
    except InvalidSpec as exc:
        return Plan(plan_key, None, str(exc), replicas, (), None)
    manifests = tuple((m, content_hash(m)) for m in rendered.objects)
    return Plan(plan_key, decision, None, replicas, manifests, rendered.spec_hash, ib.spec, rendered.rollout, scaler)


def current(st: Mapping[str, Any], generation: int) -> Current | None:
    """The placement serving now (from our latest status), kept while the spec is unchanged."""
    placement = (st.get("decision") or {}).get("placement")
    if not st.get("backend") or not placement or st.get("observedGeneration") != generation:
        return None
    return _placement(str(st["backend"]), placement)


def left(st: Mapping[str, Any], generation: int) -> tuple[Current, str] | None:
    """The placement an earlier reconcile of this generation left (status.decision.avoided), and why."""
    avoided = (st.get("decision") or {}).get("avoided")
    if not isinstance(avoided, dict) or st.get("observedGeneration") != generation:
        return None
    return _placement(str(avoided.get("backend")), avoided.get("placement") or {}), str(avoided.get("reason") or "")


def _placement(backend: str, p: Mapping[str, Any]) -> Current:
    selector = p.get("nodeSelector")
    pool = tuple(sorted((str(k), str(v)) for k, v in selector.items())) if isinstance(selector, dict) else None
    return Current(backend, p.get("accelerator") or "cpu", p.get("gpuProduct"), int(p.get("gpusPerReplica") or 0), pool)


def unschedulable(
    world: World, owner: tuple[str, str], previous: Mapping[str, Any], generation: int, deployed: bool, now: float
) -> tuple[tuple[Current, str] | None, float | None]:
    """(the placement to leave and why, or None; seconds until its grace period ends, or None): every pod of the
    serving placement has been unschedulable for want of nodes for the grace period (pods.stuck_since)."""
    serving = current(previous, generation)
    if serving is None or not deployed:
        return None, None
    stuck = stuck_since(world.pods.get(owner, ()), previous.get("specHash"))
    if stuck is None:
        return None, None
    since, message = stuck
    grace = world.config.unschedulable_grace
    waited = now - since
    if waited < grace:
        return None, grace - waited + 1.0
    why = (
        f"the pods of {serving.engine} on {serving.describe()} stayed unschedulable past the grace period "
        f"({grace:.0f} s): {message}"
    )
    return (serving, why), None


def _replicas(spec: InferenceBackendSpec, deployment: Child | None) -> int:
    """The replicas the operator counts on: spec.replicas; with spec.autoscaling, what the autoscaler set on the
    live Deployment (at least minReplicas; minReplicas when there is none yet)."""
    if spec.autoscaling is None:
        return spec.replicas
    live = (deployment.body.get("spec") or {}).get("replicas") if deployment is not None else None
    return max(spec.autoscaling.min_replicas, int(live) if live is not None else spec.autoscaling.min_replicas)


@dataclass(frozen=True)
class Reservation:
    """The GPUs a plan holds: what the ledger records for the backend (``hold``, when ``change``), the capacity the
    placement lacks now (nothing is applied for it), and a note when the autoscaler asked for more than is free."""

    change: bool = False
    hold: tuple[Pool, int] | None = None
    waiting: Shortfall | None = None
    overcommitted: str | None = None


def reservation(plan: Plan, world: World, owner: tuple[str, str], serving: bool) -> Reservation:
    """What ``owner`` holds for this plan, decided before any API call. Without a ledger (the CLI, tests) nothing
    is reserved.

    A placement that already holds its GPUs is not checked again; one that needs more waits, holding what the
    serving Deployment uses; an unsatisfiable or invalid spec keeps what still serves, or holds nothing."""
    ledger = world.ledger
    if ledger is None:
        return Reservation()
    decision = plan.decision
    if decision is None or not decision.satisfiable or plan.spec is None:
        return Reservation(True, ledger.held(owner) if serving else None)
    extra = plan.rollout.extra if plan.rollout is not None else 0
    a = plan.spec.autoscaling
    # With spec.autoscaling the placement waits only for minReplicas' devices; what the autoscaler adds beyond is
    # reserved as it happens (plan.replicas follows the live Deployment), and reported when the pool lacks it.
    floor = plan.replicas if a is None else a.min_replicas
    want = wanted(decision, plan.replicas + extra)
    held = ledger.held(owner)
    if want is not None and not (held is not None and held[0] == want[0] and held[1] >= want[1]):
        short = shortfall(plan.spec, decision, world.cluster(), ledger, owner, floor + extra)
        if short is not None:
            return Reservation(waiting=short)
    over = None
    if a is not None and want is not None:
        beyond = shortfall(plan.spec, decision, world.cluster(), ledger, owner, plan.replicas + extra)
        if beyond is not None:
            over = (
                f"the autoscaler asked for {plan.replicas} replica(s) x {plan.per_replica} "
                f"{beyond.product}; {beyond.free} of {beyond.allocatable} are free on the nodes it may use: the "
                "replicas beyond stay Pending (GPUs are reserved for what the autoscaler sets, not maxReplicas)"
            )
    return Reservation(True, want, None, over)
