"""The Events a reconcile posts, derived from its outcome (pure: controller.execute posts them).

- after a reconcile whose status was written: a Warning for an invalid spec, a placement waiting for capacity or an
  unsatisfiable spec, or a Normal ``Selected`` when the placement changed (engine, devices, or landing after a wait);
- a Warning ``AdapterMissing`` when a replica has lacked a LoRA adapter it loads while it serves past the deadline;
- the worst pod problem the Ready condition shows, once per change of it;
- a failed reconcile: a Warning on the first attempt and every tenth, so Events stay bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inference_backend.capacity import Shortfall
from inference_backend.decision import Decision
from inference_backend.pods import PodProblem


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


def placement(status: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the Selected Event reports a change of: the engine, the devices, and whether it is applied (a backend
    that waited for capacity or a CRD keeps its decision in the status, and its placement is news when it lands)."""
    where = (status.get("decision") or {}).get("placement") or {}
    held = _ready(status).get("reason") in ("InsufficientCapacity", "CRDMissing")
    return (status.get("backend"), where.get("gpuProduct"), where.get("gpusPerReplica"), held)


def _ready(status: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})


def reconciled(
    decision: Decision | None,
    error: str | None,
    waiting: Shortfall | None,
    applied: int,
    status: Mapping[str, Any],
    before: tuple[Any, ...],
) -> list[Event]:
    """The Events of a reconcile that wrote the status (``before``: :func:`placement` of the status before it;
    ``waiting``: the capacity the placement waits for), and a Warning while a replica lacks an adapter past the
    deadline (AdaptersLoaded=False, AdapterMissing: posted when that message changes, as the status is written)."""
    return _decision(decision, error, waiting, applied, status, before) + _adapters(status)


def _adapters(status: Mapping[str, Any]) -> list[Event]:
    cond: Mapping[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "AdaptersLoaded"), {})
    return (
        [Event("Warning", "AdapterMissing", str(cond.get("message")))] if cond.get("reason") == "AdapterMissing" else []
    )


def _decision(
    decision: Decision | None,
    error: str | None,
    waiting: Shortfall | None,
    applied: int,
    status: Mapping[str, Any],
    before: tuple[Any, ...],
) -> list[Event]:
    if error:
        return [Event("Warning", "InvalidSpec", error)]
    if waiting is not None and decision is not None:
        per_replica = decision.placement.gpus_per_replica if decision.placement else 0
        message = waiting.message(status.get("replicas") or 0, per_replica)
        return [Event("Warning", "InsufficientCapacity", message)]
    if decision is not None and not decision.satisfiable:
        return [Event("Warning", "Unsatisfiable", decision.reasons[-1])]
    if decision is not None and placement(status) != before:
        where = decision.placement.describe() if decision.placement else ""
        return [Event("Normal", "Selected", f"{decision.backend} on {where}; {applied} object(s) applied")]
    return []


def pod(
    problem: PodProblem | None, status: Mapping[str, Any], warned: PodProblem | None, status_written: bool
) -> tuple[list[Event], PodProblem | None]:
    """A Warning for the worst pod problem the Ready condition shows, once per change of it: (the Events, the
    problem now warned about). ``warned``: the one posted last; one the status showed already (written before a
    restart of the operator) is not posted again."""
    if problem is None or _ready(status).get("reason") != problem.reason:
        return [], None  # gone, or not shown: a return of it is a change
    if warned == problem or not status_written:
        return [], problem
    return [Event("Warning", problem.reason, problem.message)], problem


def failed(reason: str, message: str, attempt: int, delay: float) -> list[Event]:
    """The Warning of a failed reconcile: on the first attempt and every tenth."""
    if attempt == 1 or attempt % 10 == 0:
        return [Event("Warning", reason, f"{message}; retry {attempt} in {delay:.0f} s")]
    return []
