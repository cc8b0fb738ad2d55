"""The only module that writes to the Kubernetes API: server-side apply of children, status patches, events.

One field manager (``inference-backend``) owns every field the operator sets. Children get an ownerReference to
their InferenceBackend (so deleting it garbage-collects them) but none of its labels: Argo CD tracks resources by
label, and copying the owner's tracking label would make Argo CD claim the children as its own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from inference_backend.api.common import API_VERSION, GROUP, VERSION

FIELD_MANAGER = "inference-backend"
IBResource = create_namespaced_resource(GROUP, VERSION, "InferenceBackend", "inferencebackends")
log = logging.getLogger(__name__)


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

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replace the status (merge patch on the status subresource; keys that disappeared are nulled)."""
        self.writes += 1
        async with self._slots:
            await self.client.patch(
                IBResource.Status, name, {"status": status}, namespace=namespace, patch_type=PatchType.MERGE
            )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
