"""One level-triggered reconcile of an InferenceBackend: plan, reserve, actions, execute, status, one status write.

- plan (controller.plan, pure): validate, select, render the complete children and hash them; reused while its
  inputs are unchanged;
- reserve: the plan's GPUs are taken in the in-memory ledger before any API call, so concurrent reconciles never
  promise the same devices twice;
- actions (controller.actions, pure): what to write, in what order, under which guard;
- execute (controller.execute): the only code that calls the API;
- status (inference_backend.status, pure): the whole status from one input, written once when it changed.

Everything read comes from kopf indexes (nodes by hardware class, Models, owned children), so a reconcile that
changes nothing makes no API call at all: children are applied only when their content hash differs from the
one recorded on the live object, and the status is written only when it changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, cast

from inference_backend import status
from inference_backend.capacity import Shortfall
from inference_backend.controller import metrics
from inference_backend.controller import plan as planning
from inference_backend.controller.actions import Actions, Workloads, kept, live_workloads, plan_writes
from inference_backend.controller.engine_http import EngineClient
from inference_backend.controller.execute import (
    Executed,
    ReconcileFailure,
    execute,
    replicas,
    sidecar_errors,
    write_status,
)
from inference_backend.controller.kube import Writer
from inference_backend.controller.plan import Plan, Reservation
from inference_backend.controller.world import Recent, World
from inference_backend.decision import Decision
from inference_backend.engines import lora
from inference_backend.engines.base import HTTP_PORT
from inference_backend.pods import PodProblem, worst
from inference_backend.render import selector_string
from inference_backend.routing import picker_name_of

log = logging.getLogger(__name__)
ADAPTERS_RESYNC = 15.0
"""Seconds between two reads of the adapters each pod serves, for a backend whose pods load them while they serve
(a restarted pod, or one that could not fetch one yet, is seen within this)."""
ADAPTERS_DEADLINE = 300.0
"""Seconds a ready pod may lack a wanted adapter (fetching and loading it) before AdaptersLoaded says
AdapterMissing with its sidecar's error."""


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
    """Seconds until the backend should be reconciled again (a grace period ends, a missing CRD is looked for)."""
    overcommitted: str | None = None
    """The autoscaler asked for more replicas than the GPU pool has free devices for (they stay Pending)."""


def _user_status(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (body.get("status") or {}).items() if k != "kopf"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def reconcile(
    body: Mapping[str, Any],
    world: World,
    writer: Writer,
    trigger: str,
    recent: Recent | None = None,
    engines: EngineClient | None = None,
) -> Outcome:
    """``engines``: HTTP to the serving pods (the adapters each serves, for status.adapters); None reads none."""
    started = time.perf_counter()
    try:
        outcome = await _reconcile(body, world, writer, recent or Recent(), trigger, engines)
    except Exception:
        metrics.RECONCILES.labels(trigger, "error").inc()
        raise
    finally:
        metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
    metrics.RECONCILES.labels(trigger, "ok" if outcome.error is None else "invalid").inc()
    return outcome


async def _reconcile(
    body: Mapping[str, Any], world: World, writer: Writer, recent: Recent, trigger: str, engines: EngineClient | None
) -> Outcome:
    meta = body["metadata"]
    owner = (str(meta["namespace"]), str(meta["name"]))
    generation = int(meta.get("generation") or 1)
    previous = recent.previous_status(owner, _user_status(body))
    now = time.monotonic()
    before = live_workloads(world, owner, None)
    stuck, recheck = planning.unschedulable(world, owner, previous, generation, before.serving, world.clock())
    plan = _plan(body, world, previous, recent, stuck)
    if plan.error is not None:
        metrics.ERRORS.labels("invalid_spec").inc()
    held = planning.reservation(plan, world, owner, serving=before.serving)
    freed = world.ledger.set(owner, held.hold) if world.ledger is not None and held.change else False
    workloads = live_workloads(world, owner, plan)
    actions, executed, adapters = Actions(), Executed(), None
    if plan.satisfiable and held.waiting is None:
        assert plan.decision is not None
        metrics.DECISIONS.labels(plan.decision.backend).inc()
        actions = plan_writes(plan, owner, world, previous, recent, workloads, now)
        executed = await execute(actions.writes, plan, writer, body)
        _remember(recent, executed, now)
        adapters = await _served_adapters(plan, owner, world, recent, engines, now)
    elif plan.decision is not None and not plan.decision.satisfiable:
        metrics.UNSATISFIABLE.inc()
    elif held.waiting is not None:
        actions = Actions(recorded=kept(plan, previous))
    inp = _status_input(plan, body, previous, world, workloads, held, actions, executed)
    new_status = status.build(replace(inp, adapters=adapters))
    written = await write_status(writer, owner, previous, new_status)
    if written:
        recent.statuses[owner] = new_status
    resync = ADAPTERS_RESYNC if plan.runtime_adapters is not None and plan.satisfiable else None
    for retry in (actions.retry_after, executed.retry_after, resync):
        if retry is not None:
            recheck = retry if recheck is None else min(recheck, retry)
    pods = worst(world.pods.get(owner, ())) if before.serving else None
    return Outcome(
        plan.decision,
        plan.error,
        executed.writes,
        written,
        new_status,
        held.waiting,
        freed,
        pods,
        recheck,
        held.overcommitted,
    )


async def _served_adapters(
    plan: Plan, owner: tuple[str, str], world: World, recent: Recent, engines: EngineClient | None, now: float
) -> status.ServedAdapters | None:
    """What each ready pod's engine serves of the adapters loaded while it serves (its GET /v1/models), and, once a
    pod has lacked one for ADAPTERS_DEADLINE, what its adapters sidecar says of it (GET /adapters)."""
    wanted = plan.runtime_adapters
    if wanted is None or engines is None or plan.decision is None or plan.decision.model is None:
        recent.adapters_lacking.pop(owner, None)
        return None
    ready = sorted((p.name, p.ip) for p in world.pods.get(owner, ()) if p.ready and p.ip)
    base = plan.decision.model.served_name or owner[1]
    served = status.ServedAdapters(
        wanted, tuple(await replicas([(n, f"http://{ip}:{HTTP_PORT}") for n, ip in ready], base, engines))
    )
    lacking = served.lacking()
    if not lacking:
        recent.adapters_lacking.pop(owner, None)
        return served
    if now - recent.adapters_lacking.setdefault(owner, now) < ADAPTERS_DEADLINE:
        return served
    sidecars = [(n, f"http://{ip}:{lora.SYNC_PORT}") for n, ip in ready if n in lacking]
    return replace(served, overdue=True, errors=await sidecar_errors(sidecars, engines))


def _plan(body: Mapping[str, Any], world: World, previous: Mapping[str, Any], recent: Recent, stuck: Any) -> Plan:
    """The plan, reused from the last reconcile of this backend while its inputs are the same (world.version set)."""
    meta = body["metadata"]
    owner = (meta["namespace"], meta["name"])
    try:
        key = planning.key(body, world, previous, stuck)
        cached = recent.plans.get(owner)
        if world.version is not None and cached is not None and cached.key == key:
            return cast(Plan, cached)
        plan = planning.make(body, world, previous, stuck, key)
    except Exception as exc:  # a bug or a fact nobody foresaw: this backend fails alone, visibly
        log.exception("planning %s/%s failed", *owner)
        raise ReconcileFailure("PlanningFailed", f"planning failed: {type(exc).__name__}: {exc}") from exc
    if world.version is not None:
        recent.plans[owner] = plan
    return plan


def _remember(recent: Recent, executed: Executed, now: float) -> None:
    """Trust our own writes until the indexes bring them back; forget what was deleted (a later switch back
    applies the same manifest again) and which CRDs were missing."""
    for key, applied_hash in executed.applied:
        recent.applied[key] = (applied_hash, now)
    for key in executed.deleted:
        recent.applied.pop(key, None)
        recent.missing.pop(key, None)
    for key in executed.released:
        recent.missing.pop(key, None)
    for key, why in executed.refused.items():
        recent.missing[key] = (why, now)


def _status_input(
    plan: Plan,
    body: Mapping[str, Any],
    previous: Mapping[str, Any],
    world: World,
    workloads: Workloads,
    held: Reservation,
    actions: Actions,
    executed: Executed,
) -> status.Input:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    recorded = {**actions.recorded, **executed.recorded}
    refused = {**actions.noted, **{kind: why for (_, _, kind), why in executed.refused.items()}}
    scaler = None
    if plan.satisfiable and plan.spec is not None and plan.spec.autoscaling is not None:
        scaler = status.Scaler(
            plan.spec.autoscaling, recorded.get("autoscaling"), refused.get("ScaledObject"), held.overcommitted
        )
    routing = _routing(plan, name, recorded.get("routing"), refused.get("InferencePool"))
    new, old = workloads.observed()
    kinds = (workloads.kind, workloads.old_kind) if workloads.kind and workloads.old_kind else None
    waiting = held.waiting.message(plan.replicas, plan.per_replica, plan.surging) if held.waiting else None
    pods = worst(world.pods.get((namespace, name), ())) if workloads.serving else None
    return status.Input(
        generation=int(meta.get("generation") or 1),
        decision=plan.decision,
        error=plan.error,
        previous=previous,
        now=_now(),
        endpoint=f"http://{name}.{namespace}.svc:8000",
        spec_hash=plan.spec_hash,
        selector=selector_string(name),
        workload=new,
        old=old,
        kinds=kinds,
        switching=workloads.switching,
        replicas=plan.replicas,
        waiting=waiting,
        missing=executed.missing,
        pod_problem=pods,
        scaler=scaler,
        rollout=plan.rollout,
        routing=routing,
    )


def _routing(plan: Plan, name: str, applied: Mapping[str, Any] | None, refused: str | None) -> dict[str, Any] | None:
    """status.routing: the pool applied (its entry), or while its CRD is missing what the status says."""
    if not plan.satisfiable or plan.spec is None or not plan.spec.routing.inference_pool.enabled:
        return None
    if refused is not None:
        return {"inferencePool": name, "endpointPicker": picker_name_of(name), "message": refused}
    return dict(applied) if applied is not None else None
