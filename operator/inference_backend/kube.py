"""The only module that writes to the Kubernetes API: server-side apply of children, status patches, events.

One field manager (``inference-backend``) owns every field the operator sets. Children get an ownerReference to
their InferenceBackend (so deleting it garbage-collects them) but none of its labels: Argo CD tracks resources by
label, and copying the owner's tracking label would make Argo CD claim the children as its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from datetime import UTC, datetime
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import Deployment
from lightkube.types import CascadeType, PatchType

from inference_backend.api.common import API_VERSION, GROUP, VERSION

FIELD_MANAGER = "inference-backend"
IBResource = create_namespaced_resource(GROUP, VERSION, "InferenceBackend", "inferencebackends")
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
LWS_CRD = f"{LWS_PLURAL}.{LWS_GROUP}"
"""The LeaderWorkerSet CRD (sigs.k8s.io/lws) a multi-node placement needs; absent on clusters without LWS."""
# Registered with lightkube so codecs.from_dict knows the kind; the apiserver answers 404 when the CRD is absent.
LWSResource = create_namespaced_resource(LWS_GROUP, LWS_VERSION, "LeaderWorkerSet", LWS_PLURAL)
log = logging.getLogger(__name__)


def describe_error(exc: BaseException) -> str:
    """An API call's failure as a condition or an Event says it: the HTTP code, the API server's reason and message,
    and each field it names (an admission webhook's or the schema's causes); otherwise the exception itself."""
    if isinstance(exc, ApiError) and exc.status is not None:
        st = exc.status
        text = f"{st.code} {st.reason}: {st.message}"
        causes = (st.details.causes if st.details is not None else None) or []
        extra = [f"{c.field}: {c.message}" for c in causes if c.field and c.message and str(c.field) not in text]
        return "; ".join([text, *extra])
    name = type(exc).__name__
    if "Timeout" in name or "Connect" in name or "Network" in name or "Protocol" in name:
        return f"the API server did not answer ({name}: {exc})"
    return f"{name}: {exc}"


def not_found(exc: BaseException) -> bool:
    """The apiserver answered 404: for an apply, the resource type is not served (its CRD is not installed)."""
    return isinstance(exc, ApiError) and exc.status is not None and exc.status.code == 404


def owned(obj: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with a controller ownerReference to ``owner`` (an InferenceBackend body)."""
    meta = owner["metadata"]
    ref = {
        "apiVersion": API_VERSION,
        "kind": "InferenceBackend",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [ref]}}


class Kube:
    """Writes, counted so benchmarks can report API writes per reconcile."""

    def __init__(self, client: AsyncClient | None = None, concurrency: int = 16) -> None:
        self._client = client
        self.writes = 0
        self._slots = asyncio.Semaphore(concurrency)
        """Writes in flight at once: beyond this they wait here, not in the HTTP pool (where they would time out
        while the API server is busy, and come back as retries that add to its load)."""

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            self._client = AsyncClient(field_manager=FIELD_MANAGER)
        return self._client

    async def apply(self, obj: dict[str, Any]) -> None:
        self.writes += 1
        async with self._slots:
            await self.client.apply(codecs.from_dict(obj), field_manager=FIELD_MANAGER, force=True)

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete a workload we own (the Deployment or LeaderWorkerSet left after a switch of child kind); its pods go
        with it (background cascade). Already gone is fine."""
        res: Any = {"Deployment": Deployment, "LeaderWorkerSet": LWSResource}[kind]
        self.writes += 1
        async with self._slots:
            try:
                await self.client.delete(res, name, namespace=namespace, cascade=CascadeType.BACKGROUND)
            except ApiError as exc:
                if exc.status is None or exc.status.code != 404:
                    raise

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replace the status (merge patch on the status subresource; keys that disappeared are nulled)."""
        self.writes += 1
        async with self._slots:
            await self.client.patch(
                IBResource.Status, name, {"status": status}, namespace=namespace, patch_type=PatchType.MERGE
            )

    async def event(self, owner: dict[str, Any], type: str, reason: str, message: str) -> None:
        """Post a core/v1 Event about ``owner`` (an InferenceBackend body), as ``kubectl describe`` shows them.

        Best effort, as kopf's own event posting is: an Event the apiserver refuses is logged, never retried, and
        never fails the reconcile it reports on."""
        meta = owner["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name'][:200]}.{secrets.token_hex(8)}", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": owner.get("apiVersion") or API_VERSION, "kind": "InferenceBackend",
                               "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
            "type": type,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": os.environ.get("HOSTNAME", FIELD_MANAGER)[:128],
        }  # fmt: skip
        self.writes += 1
        try:
            async with self._slots:
                await self.client.create(codecs.from_dict(event))
        except Exception as exc:  # an Event is never worth a failed reconcile
            log.warning("event %s for %s/%s not posted: %r", reason, meta["namespace"], meta["name"], exc)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
