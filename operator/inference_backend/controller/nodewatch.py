"""Node facts kept by one list-then-watch of the nodes, grouped by hardware class (one label parser: facts).

Not a kopf index, on purpose: kopf gives every object of an indexed kind its own worker and, until every object is
indexed, a readiness toggle whose every change wakes every waiting worker. That is O(nodes^2) wake-ups before the
first handler runs: minutes at 5,000 nodes on 2 cores (measured with bench/operator_scale.py). One watch, parsed
here, costs one label parse per node event and nothing per reconcile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from inference_backend.controller import metrics
from inference_backend.facts import HardwareClass, hardware_class, with_devices
from inference_backend.facts.dra import DRIVERS, Device, node_devices

log = logging.getLogger(__name__)


class NodeClasses:
    """name -> hardware class of every node, the grouping by class (cached per version), and a ready flag."""

    def __init__(self) -> None:
        self.by_name: dict[str, HardwareClass] = {}
        self.version = 0
        """Bumped whenever a node's class changes, a node comes or a node leaves."""
        self.ready = asyncio.Event()
        """Set once the first listing is in."""
        self._grouped: tuple[int, dict[HardwareClass, tuple[str, ...]]] = (-1, {})
        self._classes: dict[HardwareClass, HardwareClass] = {}
        """One instance per distinct class: 5,000 nodes of a few classes hold a few objects, not 5,000 copies."""
        self._base: dict[str, HardwareClass] = {}
        """Each node's class from its Node alone (without DRA devices)."""
        self._devices: dict[str, tuple[Device, ...]] = {}
        """The devices GPU DRA drivers publish per node (ResourceSlices)."""
        self._slices: dict[str, dict[str, Any]] = {}
        """The GPU drivers' ResourceSlices by name (spec only)."""

    def update(self, node: dict[str, Any]) -> bool:
        """Record a node (a v1 Node as a dict). True when a known node changed class: placements on it may be
        invalid now. A new node bumps the version (the next selection sees it) but re-selects nothing: the
        placement of a running backend is kept while it still fits."""
        return self.update_class(*hardware_class(node))

    def update_class(self, name: str, cls: HardwareClass) -> bool:
        """Record a node's class from its Node (the DRA devices of its ResourceSlices are added here)."""
        self._base[name] = cls
        return self._set(name, with_devices(cls, self._devices.get(name, ())))

    def _set(self, name: str, cls: HardwareClass) -> bool:
        cls = self._classes.setdefault(cls, cls)
        before = self.by_name.get(name)
        if before == cls:
            return False
        self.by_name[name] = cls
        self.version += 1
        return before is not None

    def set_devices(self, by_node: dict[str, list[Device]]) -> bool:
        """The GPU DRA drivers' devices per node (facts/dra.py, from every ResourceSlice). True when a known node's
        class changed."""
        changed = False
        for name in set(self._devices) | set(by_node):
            devices = tuple(by_node.get(name, ()))
            if devices == self._devices.get(name, ()):
                continue
            if devices:
                self._devices[name] = devices
            else:
                self._devices.pop(name, None)
            base = self._base.get(name)
            if base is not None:
                changed = self._set(name, with_devices(base, devices)) or changed
        return changed

    def remove(self, name: str) -> bool:
        self._base.pop(name, None)
        if self.by_name.pop(name, None) is None:
            return False
        self.version += 1
        return True

    def replace(self, nodes: Iterable[dict[str, Any]]) -> bool:
        """A full listing: the nodes not in it are gone. True when a known node changed or left."""
        classes: dict[str, HardwareClass] = {}
        for node in nodes:
            self.add_listed(classes, node)
        return self.replace_classes(classes)

    def add_listed(self, classes: dict[str, HardwareClass], node: dict[str, Any]) -> None:
        """Add one Node of a listing to ``classes``; a name the listing already gave is ignored, with the reason in
        the log (a name is unique in a cluster: counting it twice would double its capacity; the CLI refuses such
        a node list, facts.duplicate_nodes)."""
        name, cls = hardware_class(node)
        if name in classes:
            log.warning("node %s appears twice in one listing: the second is ignored", name)
            return
        classes[name] = self._classes.setdefault(cls, cls)

    def replace_classes(self, classes: dict[str, HardwareClass]) -> bool:
        changed = [self.update_class(name, cls) for name, cls in classes.items()]
        changed += [self.remove(name) for name in list(self.by_name) if name not in classes]
        return any(changed)

    def grouped(self) -> dict[HardwareClass, tuple[str, ...]]:
        """Hardware class -> sorted node names; rebuilt only when the version moved."""
        version, grouped = self._grouped
        if version != self.version:
            version = self.version
            by_class: dict[HardwareClass, list[str]] = {}
            for name, cls in self.by_name.items():
                by_class.setdefault(cls, []).append(name)
            grouped = {cls: tuple(sorted(names)) for cls, names in by_class.items()}
            self._grouped = (version, grouped)
            metrics.NODE_CLASSES.labels("gpu").set(sum(1 for c in grouped if c.has_gpu))
            metrics.NODE_CLASSES.labels("cpu").set(sum(1 for c in grouped if not c.has_gpu))
        return grouped

    def slice_event(self, op: str, body: dict[str, Any]) -> bool:
        """Record a ResourceSlice event (ADDED/MODIFIED/DELETED); True when a known node's class changed."""
        name = str((body.get("metadata") or {}).get("name", "?"))
        spec = body.get("spec") or {}
        if op == "DELETED":
            self._slices.pop(name, None)
        elif spec.get("driver") in DRIVERS:
            self._slices[name] = {"metadata": {"name": name}, "spec": spec}
        else:
            return False
        return self.set_devices(node_devices(self._slices.values()).by_node)

    async def run_slices(
        self, client: AsyncClient, on_change: Callable[[], None], on_added: Callable[[], None] | None = None
    ) -> None:
        """List, then watch the ResourceSlices of the GPU DRA drivers (resource.k8s.io/v1); a cluster without that
        API (before Kubernetes 1.34, or DRA off) is said once in the log and not watched."""
        delay = 1.0
        while True:
            try:
                listing = client.list(ResourceSlice, chunk_size=500)
                self._slices = {}
                async for item in listing:
                    body = item.to_dict()
                    if (body.get("spec") or {}).get("driver") in DRIVERS:
                        self._slices[str(body["metadata"]["name"])] = {
                            "metadata": body["metadata"],
                            "spec": body["spec"],
                        }
                if self.set_devices(node_devices(self._slices.values()).by_node):
                    on_change()
                if on_added is not None:
                    on_added()
                async for op, item in client.watch(ResourceSlice, resource_version=listing.resourceVersion):
                    if self.slice_event(op, item.to_dict()):
                        on_change()
                    elif op != "DELETED" and on_added is not None:
                        on_added()
                    delay = 1.0
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.status.code == 404:
                    log.info("no resource.k8s.io/v1 ResourceSlices on this cluster: DRA devices are not read")
                    return
                if exc.status.code != 410:
                    log.warning("ResourceSlice watch failed (%s); listing again in %.0f s", exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 60.0)
            except Exception as exc:
                log.warning("ResourceSlice watch failed (%r); listing again in %.0f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)

    async def run(
        self, client: AsyncClient, on_change: Callable[[], None], on_added: Callable[[], None] | None = None
    ) -> None:
        """List, then watch from the listing's resourceVersion; list again when the watch expires or fails.

        ``on_change`` is called after the recorded classes changed (not for the first listing); ``on_added`` after
        a node appeared (capacity that backends waiting for GPUs may use)."""
        delay = 1.0
        while True:
            try:
                listing = client.list(Node, chunk_size=500)
                seen: dict[str, HardwareClass] = {}
                async for item in listing:  # fetched 500 at a time, parsed one by one: no list of 5,000 Nodes
                    self.add_listed(seen, item.to_dict())
                known = len(self.by_name)
                changed = self.replace_classes(seen)
                if self.ready.is_set() and changed:
                    on_change()
                if self.ready.is_set() and on_added is not None and len(self.by_name) > known:
                    on_added()
                self.ready.set()
                log.info("nodes listed: %d in %d hardware classes", len(seen), len(self.grouped()))
                async for op, node in client.watch(Node, resource_version=listing.resourceVersion):
                    body = node.to_dict()
                    name = str((body.get("metadata") or {}).get("name", "?"))
                    new = op != "DELETED" and name not in self.by_name
                    if self.remove(name) if op == "DELETED" else self.update(body):
                        on_change()
                    if new and on_added is not None:
                        on_added()
                    delay = 1.0
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.status.code != 410:  # 410 Gone: the resourceVersion expired; list again at once
                    log.warning("node watch failed (%s); listing again in %.0f s", exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 60.0)
            except Exception as exc:  # connection drops: list again after a backoff, never crash
                log.warning("node watch failed (%r); listing again in %.0f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
