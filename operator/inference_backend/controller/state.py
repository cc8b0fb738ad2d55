"""The operator's state: one object, made by the startup handler and handed to every handler in kopf's ``memo``.

It holds what the handlers share (the API writer, the node classes, the GPU ledger, what was written lately, the
kopf indexes as kopf hands them to startup handlers) and the one work queue every trigger goes through:

- a handler only enqueues a key: an InferenceBackend's ``(namespace, name)``, or a pass key ``("*", namespace)``
  (``("*", "*")``: every namespace) that fans out to every backend of that namespace;
- the queue deduplicates keys, never hands one key to two workers, and retries a failed reconcile with capped
  exponential backoff and jitter (:mod:`inference_backend.controller.workqueue`);
- passes (node and Model changes) are debounced: one pass waits at least ``debounce`` seconds and PASS_DUTY times
  as long as the last one took, so nodes changing without pause cost the operator a bounded share of a core;
- every task (the node watch, the workers, the queue's timer) is referenced here and cancelled by :meth:`close`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from lightkube import AsyncClient

from inference_backend import status
from inference_backend.capacity import GpuLedger
from inference_backend.controller import config as configuration
from inference_backend.controller import events, metrics
from inference_backend.controller.config import Config
from inference_backend.controller.engine_http import EngineClient, EngineHttp
from inference_backend.controller.execute import ReconcileFailure, post, write_status
from inference_backend.controller.kube import Kube, Writer, describe_error
from inference_backend.controller.nodewatch import NodeClasses
from inference_backend.controller.reconcile import Outcome
from inference_backend.controller.reconcile import reconcile as reconcile_one
from inference_backend.controller.workqueue import WorkQueue
from inference_backend.controller.world import Child, Recent, World, child_signature
from inference_backend.pods import PodProblem, owner, summarize
from inference_backend.vocabulary import APPLIED_HASH

Key = tuple[str, str]
ALL = "*"
PASS_DUTY = 4.0
"""A pass over every backend waits at least this many times as long as the last one took: nodes changing without
pause (5,000 nodes losing their not-ready taints one by one) cost the operator at most a fifth of a core."""
ENGINE_READ_TIMEOUT = 10.0
"""Seconds for one read of a pod's GET /v1/models (a pod that does not answer is left out of status.adapters)."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Indexes:
    """kopf's indexes (live views kopf keeps filled), as kopf passes them to the startup handler."""

    models: Mapping[str, Any]
    deployments: Mapping[Any, Any]
    services: Mapping[Any, Any]
    pdbs: Mapping[Any, Any]
    backends: Mapping[Key, Any]
    pods: Mapping[Key, Any] = field(default_factory=dict)
    """(namespace, InferenceBackend) -> the slim summaries of its pods (inference_backend.pods)."""
    lws: Mapping[Any, Any] = field(default_factory=dict)
    """The LeaderWorkerSets of multi-node backends (empty, and unwatched, on a cluster without the LWS CRD)."""
    configmaps: Mapping[Any, Any] = field(default_factory=dict)
    """The ConfigMaps of the adapters loaded while the pods serve (engines/lora.py)."""


class Children(Mapping[tuple[str, str, str], Child]):
    """The children indexes (Deployments, Services, PodDisruptionBudgets) as one mapping, without copying them."""

    def __init__(self, *indexes: Mapping[Any, Any]) -> None:
        self._indexes = indexes

    def __getitem__(self, key: tuple[str, str, str]) -> Child:
        for index in self._indexes:
            if key in index:
                for child in index[key]:
                    return cast(Child, child)
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


class OperatorState:
    def __init__(
        self, indexes: Indexes, config: Config = configuration.DEFAULT, *, writer: Writer | None = None
    ) -> None:
        self.indexes = indexes
        self.config = config
        self.writer: Writer = writer or Kube()
        self.recent = Recent()
        self.engines: EngineClient = EngineHttp(timeout=ENGINE_READ_TIMEOUT)
        """HTTP to the serving pods: the adapters each serves (status.adapters)."""
        self.nodes = NodeClasses()
        self.gpus = GpuLedger()
        """GPUs reserved per backend, taken at decision time (inference_backend.capacity); rebuilt from the
        backends' statuses before the first reconcile."""
        self.waiting: set[Key] = set()
        """Backends whose placement waits for GPUs: reconciled again when some are released or nodes are added."""
        self._seeded = False
        self.models_version = 0
        """Bumped on every Model event: with the nodes' version it keys the reuse of a backend's last selection."""
        self.child_seen: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        """What the owner's reconcile last saw of each child: its applied hash and the readiness it rolls up."""
        self.pod_seen: dict[tuple[str, str], tuple[Any, ...]] = {}
        """The problems the owner's reconcile last saw of each pod (a pod with none is not kept)."""
        self.failing: dict[Key, int] = {}
        """Backends whose last reconcile failed, with the generation it failed on (cleared on success)."""
        self.pod_warned: dict[Key, PodProblem] = {}
        """The pod problem last posted as a Warning Event per backend: each is posted once."""
        self.indexed = asyncio.Event()
        """Set by the first resource handler: kopf runs none before every index has its initial listing."""
        self.queue: WorkQueue[Key] = WorkQueue()
        self.pass_seconds: dict[str, float] = {}
        self._passes: dict[str, tuple[float, set[Key]]] = {}
        """Passes in flight: pass namespace -> (started, backends not yet reconciled)."""
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        """The node watch (its own client: the long watch never takes a connection the reconciles need) and the
        queue's workers."""
        loop = asyncio.get_running_loop()
        watch = self.nodes.run(AsyncClient(), self.on_nodes_changed, on_added=self.wake_waiting)
        self._tasks.append(loop.create_task(watch, name="node watch"))
        slices = self.nodes.run_slices(AsyncClient(), self.on_nodes_changed, on_added=self.wake_waiting)
        self._tasks.append(loop.create_task(slices, name="ResourceSlice watch"))
        self.queue.run(self.process, self.config.workers)

    @property
    def tasks(self) -> tuple[asyncio.Task[None], ...]:
        return (*self._tasks, *self.queue.tasks)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.queue.shutdown()
        await self.writer.close()

    # -- triggers ------------------------------------------------------------------------------------------------
    def on_nodes_changed(self) -> None:
        self.reconcile_all_soon("node")

    def reconcile_all_soon(self, trigger: str, namespace: str = ALL) -> None:
        """One pass over every InferenceBackend (of ``namespace``) after the debounce; triggers meanwhile fold
        into it (the queue keeps one delayed pass key per namespace)."""
        delay = max(self.config.debounce, PASS_DUTY * self.pass_seconds.get(namespace, 0.0))
        self.queue.add_after((ALL, namespace), delay, trigger)

    def wake_waiting(self, trigger: str = "capacity") -> None:
        for key in self.waiting:
            self.queue.add(key, trigger)

    def forget(self, key: Key) -> None:
        """The backend is gone: drop what was kept for it and anything queued, and release its GPUs."""
        self.recent.statuses.pop(key, None)
        self.recent.plans.pop(key, None)
        self.queue.discard(key)
        self.waiting.discard(key)
        self.pod_warned.pop(key, None)
        self.failing.pop(key, None)
        metrics.BACKENDS.forget(*key)
        self._pass_done(key)
        if self.gpus.set(key, None):
            self.wake_waiting()

    def seed_reservations(self) -> None:
        """Rebuild the GPU reservations from the Deployments and LeaderWorkerSets the operator applied (this one, or
        the one before it): their pod templates name the pool and the devices per pod (a LeaderWorkerSet: replicas x
        group size pods, nodes x GPUs per node per replica), so a restart never promises GPUs in use. A backend
        waiting for capacity has no workload, so it holds nothing and waits again. A backend caught mid-switch of
        child kind holds the larger of the two."""
        for index in (self.indexes.deployments, self.indexes.lws):
            for (namespace, name, _), children in list(index.items()):
                for child in children:
                    c = cast(Child, child)
                    key = (namespace, c.owner or name)
                    held = self.gpus.held(key)
                    if c.gpus is not None and (held is None or c.gpus[1] > held[1]):
                        self.gpus.set(key, c.gpus)
                    break

    def child_event(self, body: Mapping[str, Any], deleted: bool) -> Key | None:
        """The owner to reconcile for an event of a child we own, or None when the event changes neither the
        child's applied hash nor what its status rolls up (most Deployment status updates: at 1,000 backends they
        are most of the operator's work)."""
        meta = body["metadata"]
        child_key = (meta.get("namespace"), meta.get("name"), body.get("kind"))
        seen = ((meta.get("annotations") or {}).get(APPLIED_HASH), child_signature(body))
        if deleted:
            self.child_seen.pop(child_key, None)
        elif self.child_seen.get(child_key) == seen:
            return None
        else:
            self.child_seen[child_key] = seen
        owners = [r for r in meta.get("ownerReferences") or [] if r.get("kind") == "InferenceBackend"]
        key = (str(meta.get("namespace")), str(owners[0]["name"])) if owners else None
        return key if key is not None and key in self.indexes.backends else None

    def pod_event(self, body: Mapping[str, Any], deleted: bool) -> Key | None:
        """The owner to reconcile for an event of one of our pods, or None when the event changes none of the
        pod's problems (readiness flips, IP assignment, restarts of a healthy pod cost no reconcile)."""
        meta = body.get("metadata") or {}
        pod_key = (str(meta.get("namespace")), str(meta.get("name")))
        summary = None if deleted else summarize(body)
        problems = summary.problems if summary is not None else ()
        if self.pod_seen.get(pod_key, ()) == problems:
            return None
        if problems:
            self.pod_seen[pod_key] = problems
        else:
            self.pod_seen.pop(pod_key, None)
        key = owner(body)
        return key if key is not None and key in self.indexes.backends else None

    # -- work ----------------------------------------------------------------------------------------------------
    def world(self) -> World:
        grouped = self.nodes.grouped()
        ix = self.indexes
        children = Children(ix.deployments, ix.lws, ix.services, ix.pdbs, ix.configmaps)
        version = (self.nodes.version, self.models_version)
        return World(
            grouped,
            ix.models,
            children,
            version=version,
            grouped=grouped,
            ledger=self.gpus,
            pods=ix.pods,
            config=self.config,
        )

    async def process(self, key: Key, trigger: str) -> None:
        await self.nodes.ready.wait()  # the first node listing is in
        await self.indexed.wait()
        if not self._seeded:
            self.seed_reservations()
            self._seeded = True
        if key[0] == ALL:
            self._fan_out(key[1], trigger)
            return
        try:
            for body in list(self.indexes.backends.get(key, ())):
                await self._reconcile(key, body, trigger)
        finally:
            self._pass_done(key)

    def _fan_out(self, namespace: str, trigger: str) -> None:
        keys = {k for k in list(self.indexes.backends) if namespace == ALL or k[0] == namespace}
        self._passes[namespace] = (time.monotonic(), set(keys))
        for k in keys:
            self.queue.add(k, trigger)
        self._pass_done(None)

    def _pass_done(self, key: Key | None) -> None:
        for namespace, (started, left) in list(self._passes.items()):
            if key is not None:
                left.discard(key)
            if not left:
                self.pass_seconds[namespace] = time.monotonic() - started
                del self._passes[namespace]

    async def _reconcile(self, key: Key, body: Mapping[str, Any], trigger: str) -> None:
        if body["metadata"].get("deletionTimestamp"):
            return  # being deleted: the garbage collector removes the children
        generation = int(body["metadata"].get("generation") or 1)
        if trigger == "modified" and self.failing.get(key) == generation:
            return  # most likely the echo of our own failure status: the backoff's retry comes in its time
        before = events.placement(self.recent.statuses.get(key) or body.get("status") or {})
        try:
            outcome = await reconcile_one(body, self.world(), self.writer, trigger, self.recent, self.engines)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # API errors, timeouts, planning bugs: retried with backoff, never a crash loop
            await self._failed(key, body, generation, exc)
            return
        self.queue.forget(key)
        self.failing.pop(key, None)
        metrics.BACKENDS.observe(*key, outcome.status.get("phase"), _ttft_millis(body))
        if outcome.recheck_after is not None:  # its pods are unschedulable: look again when the grace period ends
            self.queue.add_after(key, outcome.recheck_after, "unschedulable")
        if outcome.waiting is not None:
            self.waiting.add(key)
        else:
            self.waiting.discard(key)
        if outcome.freed:
            self.wake_waiting()
        await self._report(key, body, outcome, before)

    async def _failed(self, key: Key, body: Mapping[str, Any], generation: int, exc: Exception) -> None:
        """A failed reconcile: retried with the key's capped, jittered backoff; the status's Reconciled condition
        says what failed (written once per distinct failure); a Warning Event on the first attempt and every
        tenth. The failure of one backend never holds up the others (each key has its own backoff)."""
        failure = exc if isinstance(exc, ReconcileFailure) else ReconcileFailure("ReconcileError", describe_error(exc))
        metrics.ERRORS.labels(failure.reason).inc()
        delay = self.queue.add_rate_limited(key)
        attempt = self.queue.backoff.retries(key)
        self.failing[key] = generation
        log.warning("reconcile of %s/%s failed (%s); retry %d in %.0f s", *key, failure.message, attempt, delay)
        await post(self.writer, body, events.failed(failure.reason, failure.message, attempt, delay))
        previous = self.recent.previous_status(
            key, {k: v for k, v in (body.get("status") or {}).items() if k != "kopf"}
        )
        new = status.failed(
            previous,
            generation=generation,
            reason=failure.reason,
            message=failure.message,
            now=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        metrics.BACKENDS.observe(*key, new.get("phase"), _ttft_millis(body))
        try:
            written = await write_status(self.writer, key, previous, new)
        except ReconcileFailure as write_failure:  # the API server is down or refuses us: the Event and the log say it
            log.warning("status of %s/%s not written: %s", *key, write_failure.message)
            return
        if written:
            self.recent.statuses[key] = new

    async def _report(self, key: Key, body: Mapping[str, Any], outcome: Outcome, before: tuple[Any, ...]) -> None:
        """The Events of a reconcile: the worst pod problem once per change, then what the status write says."""
        posted, warned = events.pod(
            outcome.pod_problem, outcome.status, self.pod_warned.get(key), outcome.status_written
        )
        if warned is None:
            self.pod_warned.pop(key, None)
        else:
            self.pod_warned[key] = warned
        if outcome.status_written:
            posted += events.reconciled(
                outcome.decision, outcome.error, outcome.waiting, outcome.applied, outcome.status, before
            )
        await post(self.writer, body, posted)


def _ttft_millis(body: Mapping[str, Any]) -> int | None:
    """spec.objectives.ttftMillis as the API server stored it (a positive integer, or absent)."""
    value = ((body.get("spec") or {}).get("objectives") or {}).get("ttftMillis")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
