"""The read model of a reconcile: what kopf's indexes know of the children (:class:`Child`), the read-only views
over them, the node classes, the Models and the pods (:class:`World`), and what this process wrote lately
(:class:`Recent`). Nothing here calls the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from inference_backend import status
from inference_backend.api.model import ModelSpec
from inference_backend.capacity import GpuLedger
from inference_backend.controller.config import DEFAULT, Config
from inference_backend.facts import SELECTOR_KEYS, HardwareClass, Pool, is_device_resource, pod_pool
from inference_backend.pods import PodSummary
from inference_backend.rollout import Live
from inference_backend.vocabulary import DRA_POOL_ANNOTATION, SPEC_HASH


@dataclass(frozen=True)
class Child:
    """What the index knows of a child object: its applied hash and (for Deployments) spec and status."""

    applied_hash: str | None
    body: dict[str, Any] = field(default_factory=dict)
    replicas_owner: str | None = None
    """The Deployment's REPLICAS_OWNER annotation."""
    owner: str | None = None
    """The InferenceBackend owning it (its controller ownerReference); a LeaderWorkerSet is named <backend>-lws."""

    @cached_property
    def gpus(self) -> tuple[Pool, int] | None:
        """(GPU pool, devices over all replicas) a Deployment or LeaderWorkerSet requests (a LeaderWorkerSet's
        replicas x its group size pods, each requesting the GPUs of one node); None when it requests none."""
        spec = self.body.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") or {}
        annotations = ((spec.get("template") or {}).get("metadata") or {}).get("annotations") or {}
        return pod_pool(pod, int(spec.get("replicas", 1) or 0) * int(spec.get("size", 1) or 1), annotations)


WORKLOADS = ("Deployment", "LeaderWorkerSet")
"""The kinds that run an InferenceBackend's pods: a Deployment on one node, a LeaderWorkerSet across nodes."""


def slim_child(kind: str, spec: dict[str, Any], st: dict[str, Any]) -> dict[str, Any]:
    """What the indexes keep of a child: for a Deployment or LeaderWorkerSet, the replicas (and group size), the GPU
    request and the readiness fields (Child.gpus, status.Observed); nothing for the others. Pod templates stay out
    of the operator's memory. A LeaderWorkerSet is kept in a Deployment's shape: its leader template (the workers
    request the same per pod) and its size."""
    if kind not in WORKLOADS:
        return {}
    size = 1
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = int(lwt.get("size") or 1)
        spec = {"replicas": spec.get("replicas", 1), "template": lwt.get("leaderTemplate") or {}}
    pod = (spec.get("template") or {}).get("spec") or {}
    selector = {k: v for k, v in (pod.get("nodeSelector") or {}).items() if k in SELECTOR_KEYS}
    limits = [((c.get("resources") or {}).get("limits") or {}) for c in pod.get("containers") or []]
    containers = [{"resources": {"limits": {r: n for r, n in lim.items() if is_device_resource(r)}}} for lim in limits]
    annotations = ((spec.get("template") or {}).get("metadata") or {}).get("annotations") or {}
    kept = {k: annotations[k] for k in (DRA_POOL_ANNOTATION,) if k in annotations}  # a DRA placement's pool
    template = {
        "metadata": {"annotations": {SPEC_HASH: annotations.get(SPEC_HASH), **kept}},
        "spec": {"nodeSelector": selector, "containers": containers},
    }
    conditions = [{k: c.get(k) for k in ("type", "status", "reason")} for c in st.get("conditions") or []]
    status = {
        "readyReplicas": st.get("readyReplicas"),
        "conditions": conditions,
        "replicas": st.get("replicas"),
        "updatedReplicas": st.get("updatedReplicas"),
    }
    out_spec = {"replicas": spec.get("replicas", 1), "template": template, "strategy": spec.get("strategy")}
    if kind == "LeaderWorkerSet":
        out_spec["size"] = size
    return {"spec": out_spec, "status": status}


def child_signature(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a child's event can change in its owner's reconcile: for a workload, the rolled-up readiness."""
    kind = str(body.get("kind"))
    if kind not in WORKLOADS:
        return ()
    slim = slim_child(kind, dict(body.get("spec") or {}), dict(body.get("status") or {}))
    observed = status.Observed.from_deployment(slim)
    live = Live.from_deployment(slim, SPEC_HASH)
    surging = live is not None and live.surge is True and live.in_flight  # its end frees the surge replica's GPUs
    return (observed, slim["spec"]["template"], slim["spec"].get("size"), surging)


@dataclass
class World:
    """Read-only views the reconcile needs, over kopf indexes (lookups by key, no pass over every object)."""

    node_classes: Mapping[HardwareClass, Iterable[str]]
    models: Mapping[str, Iterable[tuple[str, ModelSpec | None]]]
    """namespace -> (name, spec) of its Models (None when a Model is invalid)."""
    children: Mapping[tuple[str, str, str], Child]
    """(namespace, name, kind) -> what we know of a child we applied."""
    version: tuple[int, int] | None = None
    """Versions of the node classes and of the Models, bumped by the operator on every change of either. When set,
    a reconcile reuses the selection and rendering of the last one with the same inputs (see :class:`Plan`)."""
    grouped: dict[HardwareClass, tuple[str, ...]] | None = None
    """``node_classes`` with sorted names, when the caller keeps them (cached per node-class version)."""
    ledger: GpuLedger | None = None
    """The GPUs in use kept up to date by the caller from the Deployments' events; without it, summed from
    ``children`` on every reconcile."""
    pods: Mapping[tuple[str, str], Iterable[PodSummary]] = field(default_factory=dict)
    """(namespace, InferenceBackend) -> the slim summaries of its pods (the pods index)."""
    config: Config = DEFAULT
    """The operator's configuration (the unschedulable grace period, autoscaling settings, image policy)."""
    clock: Callable[[], float] = time.time
    """Wall-clock seconds (compared with the pods' timestamps)."""

    def cluster(self) -> dict[HardwareClass, tuple[str, ...]]:
        if self.grouped is not None:
            return self.grouped
        return {cls: tuple(sorted(names)) for cls, names in self.node_classes.items()}

    def registry(self, namespace: str) -> dict[str, ModelSpec]:
        return {name: spec for name, spec in self.models.get(namespace, ()) if spec is not None}

    def gpus_in_use(self, exclude: tuple[str, str]) -> dict[Pool, int]:
        """Devices per pool requested by the Deployments of the other InferenceBackends (pools at 0 left out)."""
        if self.ledger is not None:
            return self.ledger.excluding(exclude)
        used: dict[Pool, int] = {}
        for (namespace, name, kind), child in self.children.items():
            if kind not in WORKLOADS or child.gpus is None:
                continue
            if (namespace, child.owner or name) == exclude:
                continue
            pool, gpus = child.gpus
            used[pool] = used.get(pool, 0) + gpus
        return {pool: gpus for pool, gpus in used.items() if gpus}


@dataclass
class Recent:
    """What this process wrote lately. The indexes are fed by watches and lag our own writes by milliseconds; until
    they catch up, our last writes are trusted, so concurrent triggers do not write the same thing twice. Only the
    leader writes, so our last status write is the newest status there is. Times are time.monotonic()."""

    ttl: float = 15.0
    applied: dict[tuple[str, str, str], tuple[str, float]] = field(default_factory=dict)
    missing: dict[tuple[str, str, str], tuple[str, float]] = field(default_factory=dict)
    """Children the API server refused for want of their CRD, tried again later (a ScaledObject without KEDA): (the
    message, when)."""
    statuses: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    plans: dict[tuple[str, str], Any] = field(default_factory=dict)
    """The last plan of each backend (controller.plan.Plan), reused while its inputs are unchanged."""
    adapters_lacking: dict[tuple[str, str], float] = field(default_factory=dict)
    """Since when a ready replica of the backend has lacked one of the adapters it loads while it serves."""

    def applied_lately(self, key: tuple[str, str, str], wanted: str, now: float) -> bool:
        entry = self.applied.get(key)
        return entry is not None and entry[0] == wanted and now - entry[1] < self.ttl

    def previous_status(self, key: tuple[str, str], seen: dict[str, Any]) -> dict[str, Any]:
        mine = self.statuses.get(key)
        if mine is None or mine == seen:
            self.statuses.pop(key, None)
            return seen
        return mine
