"""The executor: the one module that calls the Kubernetes API during a reconcile, through a :class:`Writer`.

It carries out the actions (controller.actions) in order: for each child the applied hash and the owner reference
are added to the rendered manifest (nothing else), the never-adopt check is made before a first apply, and the
replicas are handed over before an apply that leaves them out. It writes the status (one write path, for a
reconcile that ran to its end and for one that failed) and posts Events. Every failure of the API becomes one
:class:`ReconcileFailure` naming the object and the API server's answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference_backend import status
from inference_backend.controller import metrics
from inference_backend.controller.actions import Action, Apply, Delete, Key
from inference_backend.controller.adapters import EngineCall
from inference_backend.controller.engine_http import EngineClient
from inference_backend.controller.events import Event
from inference_backend.controller.kube import Writer, describe_error, not_found, owned
from inference_backend.controller.plan import Plan
from inference_backend.vocabulary import APPLIED_HASH

Json = dict[str, Any]
log = logging.getLogger(__name__)


class ReconcileFailure(Exception):
    """A reconcile step that failed, as the status and the Event say it: ``reason`` (PlanningFailed, ApplyFailed,
    DeleteFailed, ChildConflict, StatusWriteFailed) and a message naming the object and the API error."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass
class Executed:
    """What the executor did."""

    writes: int = 0
    """Children written (applied, or tried where their CRD turned out missing and is tried again later)."""
    applied: list[tuple[Key, str]] = field(default_factory=list)
    """Watched children applied, with their hash."""
    deleted: list[Key] = field(default_factory=list)
    recorded: dict[str, Json] = field(default_factory=dict)
    """Status entries of the unwatched children applied (status_key -> entry)."""
    refused: dict[Key, str] = field(default_factory=dict)
    """Children whose CRD is missing, tried again later: what the status says."""
    missing: str | None = None
    """A CRD the plan cannot run without is missing: what the status says (nothing after it was applied)."""
    released: list[Key] = field(default_factory=list)
    """Unwatched children applied now: no longer waiting for their CRD."""
    retry_after: float | None = None
    """Seconds after which the children whose CRD is missing are tried again."""

    def retry(self, seconds: float) -> None:
        self.retry_after = seconds if self.retry_after is None else min(self.retry_after, seconds)


async def execute(actions: Sequence[Action], plan: Plan, writer: Writer, owner: Mapping[str, Any]) -> Executed:
    """Carry out ``actions`` in order for the InferenceBackend ``owner``; stop at a CRD the plan cannot do without."""
    out = Executed()
    for action in actions:
        if isinstance(action, Delete):
            await _delete(action, writer)
            out.deleted.append(action.key)
            continue
        missing = await _apply(action, plan, writer, owner)
        if missing is not None:
            out.retry(action.child.retry)
        if missing is not None and action.child.stop:
            out.missing = missing
            break
        out.writes += 1
        if missing is not None:
            out.refused[action.key] = missing
        elif action.records is not None and action.child.status_key is not None:
            out.recorded[action.child.status_key] = action.records
            out.released.append(action.key)
        else:
            out.applied.append((action.key, action.hash))
    return out


async def _apply(a: Apply, plan: Plan, writer: Writer, owner: Mapping[str, Any]) -> str | None:
    """Apply one child; what the status says when its CRD is missing, else None."""
    kind, name = a.child.kind, a.manifest["metadata"]["name"]
    meta = a.manifest["metadata"]
    manifest = {
        **a.manifest,
        "metadata": {**meta, "annotations": {**meta.get("annotations", {}), APPLIED_HASH: a.hash}},
    }
    try:
        if a.adopt_check:
            theirs = await _foreign(a, manifest, writer, str(owner["metadata"].get("uid")))
            if theirs is not None:
                raise ReconcileFailure(
                    "ChildConflict",
                    f"{theirs}: it is left untouched; delete or rename it, or rename this InferenceBackend",
                )
        if a.hand_off is not None:
            await writer.hand_off_replicas(manifest, a.hand_off)
            metrics.API_WRITES.labels(kind).inc()
        await writer.apply(owned(manifest, dict(owner)))
    except ReconcileFailure:
        raise
    except Exception as exc:
        if a.child.missing is not None and not_found(exc):  # the API server does not serve the kind: no CRD
            return a.child.missing(plan, name, describe_error(exc))
        raise ReconcileFailure("ApplyFailed", f"applying {kind} {name}: {describe_error(exc)}") from exc
    metrics.API_WRITES.labels(kind).inc()
    return None


async def _foreign(a: Apply, manifest: Json, writer: Writer, uid: str) -> str | None:
    """Who else holds the child's name (never adopt what someone else made), or None."""
    try:
        return await writer.foreign(manifest, uid)
    except Exception as exc:
        if a.child.missing is not None and not_found(exc):
            raise  # the kind is not served: the apply's handler says so
        why = f"reading {a.child.kind} {manifest['metadata']['name']}: {describe_error(exc)}"
        raise ReconcileFailure("ApplyFailed", why) from exc


async def _delete(d: Delete, writer: Writer) -> None:
    try:
        await writer.delete(d.kind, d.namespace, d.name)
    except Exception as exc:
        raise ReconcileFailure(d.reason, f"deleting {d.kind} {d.name}: {describe_error(exc)}") from exc
    metrics.API_WRITES.labels(d.kind).inc()


async def write_status(
    writer: Writer, key: tuple[str, str], previous: Mapping[str, Any], new: Mapping[str, Any]
) -> bool:
    """Write ``new`` over ``previous`` when it differs (keys that disappeared are nulled, at every depth): whether it
    was written."""
    if not status.changed(previous, new):
        return False
    if log.isEnabledFor(logging.DEBUG):
        diff = sorted(k for k in set(previous) | set(new) if previous.get(k) != new.get(k))
        log.debug("status of %s/%s changes: %s", *key, diff)
    patch = status.merge_patch(previous, new)
    try:
        await writer.patch_status(*key, patch)
    except Exception as exc:
        raise ReconcileFailure("StatusWriteFailed", f"writing the status: {describe_error(exc)}") from exc
    metrics.API_WRITES.labels("InferenceBackendStatus").inc()
    return True


async def replicas(pods: Iterable[tuple[str, str]], base: str, engines: EngineClient) -> list[status.Replica]:
    """Each (pod, engine URL)'s adapters, read from its ``GET /v1/models``, all pods at once (a pod that does not
    answer costs the reconcile one timeout, not one per pod); a pod that does not answer is left out (it is not
    serving yet, or any more)."""

    async def one(pod: str, url: str) -> status.Replica | None:
        try:
            models = await engines.get_json(url + "/v1/models")
        except Exception as exc:
            log.debug("%s: /v1/models: %s", pod, exc)
            return None
        return status.Replica(pod, url, status.served_adapters(models, base))

    found = await asyncio.gather(*(one(pod, url) for pod, url in pods))
    return [r for r in found if r is not None]


async def sidecar_errors(pods: Iterable[tuple[str, str]], engines: EngineClient) -> dict[str, dict[str, str]]:
    """pod -> adapter -> why its adapters sidecar could not fetch, check or load it (``GET /adapters`` of each
    (pod, sidecar URL); a sidecar that does not answer is left out)."""
    out: dict[str, dict[str, str]] = {}
    for pod, url in pods:
        try:
            report = await engines.get_json(url + "/adapters")
        except Exception as exc:
            log.debug("%s: sidecar /adapters: %s", pod, exc)
            continue
        out[pod] = {str(k): str(v) for k, v in (report.get("errors") or {}).items()}
    return out


async def call_engines(calls: Sequence[EngineCall], engines: EngineClient) -> list[str]:
    """Carry out adapter loads and unloads (controller.adapters.adapter_calls) in order; what failed, one line each
    (said in the status; the next reconcile plans again from what the replicas then serve)."""
    failed = []
    for c in calls:
        try:
            code, text = await engines.post(c.url + c.path, c.body)
        except Exception as exc:
            code, text = 0, str(exc)
        if code != 200:
            failed.append(f"{c.pod}: {c.path} {c.body.get('lora_name')}: {code or 'no answer'} {text[:300]}")
    return failed


async def post(writer: Writer, owner: Mapping[str, Any], events: Iterable[Event]) -> None:
    """Post Events about ``owner`` (best effort: the writer logs an Event the API server refuses)."""
    for e in events:
        await writer.event(dict(owner), e.type, e.reason, e.message)
