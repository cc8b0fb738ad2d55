"""Thin kopf handlers: indexes feed the reconcile; every trigger runs the same level-triggered reconcile.

- nodes are grouped by hardware class by one watch (nodewatch: a kopf index would cost O(nodes^2) at startup),
  Models are indexed by namespace, and the children we own by (namespace, name, kind) with their applied hash;
- create/update/resume of an InferenceBackend, events of the children we own (readiness roll-up, drift), of
  nodes whose hardware class changes and of Models all call :func:`inference_backend.reconcile.reconcile`.

Everything is event-driven: there is no kopf timer, because kopf puts a finalizer on objects with timers, and a
finalizer would keep InferenceBackends from being deleted whenever the operator is not running.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any, cast

import kopf
from lightkube import AsyncClient

from inference_backend import metrics
from inference_backend.api.common import GROUP, VERSION
from inference_backend.api.model import ModelSpec
from inference_backend.kube import Kube
from inference_backend.nodewatch import NodeClasses
from inference_backend.reconcile import (
    APPLIED_HASH,
    Child,
    GpuLedger,
    Recent,
    World,
    child_signature,
    reconcile,
    slim_child,
)
from inference_backend.render import MANAGED_BY

MANAGED = {"app.kubernetes.io/managed-by": MANAGED_BY}
DEBOUNCE_SECONDS = float(os.environ.get("IB_DEBOUNCE_SECONDS", "1"))
PLURAL = "inferencebackends"
KUBE = Kube()
RECENT = Recent()
LOCKS: dict[tuple[str, str], asyncio.Lock] = {}
PENDING: dict[str | None, asyncio.Task[None] | None] = {}
RETRIES: dict[tuple[str, str], int] = {}
NODES = NodeClasses()
GPUS = GpuLedger()
"""GPUs requested per backend's Deployment, kept from the Deployments' events (see on_deployment)."""
VERSIONS = {"models": 0}
"""Bumped on every Model event: with the nodes' version it keys the reuse of a backend's last selection."""
LAST_KWARGS: dict[str, Any] = {}
"""The indexes as kopf passes them to handlers, and (under "context") a handler's context, for node-triggered
reconciles: kopf's event posting needs the context variables it sets for its handlers."""
TASKS: dict[str, asyncio.Task[None]] = {}
log = logging.getLogger(__name__)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 8


@kopf.on.cleanup()
async def close(**_: Any) -> None:
    for task in TASKS.values():
        task.cancel()
    await KUBE.close()


@kopf.on.startup()
async def watch_nodes(**_: Any) -> None:
    """One list-then-watch of the nodes for the whole process (see nodewatch: why not a kopf index)."""

    def changed() -> None:
        if LAST_KWARGS:
            kwargs = dict(LAST_KWARGS)
            kwargs.pop("context").run(_reconcile_all_soon, "node", kwargs)

    # its own client (connection pool): the long watch never takes a connection the reconciles need
    TASKS["nodes"] = asyncio.get_running_loop().create_task(NODES.run(AsyncClient(), changed))


@kopf.index(GROUP, VERSION, "models")
async def models(body: kopf.Body, **_: Any) -> dict[str, tuple[str, ModelSpec | None]]:
    """namespace -> (name, spec); validated once here, not on every reconcile (None when invalid)."""
    VERSIONS["models"] += 1
    try:
        spec: ModelSpec | None = ModelSpec.model_validate(dict(body.get("spec") or {}))
    except ValueError:
        spec = None
    return {body["metadata"]["namespace"]: (body["metadata"]["name"], spec)}


def _child(body: kopf.Body) -> dict[tuple[str, str, str], Child]:
    meta = body["metadata"]
    annotations = meta.get("annotations") or {}
    keep = slim_child(body["kind"], dict(body.get("spec") or {}), dict(body.get("status") or {}))
    return {(meta["namespace"], meta["name"], body["kind"]): Child(annotations.get(APPLIED_HASH), keep)}


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
async def deployments(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], Child]:
    return _child(body)


@kopf.index("", "v1", "services", labels=MANAGED)
async def services(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], Child]:
    return _child(body)


@kopf.index("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
async def pdbs(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], Child]:
    return _child(body)


@kopf.index(GROUP, VERSION, PLURAL)
async def backends(body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict[str, Any]]:
    meta = {k: v for k, v in body["metadata"].items() if k != "managedFields"}  # the bulk, never read
    snapshot = {
        "apiVersion": body.get("apiVersion"),
        "metadata": meta,
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }
    return {(body["metadata"]["namespace"], body["metadata"]["name"]): snapshot}


class Children(Mapping[tuple[str, str, str], Child]):
    """The children indexes (Deployments, Services, PodDisruptionBudgets) as one mapping, without copying them."""

    def __init__(self, *indexes: kopf.Index[Any, Child]) -> None:
        self._indexes = indexes

    def __getitem__(self, key: tuple[str, str, str]) -> Child:
        for index in self._indexes:
            if key in index:
                for child in index[key]:
                    return child
        raise KeyError(key)

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        for index in self._indexes:
            yield from index

    def __len__(self) -> int:
        return sum(len(index) for index in self._indexes)

    def items(self) -> Iterator[tuple[tuple[str, str, str], Child]]:  # type: ignore[override]
        """Every (key, child) in one pass, without a lookup per key (the GPUs-in-use sum walks them all)."""
        for index in self._indexes:
            for key, children in index.items():
                for child in children:
                    yield key, child
                    break


def world(models: kopf.Index[Any, Any], deployments: kopf.Index[Any, Child], services: kopf.Index[Any, Child],
          pdbs: kopf.Index[Any, Child]) -> World:  # fmt: skip
    grouped = NODES.grouped()
    version = (NODES.version, VERSIONS["models"])
    children = Children(deployments, services, pdbs)
    return World(grouped, models, children, version=version, grouped=grouped, ledger=GPUS)


async def _run(body: Mapping[str, Any], trigger: str, **indexes: Any) -> None:
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return  # being deleted: the garbage collector removes the children
    key = (meta["namespace"], meta["name"])
    try:
        await NODES.ready.wait()  # the first node listing is in
        async with LOCKS.setdefault(key, asyncio.Lock()):
            before = _placement(RECENT.statuses.get(key) or body.get("status") or {})
            outcome = await reconcile(body, world(**indexes), KUBE, trigger, RECENT)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # API errors, timeouts: retried with backoff, never a crash loop
        metrics.ERRORS.labels(type(exc).__name__).inc()
        _retry_later(key, indexes, exc)
        return
    RETRIES.pop(key, None)
    if not outcome.status_written:
        return
    target = cast(kopf.Body, body)
    if outcome.error:
        kopf.warn(target, reason="InvalidSpec", message=outcome.error[:1024])
    elif outcome.decision is not None and not outcome.decision.satisfiable:
        kopf.warn(target, reason="Unsatisfiable", message=outcome.decision.reasons[-1][:1024])
    elif outcome.decision is not None and _placement(outcome.status) != before:
        d = outcome.decision
        where = d.placement.describe() if d.placement else ""
        kopf.info(target, reason="Selected", message=f"{d.backend} on {where}; {outcome.applied} object(s) applied")


def _placement(status: Mapping[str, Any]) -> tuple[Any, ...]:
    placement = (status.get("decision") or {}).get("placement") or {}
    return (status.get("backend"), placement.get("gpuProduct"), placement.get("gpusPerReplica"))


def _retry_later(key: tuple[str, str], indexes: dict[str, Any], exc: Exception) -> None:
    """Run the reconcile of ``key`` again after a backoff (5 s doubling to 5 min), from the latest object."""
    attempt = RETRIES.get(key, 0) + 1
    RETRIES[key] = attempt
    delay = min(5.0 * 2 ** (attempt - 1), 300.0)
    log.warning("reconcile of %s/%s failed (%r); retry %d in %.0f s", *key, exc, attempt, delay)
    backends: kopf.Index[Any, Any] | None = LAST_KWARGS.get("backends")

    async def later() -> None:
        await asyncio.sleep(delay)
        if backends is not None and key in backends:
            for ib in list(backends[key]):
                await _run(ib, "retry", **indexes)

    asyncio.get_running_loop().create_task(later())


_INDEXES = ("models", "deployments", "services", "pdbs")


def _pick(kwargs: dict[str, Any]) -> dict[str, Any]:
    if not LAST_KWARGS:
        LAST_KWARGS.update({k: kwargs[k] for k in (*_INDEXES, "backends")}, context=contextvars.copy_context())
    return {k: kwargs[k] for k in _INDEXES}


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_backend(body: kopf.Body, type: str | None, **kwargs: Any) -> None:
    """Every event of an InferenceBackend (the initial listing too) runs the level-triggered reconcile. kopf's own
    change detection is not used, so kopf writes no annotations on our objects; our own status writes come back
    as events that change nothing."""
    if type == "DELETED":  # the garbage collector removes the children; forget what we kept for it
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        RECENT.statuses.pop(key, None)
        RETRIES.pop(key, None)
        LOCKS.pop(key, None)
        return
    await _run(body, "listing" if type is None else type.lower(), **_pick(kwargs))


CHILD_SEEN: dict[tuple[Any, ...], tuple[Any, ...]] = {}
"""What the owner's reconcile last saw of each child: its applied hash and (Deployments) the readiness it rolls up."""


async def _owner(body: kopf.Body, trigger: str, type: str | None, kwargs: dict[str, Any]) -> None:
    """Reconcile the InferenceBackend owning ``body`` (drift of a child, readiness of its Deployment).

    Events that change neither the child's applied hash nor what its status rolls up (most Deployment status
    updates: observedGeneration, updatedReplicas, condition timestamps) are skipped: the reconcile would find
    nothing to do, and at 1,000 backends they are most of the operator's work."""
    backends: kopf.Index[Any, Any] = kwargs["backends"]
    meta = body["metadata"]
    child_key = (meta.get("namespace"), meta.get("name"), body.get("kind"))
    seen = ((meta.get("annotations") or {}).get(APPLIED_HASH), child_signature(body))
    if type == "DELETED":
        CHILD_SEEN.pop(child_key, None)
    elif CHILD_SEEN.get(child_key) == seen:
        return
    else:
        CHILD_SEEN[child_key] = seen
    owners = [r for r in meta.get("ownerReferences") or [] if r.get("kind") == "InferenceBackend"]
    key = (meta.get("namespace"), owners[0]["name"]) if owners else None
    if key is None or key not in backends:
        return
    for ib in backends[key]:
        await _run(ib, trigger, **_pick(kwargs))


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
async def on_deployment(body: kopf.Body, type: str | None, **kwargs: Any) -> None:
    meta = body["metadata"]
    GPUS.set((meta["namespace"], meta["name"]), None if type == "DELETED" else Child(None, dict(body)).gpus)
    await _owner(body, "deployment", type, kwargs)


@kopf.on.event("", "v1", "services", labels=MANAGED)
async def on_service(body: kopf.Body, type: str | None, **kwargs: Any) -> None:
    await _owner(body, "service", type, kwargs)


@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
async def on_pdb(body: kopf.Body, type: str | None, **kwargs: Any) -> None:
    await _owner(body, "pdb", type, kwargs)


PASS_SECONDS: dict[str | None, float] = {}
PASS_DUTY = 4.0
"""A pass over every backend waits at least this many times as long as the last one took: nodes changing without
pause (5,000 nodes losing their not-ready taints one by one) cost the operator at most a fifth of a core."""


def _reconcile_all_soon(trigger: str, kwargs: dict[str, Any], namespace: str | None = None) -> None:
    """Debounced: one pass over every InferenceBackend (of ``namespace``) a second after the first trigger (or,
    after a long pass, PASS_DUTY times its length); triggers meanwhile are folded into that pass."""
    if PENDING.get(namespace) is not None:
        return
    backends: kopf.Index[Any, Any] = kwargs["backends"]
    indexes = _pick(kwargs)

    async def later() -> None:
        await asyncio.sleep(max(DEBOUNCE_SECONDS, PASS_DUTY * PASS_SECONDS.get(namespace, 0.0)))
        PENDING.pop(namespace, None)
        started = time.monotonic()
        for key in list(backends):
            if namespace is None or key[0] == namespace:
                for ib in list(backends.get(key, [])):
                    await _run(ib, trigger, **indexes)
        PASS_SECONDS[namespace] = time.monotonic() - started

    PENDING[namespace] = asyncio.get_running_loop().create_task(later())


@kopf.on.event(GROUP, VERSION, "models")
async def on_model(body: kopf.Body, type: str, **kwargs: Any) -> None:
    if type == "DELETED":
        VERSIONS["models"] += 1
    if type is not None:  # None is the initial listing, already handled by resume
        _reconcile_all_soon("model", kwargs, body["metadata"]["namespace"])
