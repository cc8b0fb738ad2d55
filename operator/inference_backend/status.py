"""Status of an InferenceBackend, computed purely from the decision and the observed Deployment.

Conditions use the metav1.Condition shape, each with observedGeneration; a condition's lastTransitionTime only
moves when its status changes, so an unchanged object yields an identical status (and the operator writes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inference_backend.decision import Decision
from inference_backend.pods import PodProblem

MAX_MESSAGE = 1024
RECONCILED = "the spec is planned, applied and reported"


@dataclass(frozen=True)
class Observed:
    """What the Deployment reports (None when there is no Deployment)."""

    replicas: int
    ready_replicas: int
    available: bool
    progress_deadline_exceeded: bool = False

    @classmethod
    def from_deployment(cls, deployment: dict[str, Any] | None) -> Observed | None:
        if deployment is None:
            return None
        status = deployment.get("status") or {}
        conds = {c.get("type"): c for c in status.get("conditions") or []}
        progressing = conds.get("Progressing") or {}
        return cls(
            replicas=int((deployment.get("spec") or {}).get("replicas", 1)),
            ready_replicas=int(status.get("readyReplicas") or 0),
            available=(conds.get("Available") or {}).get("status") == "True",
            progress_deadline_exceeded=progressing.get("reason") == "ProgressDeadlineExceeded",
        )


def _condition(kind: str, ok: bool | None, reason: str, message: str) -> dict[str, Any]:
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return {"type": kind, "status": status, "reason": reason, "message": message[:MAX_MESSAGE]}


def _pod_condition(ok: bool, reason: str, message: str, problem: PodProblem | None) -> dict[str, Any]:
    """The Ready condition of a backend that is not Ready yet: the worst pod problem, when there is one, gives its
    reason (Unschedulable, ImagePullBackOff, CrashLoopBackOff, OOMKilled...) and ends its message."""
    if problem is None:
        return _condition("Ready", ok, reason, message)
    return _condition("Ready", ok, problem.reason, f"{message}; {problem.message}")


def _rejections(decision: Decision) -> str:
    return "; ".join(f"{engine}: {why}" for engine, why in decision.rejected)


def compute(
    *,
    generation: int,
    decision: Decision | None,
    error: str | None,
    observed: Observed | None,
    serving: dict[str, Any] | None,
    endpoint: str,
    previous: dict[str, Any] | None,
    now: str,
    spec_hash: str | None = None,
    waiting: str | None = None,
    pod_problem: PodProblem | None = None,
    selector: str | None = None,
    autoscaling: tuple[bool, str, str] | None = None,
) -> dict[str, Any]:
    """The new status.

    ``decision`` is this generation's selection (None with ``error`` when the spec is invalid); ``serving`` is the
    status of what was applied before (backend, decision, specHash), kept when the new decision cannot be applied
    so the status keeps describing what still serves. ``waiting`` says why a satisfiable decision is not applied
    yet (its GPUs are reserved by other InferenceBackends): phase Pending, or Degraded while the previous
    Deployment serves. ``selector`` is the pods' label selector (status.selector, for the scale subresource);
    ``autoscaling`` the Autoscaling condition (status, reason, message) with spec.autoscaling. ``pod_problem`` is
    the worst problem of the backend's pods (inference_backend.pods.worst):
    while the backend is not Ready it becomes the Ready condition's reason, and its message is appended.
    """
    conditions: list[dict[str, Any]] = []
    status: dict[str, Any] = {"observedGeneration": generation}
    satisfiable = decision is not None and decision.satisfiable
    if error is not None:
        conditions.append(_condition("BackendSelected", False, "InvalidSpec", error))
        conditions.append(_condition("Fits", None, "InvalidSpec", "the spec must be fixed first"))
        conditions.append(_condition("SpeculativeDecoding", None, "InvalidSpec", "the spec must be fixed first"))
    elif decision is not None and decision.placement is not None and decision.backend is not None:
        p = decision.placement
        conditions.append(
            _condition("BackendSelected", True, "EngineSelected", f"{decision.backend} on {p.describe()}")
        )
        memory = decision.to_status().memory
        fits = "" if memory is None else (f"required {memory.required_gi_b} GiB of {memory.available_gi_b} GiB; "
                                          f"KV cache {memory.kv_cache_gi_b} GiB")  # fmt: skip
        conditions.append(_condition("Fits", True, "Fits", fits))
        spec = decision.speculation
        reason = "Enabled" if spec.enabled else ("NotRequested" if spec.reason == "not requested" else "Disabled")
        conditions.append(_condition("SpeculativeDecoding", spec.enabled, reason, spec.reason))
    elif decision is not None:
        why = decision.reasons[-1] if decision.reasons else "no engine fits"
        conditions.append(_condition("BackendSelected", False, "NoEngine", why))
        conditions.append(_condition("Fits", False, "DoesNotFit", _rejections(decision) or why))
        conditions.append(_condition("SpeculativeDecoding", None, "NoEngine", "no engine selected"))

    if satisfiable and decision is not None and waiting is not None:
        status["decision"] = decision.to_status().wire()
        if serving and serving.get("backend"):
            status.update({k: v for k, v in serving.items() if k in ("backend", "specHash", "endpoint")})
        else:
            status["backend"] = decision.backend
    elif satisfiable and decision is not None:
        status["backend"] = decision.backend
        status["decision"] = decision.to_status().wire()
        status["specHash"] = spec_hash
        status["endpoint"] = endpoint
    else:
        if serving:
            status.update({k: v for k, v in serving.items() if k in ("backend", "specHash", "endpoint")})
        if decision is not None:
            status["decision"] = decision.to_status().wire()

    replicas = observed.replicas if observed else 0
    ready = observed.ready_replicas if observed else 0
    serving_now = observed is not None and observed.available and (ready > 0 or replicas == 0)
    if not satisfiable:
        phase = "Degraded" if serving_now else "Failed"
        why = "the spec cannot be satisfied"
        if serving_now:
            why += "; the previous Deployment keeps serving"
        conditions.append(_condition("Ready", serving_now, "Unsatisfiable", why))
    elif waiting is not None:
        phase = "Degraded" if serving_now else "Pending"
        if serving_now:
            waiting += "; the previous Deployment keeps serving"
        conditions.append(_condition("Ready", serving_now, "InsufficientCapacity", waiting))
    elif observed is None:
        phase = "Deploying"
        conditions.append(_condition("Ready", False, "Deploying", "the Deployment is being created"))
    elif observed.progress_deadline_exceeded:
        phase = "Degraded"
        late = f"{ready}/{replicas} replicas ready; the rollout exceeded its deadline"
        conditions.append(_pod_condition(serving_now, "ProgressDeadlineExceeded", late, pod_problem))
    elif serving_now and ready >= replicas:
        phase = "Ready"
        conditions.append(_condition("Ready", True, "Available", f"{ready}/{replicas} replicas ready"))
    else:
        phase = "Deploying"
        conditions.append(_pod_condition(serving_now, "Deploying", f"{ready}/{replicas} replicas ready", pod_problem))
    if autoscaling is not None:
        conditions.append(_condition("Autoscaling", *autoscaling))
    conditions.append(_condition("Reconciled", True, "Reconciled", RECONCILED))
    status.update(phase=phase, replicas=replicas, readyReplicas=ready, ready=f"{ready}/{replicas}")
    if selector is not None:
        status["selector"] = selector
    status["conditions"] = _with_transitions(conditions, previous, generation, now)
    return {k: v for k, v in status.items() if v is not None}


def failed(previous: dict[str, Any] | None, *, generation: int, reason: str, message: str, now: str) -> dict[str, Any]:
    """The status after a reconcile that failed part-way (planning raised, the API server refused or did not answer
    an apply): everything else stays as the last good reconcile left it, the Reconciled condition says what failed
    and that it is retried, and the phase becomes Degraded while something serves, Failed otherwise.

    The message carries no attempt count or time, so retries that fail the same way write nothing more (each write
    is an event of the backend, which would otherwise trigger the next attempt at once)."""
    status = dict(previous or {})
    serving = status.get("phase") in ("Ready", "Degraded")
    status["phase"] = "Degraded" if serving else "Failed"
    cond = _condition("Reconciled", False, reason, f"{message}; retried with capped exponential backoff")
    others = [c for c in status.get("conditions") or [] if c.get("type") != "Reconciled"]
    status["conditions"] = [*others, *_with_transitions([cond], previous, generation, now)]
    return status


def _with_transitions(
    conditions: list[dict[str, Any]], previous: dict[str, Any] | None, generation: int, now: str
) -> list[dict[str, Any]]:  # fmt: skip
    before = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    out = []
    for cond in conditions:
        old = before.get(cond["type"])
        since = old.get("lastTransitionTime") if old and old.get("status") == cond["status"] else None
        out.append({**cond, "observedGeneration": generation, "lastTransitionTime": since or now})
    return out


def changed(current: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether writing ``new`` would change anything."""
    return (current or {}) != new
