"""GPU pools: the nodes one pod template may land on, as the operator counts capacity.

A GPU placement selects its nodes by one identifying label (GFD's product, GKE's accelerator, Karpenter's GPU
name, AMD's product name or the instance type, whichever identified the part; facts/identify.py) and requests one
extended resource. Two backends on the same product can therefore select different nodes: an A10G identified by GFD
on one node and by its instance type on another. Capacity is counted per pool, ``(resource, identifying labels)``,
never per product: summing every A10G in the cluster would promise a pod GPUs on nodes its nodeSelector excludes.
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from inference_backend.facts.dra import DRIVERS
from inference_backend.facts.identify import (
    AMD_PRODUCT,
    EKS_AUTO_GPU_NAME,
    GFD_PRODUCT,
    GKE_ACCELERATOR,
    INSTANCE_TYPE_LABELS,
    KARPENTER_GPU_NAME,
)
from inference_backend.facts.nodes import DEVICE_RESOURCES, MIG_RESOURCE_PREFIX, GPUFacts, HardwareClass
from inference_backend.vocabulary import DRA_POOL_ANNOTATION

Pool = tuple[str, tuple[tuple[str, str], ...]]
"""(extended resource, sorted identifying node labels the pod selects)."""

SELECTOR_KEYS = frozenset(
    {GFD_PRODUCT, *AMD_PRODUCT, GKE_ACCELERATOR, KARPENTER_GPU_NAME, EKS_AUTO_GPU_NAME, *INSTANCE_TYPE_LABELS}
)
"""Every label the identification may put in a pod's nodeSelector."""


def pod_selector(gpu: GPUFacts) -> tuple[tuple[str, str], ...]:
    """The node labels a pod on this device selects. MIG mixed strategy: GFD labels the node with the whole GPU's
    product, and the nvidia.com/mig-<profile> request already selects nodes with that profile. A DRA device: none
    (the claim's selector picks the devices, and the scheduler the nodes that have them)."""
    if gpu.dra:
        return ()
    if not gpu.resource.startswith(MIG_RESOURCE_PREFIX):
        return gpu.selector
    return tuple((k, v.split("-MIG-", 1)[0]) if k == GFD_PRODUCT else (k, v) for k, v in gpu.selector)


def pool_of(gpu: GPUFacts) -> Pool:
    """A device-plugin GPU: (resource, the node labels the pod selects). A DRA device: (DeviceClass, the attributes
    its claim selects), counted per device on whichever node has it."""
    return gpu.resource, tuple(sorted(gpu.selector if gpu.dra else pod_selector(gpu)))


def _dra_pool(labels: tuple[tuple[str, str], ...]) -> bool:
    return any("/" in k and k.split("/", 1)[0] in DRIVERS for k, _ in labels)


def dra_annotation(gpu: GPUFacts, per_pod: int) -> str:
    """The value of DRA_POOL_ANNOTATION for pods requesting ``per_pod`` devices like ``gpu``."""
    resource, labels = pool_of(gpu)
    return json.dumps([resource, [list(kv) for kv in labels], per_pod], separators=(",", ":"))


def is_device_resource(resource: str) -> bool:
    return resource in DEVICE_RESOURCES or resource.startswith(MIG_RESOURCE_PREFIX)


def _annotated_pool(annotations: Mapping[str, Any], replicas: int) -> tuple[Pool, int] | None:
    try:
        resource, labels, count = json.loads(str(annotations[DRA_POOL_ANNOTATION]))
        pool = (str(resource), tuple(sorted((str(k), str(v)) for k, v in labels)))
        return pool, int(count) * max(replicas, 0)
    except (KeyError, ValueError, TypeError):
        return None


def pod_pool(
    pod: Mapping[str, Any], replicas: int, annotations: Mapping[str, Any] | None = None
) -> tuple[Pool, int] | None:
    """(pool, devices over all replicas) a pod template requests; None when it requests no accelerator.
    ``annotations``: the template's, where a DRA placement names its pool (DRA_POOL_ANNOTATION)."""
    if annotations and DRA_POOL_ANNOTATION in annotations:
        return _annotated_pool(annotations, replicas)
    per_resource: dict[str, int] = {}
    for container in pod.get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        for resource, value in limits.items():
            if is_device_resource(resource):
                try:
                    count = int(str(value))
                except ValueError:
                    continue
                per_resource[resource] = per_resource.get(resource, 0) + count
    wanted = sorted((r, n) for r, n in per_resource.items() if n > 0)
    if not wanted:
        return None
    resource, count = wanted[0]  # one accelerator resource per pod is what the renderer writes
    selector = pod.get("nodeSelector") or {}
    labels = tuple(sorted((k, str(v)) for k, v in selector.items() if k in SELECTOR_KEYS))
    return (resource, labels), count * max(replicas, 0)


def _matches(cls: HardwareClass, labels: tuple[tuple[str, str], ...]) -> bool:
    have = cls.label_map()
    return all(have.get(k) == v for k, v in labels)


def capacity(pool: Pool, classes: Iterable[tuple[HardwareClass, int]]) -> int:
    """Allocatable devices of the pool's resource on the (class, node count) pairs its labels select; for a DRA
    pool, the devices its claim's attributes select, one by one."""
    resource, labels = pool
    if _dra_pool(labels):
        return sum(
            g.count * n
            for cls, n in classes
            for g in cls.gpus
            if g.dra and g.resource == resource and tuple(sorted(g.selector)) == labels
        )
    return sum(
        g.count * n
        for cls, n in classes
        if _matches(cls, labels)
        for g in cls.gpus
        if g.resource == resource and not g.dra
    )


def overlap(a: Pool, b: Pool, classes: Iterable[tuple[HardwareClass, int]]) -> bool:
    """Whether pods of the two pools can compete for the same devices: the same resource on some node both select
    (DRA pools: the same DeviceClass and attributes)."""
    if a[0] != b[0]:
        return False
    if a == b:
        return True
    if _dra_pool(a[1]) or _dra_pool(b[1]):
        return False
    return any(
        _matches(cls, a[1]) and _matches(cls, b[1]) and any(g.resource == a[0] for g in cls.gpus) for cls, _ in classes
    )


def reserved(pool: Pool, in_use: Mapping[Pool, int], classes: Iterable[tuple[HardwareClass, int]]) -> int:
    """Devices other backends hold in any pool overlapping ``pool`` (conservative: a pod selecting the instance
    type may take a GPU that a pod selecting the GFD product was counting on, when a node carries both)."""
    listed = list(classes)
    return sum(n for other, n in in_use.items() if overlap(pool, other, listed))
