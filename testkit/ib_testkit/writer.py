"""The one fake of the operator's API writer (controller.kube.Writer): it records every call, in order, and fails
on demand. Tests of the reconcile use it instead of an API server where the point is what is written, not how the
API server takes it (e2e/ covers that on a real one).

    writer = FakeWriter()
    writer.fail(api_error, call="apply", kind="Deployment")      # every apply of a Deployment raises it
    writer.squat("Service", "chat", "Service ns/chat already exists ... (managed by kubectl-create)")
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, NamedTuple

from inference_backend.controller.kube import Writer

Json = dict[str, Any]


class Posted(NamedTuple):
    """An Event posted about an InferenceBackend."""

    name: str
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Failure:
    """Raise ``error`` on the calls it matches (None matches any)."""

    error: BaseException
    call: str | None = None
    """apply, hand_off_replicas, delete, foreign, patch_status, event."""
    kind: str | None = None
    name: str | None = None

    def matches(self, call: str, kind: str | None, name: str | None) -> bool:
        return (
            (self.call is None or self.call == call)
            and (self.kind is None or self.kind == kind)
            and (self.name is None or self.name == name)
        )


class FakeWriter:
    """Records calls: ``calls`` (the writes to children as ("apply", object), ("handoff", (kind, replicas)) and
    ("delete", (kind, namespace, name)), in order), ``applied`` (objects), ``deleted`` ((kind, namespace, name)),
    ``statuses`` ((namespace, name, status)), ``events`` (Posted) and ``writes`` (how many writes of any kind).
    ``latency``: seconds each call waits first (yielding to the loop, as a real API call does)."""

    def __init__(self, latency: float = 0.0) -> None:
        self.latency = latency
        self.calls: list[tuple[str, Any]] = []
        self.applied: list[Json] = []
        self.deleted: list[tuple[str, str, str]] = []
        self.statuses: list[tuple[str, str, Json]] = []
        self.events: list[Posted] = []
        self.failures: list[Failure] = []
        self.squatted: dict[tuple[str, str], str] = {}
        self.closed = False

    @property
    def writes(self) -> int:
        return len(self.calls) + len(self.statuses) + len(self.events)

    def fail(
        self, error: BaseException, call: str | None = None, kind: str | None = None, name: str | None = None
    ) -> FakeWriter:
        """Raise ``error`` on every matching call from now on."""
        self.failures.append(Failure(error, call, kind, name))
        return self

    def squat(self, kind: str, name: str, description: str) -> FakeWriter:
        """An object of ``kind`` named ``name`` exists that the backend did not make: foreign() describes it."""
        self.squatted[(kind, name)] = description
        return self

    def status(self, name: str) -> Json:
        """The last status written for the backend ``name``."""
        return next(st for _, n, st in reversed(self.statuses) if n == name)

    async def _call(self, call: str, kind: str | None, name: str | None) -> None:
        if self.latency:
            await asyncio.sleep(self.latency)
        for f in self.failures:
            if f.matches(call, kind, name):
                raise f.error

    async def apply(self, obj: Json) -> None:
        await self._call("apply", obj["kind"], obj["metadata"]["name"])
        self.calls.append(("apply", obj))
        self.applied.append(obj)

    async def hand_off_replicas(self, obj: Json, replicas: int) -> None:
        await self._call("hand_off_replicas", obj["kind"], obj["metadata"]["name"])
        self.calls.append(("handoff", (obj["kind"], replicas)))

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        await self._call("delete", kind, name)
        self.calls.append(("delete", (kind, namespace, name)))
        self.deleted.append((kind, namespace, name))

    async def foreign(self, obj: Json, owner_uid: str) -> str | None:
        await self._call("foreign", obj["kind"], obj["metadata"]["name"])
        return self.squatted.get((obj["kind"], obj["metadata"]["name"]))

    async def patch_status(self, namespace: str, name: str, status: Json) -> None:
        await self._call("patch_status", "InferenceBackend", name)
        self.statuses.append((namespace, name, status))

    async def event(self, owner: Json, type: str, reason: str, message: str) -> None:
        name = owner["metadata"]["name"]
        try:
            await self._call("event", "Event", name)
        except Exception:  # as the real writer: an Event is best effort, never a failed reconcile
            return
        self.events.append(Posted(name, type, reason, message))

    async def close(self) -> None:
        self.closed = True


def _conforms(w: FakeWriter) -> Writer:
    return w  # mypy checks here that FakeWriter is a Writer
