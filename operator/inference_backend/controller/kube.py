"""The Kubernetes API client: server-side apply of children, status patches, events (controller.execute is the one
module that calls it during a reconcile, through the :class:`Writer` protocol that :class:`Kube` implements).

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
from typing import Any, Protocol

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Service, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding
from lightkube.types import CascadeType, PatchType

from inference_backend.vocabulary import (
    API_VERSION,
    FIELD_MANAGER,
    GROUP,
    HANDOFF_MANAGER,
    INFERENCE_POOL_GROUP,
    INFERENCE_POOL_VERSION,
    KEDA_GROUP,
    KEDA_VERSION,
    LWS_GROUP,
    LWS_PLURAL,
    LWS_VERSION,
    VERSION,
)

IBResource = create_namespaced_resource(GROUP, VERSION, "InferenceBackend", "inferencebackends")
ScaledObjectResource = create_namespaced_resource(KEDA_GROUP, KEDA_VERSION, "ScaledObject", "scaledobjects")
"""KEDA's ScaledObject (keda.sh/v1alpha1), registered so its manifests load; the CRD may be absent (404)."""
# Registered with lightkube so codecs.from_dict knows the kind; the apiserver answers 404 when the CRD is absent.
LWSResource = create_namespaced_resource(LWS_GROUP, LWS_VERSION, "LeaderWorkerSet", LWS_PLURAL)
InferencePoolResource = create_namespaced_resource(
    INFERENCE_POOL_GROUP, INFERENCE_POOL_VERSION, "InferencePool", "inferencepools"
)
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


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed API call: an ApiError's Status code, or the response code of an error without a
    Status body (the API server answers a resource type it does not serve, such as a CRD not installed, with a
    plain "404 page not found", which lightkube raises as the HTTP library's HTTPStatusError)."""
    if isinstance(exc, ApiError) and exc.status is not None and exc.status.code is not None:
        return int(exc.status.code)
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def not_found(exc: BaseException) -> bool:
    """The apiserver answered 404: for an apply, the resource type is not served (its CRD is not installed). For a
    group/version it does not serve at all the apiserver answers in plain text ("404 page not found"), which lightkube
    leaves as the HTTP client's HTTPStatusError (core/generic_client.py transform_exception: an ApiError only for a
    JSON Status body); a served kind answers a JSON Status, an ApiError."""
    if isinstance(exc, ApiError):
        return exc.status is not None and exc.status.code == 404
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None) == 404


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


class Writer(Protocol):
    """What a reconcile needs of the API: the writes, and the one read of the never-adopt check. :class:`Kube` is the
    real one; ib_testkit.writer.FakeWriter records calls and fails on demand."""

    async def apply(self, obj: dict[str, Any]) -> None: ...

    async def hand_off_replicas(self, obj: dict[str, Any], replicas: int) -> None: ...

    async def delete(self, kind: str, namespace: str, name: str) -> None: ...

    async def foreign(self, obj: dict[str, Any], owner_uid: str) -> str | None: ...

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...

    async def event(self, owner: dict[str, Any], type: str, reason: str, message: str) -> None: ...

    async def close(self) -> None: ...


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

    async def hand_off_replicas(self, obj: dict[str, Any], replicas: int) -> None:
        """Apply only the Deployment ``obj``'s replicas as HANDOFF_MANAGER (forced: it takes them from the operator's
        manager)."""
        meta = obj["metadata"]
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {"replicas": replicas},
        }
        self.writes += 1
        async with self._slots:  # a dict body: the typed Deployment would require the selector and the template
            await self.client.patch(
                Deployment,
                meta["name"],
                body,
                namespace=meta["namespace"],
                patch_type=PatchType.APPLY,
                field_manager=HANDOFF_MANAGER,
                force=True,
            )

    async def foreign(self, obj: dict[str, Any], owner_uid: str) -> str | None:
        """Whether an object of ``obj``'s kind and name already exists that ``owner_uid`` does not control: a short
        description of it (who manages it) or None. Asked before the first apply of a child, so that server-side
        apply never takes over (and garbage collection never later deletes) an object someone else made."""
        meta = obj["metadata"]
        resource = codecs.resource_registry.load(obj["apiVersion"], obj["kind"])
        try:
            async with self._slots:
                live: Any = await self.client.get(resource, meta["name"], namespace=meta["namespace"])
        except Exception as exc:
            if http_status(exc) == 404:  # no such object, or no such resource type (its CRD is absent)
                return None
            raise
        found: dict[str, Any] = live.to_dict()  # lightkube models and generic resources alike
        live_meta = found.get("metadata") or {}
        refs = live_meta.get("ownerReferences") or []
        if any(r.get("controller") and r.get("uid") == owner_uid for r in refs):
            return None
        managers = sorted({str(m["manager"]) for m in live_meta.get("managedFields") or [] if m.get("manager")})
        owners = [f"{r.get('kind')} {r.get('name')}" for r in refs]
        by = f"owned by {', '.join(owners)}" if owners else f"managed by {', '.join(managers) or 'unknown'}"
        return (
            f"{obj['kind']} {meta['namespace']}/{meta['name']} already exists and was not created by this "
            f"InferenceBackend ({by})"
        )

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete a child we own: the workload left after a switch of child kind (its pods go with it: background
        cascade), or the ScaledObject of an InferenceBackend no longer autoscaled (KEDA then deletes its HPA).
        Already gone, or a kind whose CRD is not installed, is no error."""
        res: Any = {
            "Deployment": Deployment,
            "LeaderWorkerSet": LWSResource,
            "ScaledObject": ScaledObjectResource,
            "InferencePool": InferencePoolResource,
            "Service": Service,
            "ServiceAccount": ServiceAccount,
            "Role": Role,
            "RoleBinding": RoleBinding,
        }[kind]
        self.writes += 1
        async with self._slots:
            try:
                await self.client.delete(res, name, namespace=namespace, cascade=CascadeType.BACKGROUND)
            except Exception as exc:
                if not not_found(exc):
                    raise

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replace the status (merge patch on the status subresource; status.merge_patch nulls what disappeared)."""
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
            "involvedObject": {
                "apiVersion": owner.get("apiVersion") or API_VERSION,
                "kind": "InferenceBackend",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": os.environ.get("HOSTNAME", FIELD_MANAGER)[:128],
        }
        self.writes += 1
        try:
            async with self._slots:
                await self.client.create(codecs.from_dict(event))
        except Exception as exc:  # an Event is never worth a failed reconcile
            log.warning("event %s for %s/%s not posted: %r", reason, meta["namespace"], meta["name"], exc)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
