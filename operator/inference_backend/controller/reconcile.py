"""One level-triggered reconcile of an InferenceBackend: parse, read facts, select, render, apply, write status.

Everything read comes from kopf indexes (nodes by hardware class, Models, owned children), so a reconcile that
changes nothing makes no API call at all: children are applied only when their content hash differs from the
one recorded on the live object, and the status is written only when it changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from inference_backend import autoscaling, status
from inference_backend.api import InferenceBackend, InferenceBackendSpec
from inference_backend.api.inferencebackend import Autoscaling
from inference_backend.capacity import Shortfall, shortfall, wanted
from inference_backend.controller import metrics
from inference_backend.controller.kube import Kube, describe_error, http_status, not_found, owned
from inference_backend.controller.world import WORKLOADS, Child, World
from inference_backend.manifests import explain
from inference_backend.pods import PodProblem, stuck_since, worst
from inference_backend.render import lws_name, render, selector_string
from inference_backend.rollout import Choice, Live, choose, strategy
from inference_backend.selection import Current, Decision, InvalidSpec, select
from inference_backend.vocabulary import (
    APPLIED_HASH,
    AUTOSCALER,
    KEDA_CRD,
    LWS_CRD,
    LWS_GROUP,
    LWS_VERSION,
    REPLICAS_OWNER,
    SPEC_HASH,
)

SCALER_RETRY = 60.0
"""Seconds between attempts to apply a ScaledObject while the KEDA CRD is missing (the backend is reconciled again
then, so installing KEDA is noticed within this)."""
log = logging.getLogger(__name__)


class ReconcileFailure(Exception):
    """A reconcile step that failed, as the status and the Event say it: ``reason`` (PlanningFailed, ApplyFailed,
    StatusWriteFailed) and a message naming the object and the API error."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class Plan:
    """The pure part of a reconcile (validate, select, render, hash), kept per InferenceBackend and reused while its
    inputs are unchanged: most reconciles are triggered by a child's status and need only the status computed."""

    key: tuple[Any, ...]
    decision: Decision | None
    error: str | None
    replicas: int
    manifests: tuple[tuple[dict[str, Any], str], ...]
    """Each rendered manifest with its content hash."""
    spec_hash: str | None
    spec: InferenceBackendSpec | None = None
    rollout: Choice | None = None
    """How the Deployment's pods are replaced (rollout.py), and the replicas reserved beyond spec.replicas."""
    scaler: tuple[str, str] | None = None
    """With spec.autoscaling: (the engine metric and its source, the trigger's query), for status.autoscaling."""


@dataclass
class Recent:
    """What this process wrote lately. The indexes are fed by watches and lag our own writes by milliseconds; until
    they catch up, our last writes are trusted, so concurrent triggers do not write the same thing twice. Only the
    leader writes, so our last status write is the newest status there is."""

    ttl: float = 15.0
    applied: dict[tuple[str, str, str], tuple[str, float]] = field(default_factory=dict)
    scaler_missing: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    """Backends whose ScaledObject the API server refused for want of the KEDA CRD: (the message, when)."""
    statuses: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    plans: dict[tuple[str, str], Plan] = field(default_factory=dict)

    def applied_lately(self, key: tuple[str, str, str], wanted: str) -> bool:
        entry = self.applied.get(key)
        return entry is not None and entry[0] == wanted and time.monotonic() - entry[1] < self.ttl

    def previous_status(self, key: tuple[str, str], seen: dict[str, Any]) -> dict[str, Any]:
        mine = self.statuses.get(key)
        if mine is None or mine == seen:
            self.statuses.pop(key, None)
            return seen
        return mine


@dataclass(frozen=True)
class Outcome:
    decision: Decision | None
    error: str | None
    applied: int
    status_written: bool
    status: dict[str, Any]
    waiting: Shortfall | None = None
    """The GPUs the decided placement lacks now (nothing applied for it), or None."""
    freed: bool = False
    """This reconcile released GPUs that backends waiting for capacity may take."""
    pod_problem: PodProblem | None = None
    """The worst problem of the backend's pods, or None."""
    recheck_after: float | None = None
    """Seconds until the unschedulable grace period of the placement ends (reconcile again then), or None."""
    overcommitted: str | None = None
    """The autoscaler asked for more replicas than the GPU pool has free devices for (they stay Pending)."""


def content_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _current(st: Mapping[str, Any], generation: int) -> Current | None:
    """The placement serving now (from our latest status), kept while the spec is unchanged."""
    placement = (st.get("decision") or {}).get("placement")
    if not st.get("backend") or not placement or st.get("observedGeneration") != generation:
        return None
    selector = placement.get("nodeSelector")
    pool = tuple(sorted((str(k), str(v)) for k, v in selector.items())) if isinstance(selector, dict) else None
    return Current(st["backend"], placement.get("accelerator") or "cpu", placement.get("gpuProduct"),
                   int(placement.get("gpusPerReplica") or 0), pool)  # fmt: skip


def _left(st: Mapping[str, Any], generation: int) -> tuple[Current, str] | None:
    """The placement an earlier reconcile of this generation left (status.decision.avoided), and why."""
    avoided = (st.get("decision") or {}).get("avoided")
    if not isinstance(avoided, dict) or st.get("observedGeneration") != generation:
        return None
    p = avoided.get("placement") or {}
    selector = p.get("nodeSelector")
    pool = tuple(sorted((str(k), str(v)) for k, v in selector.items())) if isinstance(selector, dict) else None
    current = Current(str(avoided.get("backend")), p.get("accelerator") or "cpu", p.get("gpuProduct"),
                      int(p.get("gpusPerReplica") or 0), pool)  # fmt: skip
    return current, str(avoided.get("reason") or "")


def _user_status(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (body.get("status") or {}).items() if k != "kopf"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def reconcile(
    body: Mapping[str, Any], world: World, kube: Kube, trigger: str, recent: Recent | None = None
) -> Outcome:
    started = time.perf_counter()
    try:
        outcome = await _reconcile(body, world, kube, recent or Recent(), trigger)
    except Exception:
        metrics.RECONCILES.labels(trigger, "error").inc()
        raise
    finally:
        metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
    metrics.RECONCILES.labels(trigger, "ok" if outcome.error is None else "invalid").inc()
    return outcome


def _plan(body: Mapping[str, Any], world: World, previous: Mapping[str, Any], recent: Recent,
          stuck: tuple[Current, str] | None = None) -> Plan:  # fmt: skip
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], int(meta.get("generation") or 1)
    keep = _current(previous, generation) if stuck is None else None
    stuck = stuck or _left(previous, generation)
    gpus = world.gpus_in_use((namespace, name))
    deployment = world.children.get((namespace, name, "Deployment"))
    live = Live.from_deployment(deployment.body if deployment else None, SPEC_HASH)
    key = (world.version, meta.get("uid"), generation, json.dumps(body.get("spec"), sort_keys=True), keep,
           tuple(sorted(gpus.items())), stuck, live)  # fmt: skip
    cached = recent.plans.get((namespace, name))
    if world.version is not None and cached is not None and cached.key == key:
        return cached
    decision: Decision | None = None
    error: str | None = None
    replicas = 1
    manifests: list[tuple[dict[str, Any], str]] = []
    spec_hash = None
    try:
        ib = InferenceBackend.model_validate(
            {"apiVersion": body.get("apiVersion"), "kind": "InferenceBackend",
             "metadata": {"name": name, "namespace": namespace}, "spec": body.get("spec") or {}}
        )  # fmt: skip
        replicas = _replicas(ib.spec, deployment)
        avoid, why = stuck if stuck is not None else (None, "")
        decision = select(ib.spec, world.cluster(), world.registry(namespace), keep=keep, gpus_in_use=gpus,
                          avoid=avoid, avoid_why=why)  # fmt: skip
    except ValidationError as exc:
        error = explain(exc)
    except InvalidSpec as exc:
        error = str(exc)
    choice = None
    scaler = None
    objects: list[dict[str, Any]] = []
    if decision is not None and decision.satisfiable:
        try:
            objects = render(ib, decision, scaling=world.scaling, image_policy=world.image_policy)
            if ib.spec.autoscaling is not None:
                scaler = autoscaling.describe(ib, decision.backend or "", world.scaling)
        except InvalidSpec as exc:
            error, decision = str(exc), None
    if objects and decision is not None:
        spec_hash = _template_hash(objects)
        choice = choose(ib.spec, decision, world.cluster(), gpus, live, spec_hash)
        for manifest in objects:
            if manifest["kind"] == "Deployment" and choice.surge is not None:
                manifest["spec"]["strategy"] = strategy(choice.surge)
            if manifest["kind"] == "Deployment" and ib.spec.autoscaling is not None:
                meta = manifest["metadata"]
                meta["annotations"] = {**meta.get("annotations", {}), REPLICAS_OWNER: AUTOSCALER}
            manifests.append((manifest, content_hash(manifest)))
    plan = Plan(key, decision, error, replicas, tuple(manifests), spec_hash, ib.spec if error is None else None,
                choice, scaler)  # fmt: skip
    if world.version is not None:
        recent.plans[(namespace, name)] = plan
    return plan


CRD_RECHECK = 60.0
"""Seconds before a plan that needs a CRD the cluster lacks is tried again (one apply a minute, not a hot loop; kopf
also starts watching LeaderWorkerSets as soon as their CRD is installed)."""


def _template_hash(objects: list[dict[str, Any]]) -> str | None:
    """The spec hash of the rendered workload's pod template (a LeaderWorkerSet's leader template)."""
    for o in objects:
        if o["kind"] == "Deployment":
            return o["spec"]["template"]["metadata"]["annotations"].get(SPEC_HASH)  # type: ignore[no-any-return]
        if o["kind"] == "LeaderWorkerSet":
            leader = o["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
            return leader["metadata"]["annotations"].get(SPEC_HASH)  # type: ignore[no-any-return]
    return None


def _workload_kind(plan: Plan) -> str | None:
    return next((m["kind"] for m, _ in plan.manifests if m["kind"] in WORKLOADS), None)


def _available(child: Child | None) -> bool:
    observed = status.Observed.from_deployment(child.body) if child is not None else None
    return observed is not None and observed.available and (observed.ready_replicas > 0 or observed.replicas == 0)


def _missing_crd(decision: Decision) -> str:
    nodes = decision.placement.pipeline_parallel if decision.placement is not None else 0
    return (f"the plan runs one replica across {nodes} nodes as a LeaderWorkerSet, and this cluster does not serve "
            f"its CRD ({LWS_CRD}, {LWS_GROUP}/{LWS_VERSION}): install LeaderWorkerSet (sigs.k8s.io/lws v0.7.0); "
            f"nothing else is applied meanwhile, checked again every {CRD_RECHECK:.0f} s")  # fmt: skip


async def _reconcile(body: Mapping[str, Any], world: World, kube: Kube, recent: Recent, trigger: str) -> Outcome:
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], int(meta.get("generation") or 1)
    previous = recent.previous_status((namespace, name), _user_status(body))
    workloads = {
        "Deployment": world.children.get((namespace, name, "Deployment")),
        "LeaderWorkerSet": world.children.get((namespace, lws_name(name), "LeaderWorkerSet")),
    }
    serving_any = any(c is not None for c in workloads.values())
    stuck, recheck = _unschedulable(world, (namespace, name), previous, generation, serving_any)
    try:
        plan = _plan(body, world, previous, recent, stuck)
    except Exception as exc:  # a bug or a fact nobody foresaw: this backend fails alone, visibly
        log.exception("planning %s/%s failed", namespace, name)
        raise ReconcileFailure("PlanningFailed", f"planning failed: {type(exc).__name__}: {exc}") from exc
    decision, error = plan.decision, plan.error
    if error is not None:
        metrics.ERRORS.labels("invalid_spec").inc()
    waiting, freed, overcommitted = _reserve(plan, world, (namespace, name), serving=serving_any)
    autoscaled = plan.spec is not None and plan.spec.autoscaling is not None
    scaler_status: dict[str, Any] | None = None
    scaler_missing: str | None = None
    # The workload the plan wants, and the one of the other kind (a switch between one node and several): the old
    # one keeps serving, with the Service as it was, until the new one is available; then it is deleted.
    kind = _workload_kind(plan)
    other = next((k for k in WORKLOADS if k != kind), None) if kind is not None else None
    old = workloads[other] if other is not None else None
    new = workloads[kind] if kind is not None else None
    switching = old is not None and not _available(new)
    applied = 0
    missing: str | None = None
    if decision is not None and decision.satisfiable and waiting is None:
        metrics.DECISIONS.labels(decision.backend).inc()
        if not autoscaled and previous.get("autoscaling"):
            # spec.autoscaling was removed: the ScaledObject (and with it KEDA's HPA) goes first, so nothing
            # scales the Deployment once the operator's apply takes its replicas back.
            scaled = str((previous.get("autoscaling") or {}).get("scaledObject") or name)
            try:
                await kube.delete_scaled_object(namespace, scaled)
            except Exception as exc:
                raise ReconcileFailure("ApplyFailed", f"deleting ScaledObject {scaled}: {describe_error(exc)}") from exc
            metrics.API_WRITES.labels("ScaledObject").inc()
            recent.scaler_missing.pop((namespace, name), None)
        for manifest, wanted_hash in plan.manifests:
            kind_, child_name = manifest["kind"], manifest["metadata"]["name"]
            if switching and kind_ not in WORKLOADS:
                continue  # the Service (and PDB, ScaledObject) keep their targets until the new workload is available
            key = (namespace, child_name, kind_)
            if kind_ == autoscaling.SCALED_OBJECT:
                # Not watched (the KEDA CRD may be absent): the hash last applied is kept in the status.
                scaler_status, scaler_missing, wrote = await _apply_scaler(
                    manifest, wanted_hash, body, previous, plan, kube, recent, (namespace, name)
                )
                applied += wrote
                continue
            child = world.children.get(key)
            if (child is not None and child.applied_hash == wanted_hash) or recent.applied_lately(key, wanted_hash):
                continue
            annotations = {**manifest["metadata"].get("annotations", {}), APPLIED_HASH: wanted_hash}
            manifest = {**manifest, "metadata": {**manifest["metadata"], "annotations": annotations}}
            if child is None and key not in recent.applied:  # never adopt what someone else made
                try:
                    theirs = await kube.foreign(manifest, str(meta.get("uid")))
                except Exception as exc:
                    why = f"reading {kind_} {child_name}: {describe_error(exc)}"
                    raise ReconcileFailure("ApplyFailed", why) from exc
                if theirs is not None:
                    raise ReconcileFailure("ChildConflict", f"{theirs}: it is left untouched; delete or rename it, or "
                                                            "rename this InferenceBackend")  # fmt: skip
            try:
                if kind_ == "Deployment" and autoscaled and child is not None and child.replicas_owner != AUTOSCALER:
                    # Autoscaling turned on: the operator's manager owns replicas and its next apply drops them,
                    # which would reset them to 1. Another manager takes them first (vocabulary.HANDOFF_MANAGER).
                    assert plan.spec is not None and plan.spec.autoscaling is not None
                    await kube.hand_off_replicas(manifest, _clamped(child, plan.spec.autoscaling))
                    metrics.API_WRITES.labels(kind_).inc()
                await kube.apply(owned(manifest, dict(body)))
            except Exception as exc:
                if kind_ == "LeaderWorkerSet" and not_found(exc):
                    missing = _missing_crd(decision)
                    break
                raise ReconcileFailure("ApplyFailed", f"applying {kind_} {child_name}: {describe_error(exc)}") from exc
            recent.applied[key] = (wanted_hash, time.monotonic())
            metrics.API_WRITES.labels(kind_).inc()
            applied += 1
        if old is not None and other is not None and not switching and missing is None:
            old_name = name if other == "Deployment" else lws_name(name)
            try:
                await kube.delete(other, namespace, old_name)
            except Exception as exc:
                raise ReconcileFailure("DeleteFailed", f"deleting {other} {old_name}: {describe_error(exc)}") from exc
            metrics.API_WRITES.labels(other).inc()
            # a later switch back applies the same manifest again: what we applied before is gone
            recent.applied.pop((namespace, old_name, other), None)
        if scaler_missing is not None:
            recheck = min(recheck, SCALER_RETRY) if recheck is not None else SCALER_RETRY
    elif decision is not None and not decision.satisfiable:
        metrics.UNSATISFIABLE.inc()
    if waiting is not None and autoscaled and previous.get("autoscaling"):
        scaler_status = dict(previous["autoscaling"])  # nothing applied now: what was applied still holds
    serving = new if new is not None else next((c for c in workloads.values() if c is not None), None)
    switch_note = None
    if switching and missing is None and old is not None and kind is not None and other is not None:
        serving = old  # what the Service routes to until the new workload is available
        progress = status.Observed.from_deployment(new.body) if new is not None else None
        ready = f"{progress.ready_replicas}/{progress.replicas} ready" if progress is not None else "being created"
        switch_note = (f"switching from a {other} to a {kind} ({ready}): the {other} keeps serving until the {kind} "
                       "is available, then it is deleted")  # fmt: skip
    elif missing is not None:
        serving = old
    observed = status.Observed.from_deployment(serving.body if serving else None)
    if observed is None and decision is not None and decision.satisfiable and waiting is None and missing is None:
        # Just applied; the watch has not brought the workload back yet. It starts with none ready.
        observed = status.Observed(replicas=plan.replicas, ready_replicas=0, available=False)
    pod_problem = worst(world.pods.get((namespace, name), ())) if serving_any else None
    new_status = status.compute(
        generation=generation, decision=decision, error=error, observed=observed, serving=previous,
        endpoint=f"http://{name}.{namespace}.svc:8000", previous=previous, now=_now(), spec_hash=plan.spec_hash,
        waiting=waiting.message(plan.replicas, _per_replica(decision), _surging(plan)) if waiting else None,
        pod_problem=pod_problem, selector=selector_string(name),
        autoscaling=_scaling_condition(plan, scaler_status, scaler_missing, overcommitted, observed)
        if autoscaled and decision is not None and decision.satisfiable else None,
        missing=missing, switching=switch_note,
    )  # fmt: skip
    if scaler_status is not None and "backend" in new_status:
        new_status["autoscaling"] = scaler_status
    rollout = plan.rollout.to_status() if plan.rollout is not None else None
    said = previous.get("rollout") or {}
    if (
        rollout is not None
        and plan.rollout is not None
        and plan.rollout.kept
        and said.get("strategy") == rollout["strategy"]
    ):
        rollout = said  # the reason given when it was chosen, not a rewrite on the next pass
    if rollout is not None and "backend" in new_status:
        new_status["rollout"] = rollout
    written = False
    if status.changed(previous, new_status):
        if log.isEnabledFor(logging.DEBUG):
            diff = sorted(k for k in set(previous) | set(new_status) if previous.get(k) != new_status.get(k))
            log.debug("status of %s/%s changes (%s): %s", namespace, name, trigger, diff)
        patch = {**{k: None for k in previous if k not in new_status}, **new_status}
        try:
            await kube.patch_status(namespace, name, patch)
        except Exception as exc:
            raise ReconcileFailure("StatusWriteFailed", f"writing the status: {describe_error(exc)}") from exc
        recent.statuses[(namespace, name)] = new_status
        metrics.API_WRITES.labels("InferenceBackendStatus").inc()
        written = True
    if missing is not None:
        recheck = CRD_RECHECK if recheck is None else min(recheck, CRD_RECHECK)
    return Outcome(decision, error, applied, written, new_status, waiting, freed, pod_problem, recheck, overcommitted)


def _replicas(spec: InferenceBackendSpec, deployment: Child | None) -> int:
    """The replicas the operator counts on: spec.replicas; with spec.autoscaling, what the autoscaler set on the
    live Deployment (at least minReplicas; minReplicas when there is none yet)."""
    if spec.autoscaling is None:
        return spec.replicas
    live = (deployment.body.get("spec") or {}).get("replicas") if deployment is not None else None
    return max(spec.autoscaling.min_replicas, int(live) if live is not None else spec.autoscaling.min_replicas)


def _clamped(child: Child, a: Autoscaling) -> int:
    """The live replicas within [minReplicas, maxReplicas], at least 1: what the hand-over keeps."""
    live = int((child.body.get("spec") or {}).get("replicas", 1) or 0)
    return max(1, a.min_replicas, min(live, a.max_replicas))


async def _apply_scaler(manifest: dict[str, Any], wanted_hash: str, body: Mapping[str, Any],
                        previous: Mapping[str, Any], plan: Plan, kube: Kube, recent: Recent,
                        owner: tuple[str, str]) -> tuple[dict[str, Any] | None, str | None, int]:  # fmt: skip
    """Apply the ScaledObject unless the status says this hash is applied: (status.autoscaling, why the KEDA CRD
    is missing or None, writes made). A missing CRD is a condition, tried again every SCALER_RETRY seconds."""
    name = manifest["metadata"]["name"]
    target = manifest["spec"]["scaleTargetRef"]
    metric, query = plan.scaler or ("", "")
    status_now = {"scaledObject": name, "target": f"{target['kind']}/{target['name']}", "metric": metric,
                  "query": query, "appliedHash": wanted_hash}  # fmt: skip
    if (previous.get("autoscaling") or {}).get("appliedHash") == wanted_hash:
        return status_now, None, 0
    missing = recent.scaler_missing.get(owner)
    if missing is not None and time.monotonic() - missing[1] < SCALER_RETRY:
        return None, missing[0], 0
    annotations = {**manifest["metadata"].get("annotations", {}), APPLIED_HASH: wanted_hash}
    manifest = {**manifest, "metadata": {**manifest["metadata"], "annotations": annotations}}
    try:
        if not previous.get("autoscaling"):  # the first apply: never adopt a ScaledObject someone else made
            other = await kube.foreign(manifest, str(body["metadata"].get("uid")))
            if other is not None:
                raise ReconcileFailure("ChildConflict", f"{other}: it is left untouched; delete or rename it, or "
                                                        "rename this InferenceBackend")  # fmt: skip
        await kube.apply(owned(manifest, dict(body)))
    except ReconcileFailure:
        raise
    except Exception as exc:
        if http_status(exc) == 404:  # the API server has no keda.sh/v1alpha1 scaledobjects: KEDA is not installed
            why = (f"the CRD {KEDA_CRD} (KEDA) is not installed, so ScaledObject {name} cannot be "
                   f"created: {describe_error(exc)}; the Deployment keeps its replicas; tried again every "
                   f"{SCALER_RETRY:.0f} s")  # fmt: skip
            recent.scaler_missing[owner] = (why, time.monotonic())
            return None, why, 1
        raise ReconcileFailure("ApplyFailed", f"applying ScaledObject {name}: {describe_error(exc)}") from exc
    recent.scaler_missing.pop(owner, None)
    metrics.API_WRITES.labels(autoscaling.SCALED_OBJECT).inc()
    return status_now, None, 1


def _scaling_condition(plan: Plan, applied: dict[str, Any] | None, missing: str | None, over: str | None,
                       observed: status.Observed | None) -> tuple[bool, str, str]:  # fmt: skip
    """The Autoscaling condition: (status, reason, message)."""
    if missing is not None:
        return False, "ScalerMissing", missing
    a = plan.spec.autoscaling if plan.spec is not None else None
    if applied is None or a is None:
        return False, "Pending", "the ScaledObject is not applied yet"
    where = (f"ScaledObject {applied['scaledObject']} scales {applied['target']} from {a.min_replicas} to "
             f"{a.max_replicas} replicas on {a.metric} (target {a.target:g}) = {applied['metric']}; the operator "
             f"leaves the Deployment's replicas to it")  # fmt: skip
    if over is not None:
        return False, "CapacityExceeded", f"{over}; {where}"
    return True, "ScalerReady", where


def _unschedulable(world: World, owner: tuple[str, str], previous: Mapping[str, Any], generation: int,
                   deployed: bool) -> tuple[tuple[Current, str] | None, float | None]:  # fmt: skip
    """(the placement to leave and why, or None; seconds until its grace period ends, or None): every pod of the
    serving placement has been unschedulable for want of nodes for the grace period (pods.stuck_since)."""
    current = _current(previous, generation)
    if current is None or not deployed:
        return None, None
    stuck = stuck_since(world.pods.get(owner, ()), previous.get("specHash"))
    if stuck is None:
        return None, None
    since, message = stuck
    waited = world.clock() - since
    if waited < world.unschedulable_grace:
        return None, world.unschedulable_grace - waited + 1.0
    why = (f"the pods of {current.engine} on {current.describe()} stayed unschedulable past the grace period "
           f"({world.unschedulable_grace:.0f} s): {message}")  # fmt: skip
    return (current, why), None


def _surging(plan: Plan) -> bool:
    return plan.rollout is not None and plan.rollout.extra > 0


def _per_replica(decision: Decision | None) -> int:
    return decision.placement.gpus_per_replica if decision is not None and decision.placement is not None else 0


def _reserve(plan: Plan, world: World, owner: tuple[str, str],
             serving: bool) -> tuple[Shortfall | None, bool, str | None]:  # fmt: skip
    """Take (or keep, or release) ``owner``'s GPU reservation for this plan, before any API call: (the capacity
    the placement lacks, whether GPUs were released). Without a ledger (the CLI, tests) nothing is reserved.

    A placement that already holds its GPUs is not checked again; one that needs more waits, holding what the
    serving Deployment uses; an unsatisfiable or invalid spec keeps what still serves, or holds nothing."""
    ledger = world.ledger
    if ledger is None:
        return None, False, None
    decision = plan.decision
    if decision is None or not decision.satisfiable or plan.spec is None:
        return None, ledger.set(owner, ledger.held(owner) if serving else None), None
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
            return short, False, None
    over = None
    if a is not None and want is not None:
        beyond = shortfall(plan.spec, decision, world.cluster(), ledger, owner, plan.replicas + extra)
        if beyond is not None:
            over = (
                f"the autoscaler asked for {plan.replicas} replica(s) x {_per_replica(decision)} "
                f"{beyond.product}; {beyond.free} of {beyond.allocatable} are free on the nodes it may use: the "
                "replicas beyond stay Pending (GPUs are reserved for what the autoscaler sets, not maxReplicas)"
            )
    return None, ledger.set(owner, want), over
