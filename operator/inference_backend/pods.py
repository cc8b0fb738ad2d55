"""What the operator keeps of its pods, and the worst pod problem of a backend. Pure: no I/O.

The pods index (handlers.pods) keeps one slim, bounded :class:`PodSummary` per pod, not the pod: its owner, its
phase and its problems (the scheduler's PodScheduled=False reason and message, container and init-container waiting
reasons, a last termination by OOMKilled), each message cut to :data:`MAX_MESSAGE` characters and at most
:data:`MAX_PROBLEMS` per pod. Messages are chosen to be stable while the problem lasts (ErrImagePull and
ImagePullBackOff alternate on every pull attempt: both are reported as ImagePullBackOff with the image; the
kubelet's growing back-off delays are left out), so a pod's summary changes only when its problem does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from inference_backend.vocabulary import INSTANCE_LABEL, SPEC_HASH

MAX_MESSAGE = 512
MAX_PROBLEMS = 4
SEVERITY = (
    "Unschedulable",
    "CreateContainerConfigError",
    "InvalidImageName",
    "ImagePullBackOff",
    "CreateContainerError",
    "OOMKilled",
    "CrashLoopBackOff",
    "RunContainerError",
)
"""Pod problem reasons, worst first; any other waiting reason ranks after these."""
BENIGN_WAITING = frozenset({"ContainerCreating", "PodInitializing"})
IMAGE_PULL = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull"})


@dataclass(frozen=True, order=True)
class PodProblem:
    reason: str
    message: str


@dataclass(frozen=True)
class PodSummary:
    name: str
    phase: str
    problems: tuple[PodProblem, ...] = ()
    unschedulable_since: float | None = None
    """When the scheduler first said the pod does not fit (PodScheduled=False's lastTransitionTime, epoch seconds),
    while it still says so; the unschedulable grace period counts from it."""
    spec_hash: str | None = None
    """The spec hash of the pod's template (render's annotation): which placement the pod belongs to."""
    volume_bound: bool = False
    """The scheduler's message blames a volume (a missing or unbound claim): moving elsewhere would not help."""
    ip: str | None = None
    """status.podIP: where the operator reads what the pod's engine serves (its LoRA adapters)."""
    ready: bool = False
    """The pod's Ready condition is True."""


VOLUME_WORDS = ("persistentvolumeclaim", "volume")


def _epoch(stamp: Any) -> float | None:
    try:
        return datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _cut(value: Any) -> str:
    text = str(value or "").strip()
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def rank(reason: str) -> int:
    return SEVERITY.index(reason) if reason in SEVERITY else len(SEVERITY)


def owner(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, InferenceBackend) of one of our pods: the Deployment (named as its InferenceBackend) is its
    ReplicaSet's name less ``-<pod-template-hash>``; else the ``app.kubernetes.io/instance`` label."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    suffix = "-" + str(labels.get("pod-template-hash") or "")
    for ref in meta.get("ownerReferences") or []:
        name = str(ref.get("name") or "")
        if ref.get("kind") == "ReplicaSet" and len(suffix) > 1 and name.endswith(suffix):
            return str(meta.get("namespace")), name[: -len(suffix)]
    instance = labels.get(INSTANCE_LABEL)
    return (str(meta.get("namespace")), str(instance)) if instance else None


def _memory_limit(spec: Mapping[str, Any], container: str) -> str | None:
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if c.get("name") == container:
            limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
            return str(limit) if limit else None
    return None


def _container_problem(cs: Mapping[str, Any], spec: Mapping[str, Any], init: bool) -> PodProblem | None:
    name = f"{'init container' if init else 'container'} {cs.get('name')}"
    waiting = (cs.get("state") or {}).get("waiting") or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    reason = waiting.get("reason")
    if last.get("reason") == "OOMKilled" and not cs.get("ready"):
        limit = _memory_limit(spec, str(cs.get("name")))
        within = f" (limit {limit})" if limit else ""
        return PodProblem(
            "OOMKilled",
            _cut(f"{name} was killed for exceeding its memory{within}, exit code {last.get('exitCode')}; restarting"),
        )
    if reason in IMAGE_PULL:
        return PodProblem(
            "ImagePullBackOff",
            _cut(
                f'{name}: cannot pull image "{cs.get("image")}" ({reason})'
                if reason == "ErrImageNeverPull"
                else f'{name}: cannot pull image "{cs.get("image")}"'
            ),
        )
    crashing = reason == "CrashLoopBackOff" or (last and not cs.get("ready") and int(cs.get("restartCount") or 0))
    if crashing and last.get("exitCode") not in (None, 0):
        why = f", {last['reason']}" if last.get("reason") else ""
        return PodProblem("CrashLoopBackOff", _cut(f"{name} keeps exiting (exit code {last.get('exitCode')}{why})"))
    if reason and reason not in BENIGN_WAITING and reason != "CrashLoopBackOff":
        return PodProblem(str(reason), _cut(f"{name}: {waiting.get('message') or reason}"))
    return None


def summarize(pod: Mapping[str, Any]) -> PodSummary | None:
    """The slim summary of one pod, or None for a pod being deleted (it no longer counts)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    spec = pod.get("spec") or {}
    st = pod.get("status") or {}
    problems: list[PodProblem] = []
    since: float | None = None
    volume_bound = False
    for cond in st.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message = _cut(cond.get("message") or cond.get("reason"))
            problems.append(PodProblem("Unschedulable", message))
            since = _epoch(cond.get("lastTransitionTime"))
            volume_bound = any(word in message.lower() for word in VOLUME_WORDS)
    for init, key in ((True, "initContainerStatuses"), (False, "containerStatuses")):
        for cs in st.get(key) or []:
            problem = _container_problem(cs, spec, init)
            if problem is not None:
                problems.append(problem)
    if st.get("phase") == "Failed" and st.get("reason"):
        problems.append(PodProblem(_cut(st["reason"])[:63], _cut(st.get("message") or st["reason"])))
    problems.sort(key=lambda p: (rank(p.reason), p.message))
    spec_hash = (meta.get("annotations") or {}).get(SPEC_HASH)
    return PodSummary(
        str(meta.get("name")),
        str(st.get("phase") or "Pending"),
        tuple(problems[:MAX_PROBLEMS]),
        since,
        str(spec_hash) if spec_hash else None,
        volume_bound,
        str(st["podIP"]) if st.get("podIP") else None,
        any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or []),
    )


def stuck_since(pods: Iterable[PodSummary], spec_hash: str | None) -> tuple[float, str] | None:
    """(since when, the scheduler's message) when every pod of the placement ``spec_hash`` is unschedulable because
    of the nodes (not a volume), or None. Pods of an older template (a rollout in flight) do not count."""
    mine = [p for p in pods if spec_hash is not None and p.spec_hash == spec_hash]
    if not mine or any(p.unschedulable_since is None or p.volume_bound for p in mine):
        return None
    first = min(mine, key=lambda p: (p.unschedulable_since or 0.0, p.name))
    message = next((pr.message for pr in first.problems if pr.reason == "Unschedulable"), "")
    return float(first.unschedulable_since or 0.0), message


def worst(pods: Iterable[PodSummary]) -> PodProblem | None:
    """The worst problem over a backend's pods, its message naming the pod (and how many pods share the reason);
    deterministic (ties go to the first pod by name)."""
    found = sorted((rank(p.reason), pod.name, p) for pod in pods for p in pod.problems[:1])
    if not found:
        return None
    _, name, problem = found[0]
    pods_with = {n for r, n, p in found if p.reason == problem.reason}
    others = f" (and {len(pods_with) - 1} more pod(s))" if len(pods_with) > 1 else ""
    return PodProblem(problem.reason, f"pod {name}{others}: {problem.message}")
