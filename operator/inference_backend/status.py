"""Status of an InferenceBackend, computed purely: :func:`build` makes the whole status of a reconcile from one
:class:`Input` (the decision, the observed workloads, what waits, the autoscaler, the rollout); :func:`failed` the
status after a reconcile that failed part-way. The controller writes either through its one status write.

Conditions use the metav1.Condition shape, each with observedGeneration; a condition's lastTransitionTime only
moves when its status changes, so an unchanged object yields an identical status (and the operator writes nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference_backend.api.inferencebackend import Autoscaling
from inference_backend.decision import Decision
from inference_backend.pods import PodProblem
from inference_backend.rollout import Choice

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


@dataclass(frozen=True)
class Scaler:
    """spec.autoscaling's ScaledObject, as the Autoscaling condition and status.autoscaling report it."""

    spec: Autoscaling
    applied: dict[str, Any] | None
    """status.autoscaling: the ScaledObject applied (its name, target, metric, query and hash); None before."""
    missing: str | None = None
    """Why the KEDA CRD is missing (the ScaledObject cannot be created), or None."""
    overcommitted: str | None = None
    """The autoscaler asked for more replicas than the GPU pool has free devices for (they stay Pending)."""

    def condition(self) -> tuple[bool, str, str]:
        """The Autoscaling condition: (status, reason, message)."""
        if self.missing is not None:
            return False, "ScalerMissing", self.missing
        a, applied = self.spec, self.applied
        if applied is None:
            return False, "Pending", "the ScaledObject is not applied yet"
        where = (
            f"ScaledObject {applied['scaledObject']} scales {applied['target']} from {a.min_replicas} to "
            f"{a.max_replicas} replicas on {a.metric} (target {a.target:g}) = {applied['metric']}; the operator "
            "leaves the Deployment's replicas to it"
        )
        if self.overcommitted is not None:
            return False, "CapacityExceeded", f"{self.overcommitted}; {where}"
        return True, "ScalerReady", where


@dataclass(frozen=True)
class Input:
    """Everything the status of one reconcile is made of."""

    generation: int
    decision: Decision | None
    """This generation's selection (None with ``error`` when the spec is invalid)."""
    error: str | None
    previous: Mapping[str, Any] | None
    """The status as last written: what was applied before (backend, decision, specHash), kept when the new decision
    cannot be applied so the status keeps describing what still serves; its conditions keep their transition times."""
    now: str
    endpoint: str
    spec_hash: str | None = None
    selector: str | None = None
    """The pods' label selector (status.selector, for the scale subresource)."""
    workload: Observed | None = None
    """The workload of the plan's kind as the watch reports it (without a plan: whichever workload exists)."""
    old: Observed | None = None
    """The workload of the other kind (a Deployment replaced by a LeaderWorkerSet, or back), while it exists."""
    kinds: tuple[str, str] | None = None
    """(the plan's workload kind, the other kind)."""
    switching: bool = False
    """The workload changes kind and the new one is not available yet: the old one keeps serving, phase Deploying,
    reason SwitchingWorkload."""
    replicas: int | None = None
    """The replicas just applied: until the watch brings the workload back it counts as none of them ready."""
    waiting: str | None = None
    """Why a satisfiable decision is not applied yet (its GPUs are reserved by other InferenceBackends): phase
    Pending, or Degraded while the previous Deployment serves."""
    missing: str | None = None
    """The plan needs an API the cluster does not serve (the LeaderWorkerSet CRD): nothing new is applied, phase
    Pending (Degraded while the previous child serves), the Ready condition's reason CRDMissing."""
    pod_problem: PodProblem | None = None
    """The worst problem of the backend's pods (pods.worst): while the backend is not Ready it becomes the Ready
    condition's reason, and its message is appended."""
    scaler: Scaler | None = None
    """With spec.autoscaling and a satisfiable decision: the Autoscaling condition and status.autoscaling."""
    rollout: Choice | None = None
    """How the Deployment's pods are replaced (status.rollout)."""
    routing: Mapping[str, Any] | None = None
    """spec.routing.inferencePool: the InferencePool applied and its picker (status.routing), or why not (its CRD is
    missing: ``message``)."""
    adapters: ServedAdapters | None = None
    """spec.adapters loaded while the pods serve: status.adapters and the AdaptersLoaded condition."""

    @property
    def satisfiable(self) -> bool:
        return self.decision is not None and self.decision.satisfiable


def build(inp: Input) -> dict[str, Any]:
    """The whole status of an InferenceBackend after a reconcile that ran to its end."""
    observed, note = _serving(inp)
    conditions = _selection(inp.decision, inp.error)
    st: dict[str, Any] = {"observedGeneration": inp.generation, **_applied(inp)}
    phase, ready = _readiness(inp, observed, note)
    conditions.append(ready)
    if inp.scaler is not None:
        conditions.append(_condition("Autoscaling", *inp.scaler.condition()))
    if inp.adapters is not None:
        conditions.append(_condition("AdaptersLoaded", *inp.adapters.condition()))
    conditions.append(_condition("Reconciled", True, "Reconciled", RECONCILED))
    replicas = observed.replicas if observed else 0
    ready_replicas = observed.ready_replicas if observed else 0
    st.update(phase=phase, replicas=replicas, readyReplicas=ready_replicas, ready=f"{ready_replicas}/{replicas}")
    if inp.selector is not None:
        st["selector"] = inp.selector
    st["conditions"] = _with_transitions(conditions, inp.previous, inp.generation, inp.now)
    out = {k: v for k, v in st.items() if v is not None}
    if "backend" in out:
        out.update(_notes(inp))
    return out


def _serving(inp: Input) -> tuple[Observed | None, str | None]:
    """The workload the Ready condition reports on, and the note of a switch of workload kind in progress."""
    if inp.switching and inp.missing is None and inp.old is not None and inp.kinds is not None:
        kind, other = inp.kinds
        new = inp.workload
        ready = f"{new.ready_replicas}/{new.replicas} ready" if new is not None else "being created"
        note = (
            f"switching from a {other} to a {kind} ({ready}): the {other} keeps serving until the {kind} is "
            "available, then it is deleted"
        )
        return inp.old, note  # what the Service routes to until the new workload is available
    if inp.missing is not None:
        return inp.old, None
    observed = inp.workload
    if observed is None and inp.replicas is not None and inp.satisfiable and inp.waiting is None:
        # Just applied; the watch has not brought the workload back yet. It starts with none ready.
        observed = Observed(replicas=inp.replicas, ready_replicas=0, available=False)
    return observed, None


def _selection(decision: Decision | None, error: str | None) -> list[dict[str, Any]]:
    """The BackendSelected, Fits and SpeculativeDecoding conditions."""
    if error is not None:
        return [
            _condition("BackendSelected", False, "InvalidSpec", error),
            _condition("Fits", None, "InvalidSpec", "the spec must be fixed first"),
            _condition("SpeculativeDecoding", None, "InvalidSpec", "the spec must be fixed first"),
        ]
    if decision is not None and decision.placement is not None and decision.backend is not None:
        p = decision.placement
        memory = decision.to_status().memory
        fits = (
            ""
            if memory is None
            else f"required {memory.required_gi_b} GiB of {memory.available_gi_b} GiB; "
            f"KV cache {memory.kv_cache_gi_b} GiB"
        )
        spec = decision.speculation
        reason = "Enabled" if spec.enabled else ("NotRequested" if spec.reason == "not requested" else "Disabled")
        return [
            _condition("BackendSelected", True, "EngineSelected", f"{decision.backend} on {p.describe()}"),
            _condition("Fits", True, "Fits", fits),
            _condition("SpeculativeDecoding", spec.enabled, reason, spec.reason),
        ]
    if decision is not None:
        why = decision.reasons[-1] if decision.reasons else "no engine fits"
        return [
            _condition("BackendSelected", False, "NoEngine", why),
            _condition("Fits", False, "DoesNotFit", _rejections(decision) or why),
            _condition("SpeculativeDecoding", None, "NoEngine", "no engine selected"),
        ]
    return []


SERVES = ("backend", "specHash", "endpoint")
"""What the status says of what is applied and serving: kept from the previous status until something new is."""


def _applied(inp: Input) -> dict[str, Any]:
    """backend, decision, specHash and endpoint: this decision's once applied, else what still serves."""
    decision, serving = inp.decision, inp.previous
    if inp.satisfiable and decision is not None and (inp.waiting is not None or inp.missing is not None):
        if serving and serving.get("backend"):
            kept = {k: v for k, v in serving.items() if k in SERVES}
            return {"decision": decision.to_status().wire(), **kept}
        return {"decision": decision.to_status().wire(), "backend": decision.backend}
    if inp.satisfiable and decision is not None:
        return {
            "backend": decision.backend,
            "decision": decision.to_status().wire(),
            "specHash": inp.spec_hash,
            "endpoint": inp.endpoint,
        }
    out = {k: v for k, v in (serving or {}).items() if k in SERVES}
    if decision is not None:
        out["decision"] = decision.to_status().wire()
    return out


def _readiness(inp: Input, observed: Observed | None, switching: str | None) -> tuple[str, dict[str, Any]]:
    """The phase and the Ready condition."""
    replicas = observed.replicas if observed else 0
    ready = observed.ready_replicas if observed else 0
    serving_now = observed is not None and observed.available and (ready > 0 or replicas == 0)
    problem = inp.pod_problem
    if not inp.satisfiable:
        why = "the spec cannot be satisfied" + ("; the previous Deployment keeps serving" if serving_now else "")
        return ("Degraded" if serving_now else "Failed"), _condition("Ready", serving_now, "Unsatisfiable", why)
    if inp.waiting is not None:
        waiting = inp.waiting + ("; the previous Deployment keeps serving" if serving_now else "")
        return ("Degraded" if serving_now else "Pending"), _condition(
            "Ready", serving_now, "InsufficientCapacity", waiting
        )
    if inp.missing is not None:
        return ("Degraded" if serving_now else "Pending"), _condition("Ready", serving_now, "CRDMissing", inp.missing)
    if switching is not None:
        return "Deploying", _condition("Ready", serving_now, "SwitchingWorkload", switching)
    if observed is None:
        return "Deploying", _condition("Ready", False, "Deploying", "the Deployment is being created")
    if observed.progress_deadline_exceeded:
        late = f"{ready}/{replicas} replicas ready; the rollout exceeded its deadline"
        return "Degraded", _pod_condition(serving_now, "ProgressDeadlineExceeded", late, problem)
    if serving_now and ready >= replicas:
        return "Ready", _condition("Ready", True, "Available", f"{ready}/{replicas} replicas ready")
    if observed is not None and _lost_replicas(inp, observed):
        lost = f"{ready}/{replicas} replicas ready: {replicas - ready} of this rollout's pods stopped serving"
        return "Degraded", _pod_condition(True, "ReplicasUnavailable", lost, problem)
    return "Deploying", _pod_condition(serving_now, "Deploying", f"{ready}/{replicas} replicas ready", problem)


def _lost_replicas(inp: Input, observed: Observed) -> bool:
    """Some pods of a complete rollout stopped serving while others serve (a pod deleted, evicted or killed after it
    served): the last status said Ready (or Degraded) at this spec hash and replica count. A rollout or a scale-up
    in progress is Deploying instead."""
    last = inp.previous or {}
    return (
        0 < observed.ready_replicas < observed.replicas
        and last.get("phase") in ("Ready", "Degraded")
        and last.get("specHash") == inp.spec_hash
        and last.get("replicas") == observed.replicas
    )


def _notes(inp: Input) -> dict[str, Any]:
    """status.autoscaling (the ScaledObject applied) and status.rollout (how pods are replaced, and why)."""
    out: dict[str, Any] = {}
    if inp.scaler is not None and inp.scaler.applied is not None:
        out["autoscaling"] = inp.scaler.applied
    if inp.routing is not None:
        out["routing"] = dict(inp.routing)
    if inp.adapters is not None:
        out["adapters"] = adapters_entry(inp.adapters.replicas)
    if inp.rollout is not None and (rollout := inp.rollout.to_status()) is not None:
        said = (inp.previous or {}).get("rollout") or {}
        if inp.rollout.kept and said.get("strategy") == rollout["strategy"]:
            rollout = dict(said)  # the reason given when it was chosen, not a rewrite on the next pass
        out["rollout"] = rollout
    return out


def failed(
    previous: Mapping[str, Any] | None, *, generation: int, reason: str, message: str, now: str
) -> dict[str, Any]:
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
    conditions: list[dict[str, Any]], previous: Mapping[str, Any] | None, generation: int, now: str
) -> list[dict[str, Any]]:
    before = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    out = []
    for cond in conditions:
        old = before.get(cond["type"])
        since = old.get("lastTransitionTime") if old and old.get("status") == cond["status"] else None
        out.append({**cond, "observedGeneration": generation, "lastTransitionTime": since or now})
    return out


def changed(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether writing ``new`` would change anything."""
    return (current or {}) != new


def merge_patch(previous: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``previous`` into ``new``: every key that disappeared is nulled, at
    every depth (a placement's nodeSelector that loses a label must not keep it: a merge patch of the new object alone
    merges nested objects key by key); lists and scalars are replaced whole."""
    patch: dict[str, Any] = {k: None for k in previous if k not in new}
    for key, value in new.items():
        before = previous.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = merge_patch(before, value)
        else:
            patch[key] = value
    return patch


@dataclass(frozen=True)
class Replica:
    """One serving pod as its engine reports itself: the LoRA adapters it serves (name -> the path it loaded)."""

    pod: str
    url: str
    """The pod's engine, http://IP:PORT."""
    adapters: Mapping[str, str]


def served_adapters(models: Mapping[str, Any], base: str) -> dict[str, str]:
    """name -> root of the LoRA adapters in a replica's ``GET /v1/models`` reply, in vLLM's shape (each adapter a
    model whose ``parent`` is the base model and ``root`` its path: vLLM 0.33.0 vllm/entrypoints/openai/models/
    serving.py show_available_models; our PyTorch runner answers the same); the base model left out."""
    out: dict[str, str] = {}
    for card in models.get("data") or ():
        name = str(card.get("id") or "")
        if name and name != base and card.get("parent") == base:
            out[name] = str(card.get("root") or "")
    return out


def adapters_entry(replicas: Sequence[Replica]) -> list[dict[str, Any]]:
    """status.adapters: the adapters each replica serves, by pod name."""
    return [{"pod": r.pod, "adapters": sorted(r.adapters)} for r in sorted(replicas, key=lambda r: r.pod)]


@dataclass(frozen=True)
class ServedAdapters:
    """spec.adapters loaded while the pods serve (docs/adapters.md): the names wanted, what each ready replica's
    engine lists, whether one has lacked a wanted adapter past the deadline, and the sidecars' errors (pod ->
    adapter -> why)."""

    wanted: tuple[str, ...]
    replicas: tuple[Replica, ...]
    overdue: bool = False
    errors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def lacking(self) -> dict[str, list[str]]:
        """pod -> the wanted adapters its engine does not list."""
        out = {r.pod: sorted(set(self.wanted) - set(r.adapters)) for r in self.replicas}
        return {pod: names for pod, names in sorted(out.items()) if names}

    def condition(self) -> tuple[bool | None, str, str]:
        """(status, reason, message) of the AdaptersLoaded condition."""
        if not self.replicas:
            return None, "NoReplica", "no ready replica has answered GET /v1/models yet"
        lacking = self.lacking()
        if not lacking:
            n, wanted = len(self.replicas), len(self.wanted)
            return True, "Loaded", f"every ready replica ({n}) serves the {wanted} adapter(s) of spec.adapters"
        said = "; ".join(f"{pod} lacks {', '.join(names)}" for pod, names in lacking.items())
        if not self.overdue:
            return False, "Loading", f"{said} (its adapters sidecar fetches and loads them)"
        why = "; ".join(
            f"{pod}: {name}: {error}"
            for pod, names in lacking.items()
            for name in names
            if (error := (self.errors.get(pod) or {}).get(name))
        )
        return (
            False,
            "AdapterMissing",
            f"{said}, past the deadline" + (f"; {why}" if why else "") + (" (spec.adapters)"),
        )
