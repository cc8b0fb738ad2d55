"""GPUs published by DRA drivers in ResourceSlices (``resource.k8s.io/v1``, GA since Kubernetes 1.34), read into the
same GPU facts as device-plugin GPUs. Pure: no I/O.

A node whose GPUs are managed by a DRA driver advertises no extended resource (no ``nvidia.com/gpu`` in its
allocatable): its devices are listed in ResourceSlices with ``spec.nodeName``, each with attributes and capacities
the driver defines. The drivers read here, with the names of their own source:

- NVIDIA's ``gpu.nvidia.com`` (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go ``GpuInfo.Attributes``
  and mig.go ``CommonAttributesMig``/``CommonCapacitiesMig``): attributes ``type`` (``gpu`` or ``mig``),
  ``productName`` (NVML's device name, e.g. ``NVIDIA H100 80GB HBM3``), ``architecture`` (``Hopper``),
  ``cudaComputeCapability`` (a version, ``9.0.0``), ``profile`` (MIG: ``1g.10gb``), ``uuid``, ``brand``,
  ``driverVersion``; capacity ``memory`` in bytes (partitions.go ``fullGpuCapacity``: NVML's total memory). Its
  chart's DeviceClasses: ``gpu.nvidia.com`` (``type == 'gpu'``) and ``mig.nvidia.com`` (``type == 'mig'``).
- AMD's ``gpu.amd.com`` (ROCm/k8s-gpu-dra-driver, docs/driver-attributes.md): attributes ``type`` (``amdgpu`` or
  ``amdgpu-partition``), ``productName`` (sysfs product_name with spaces as underscores, e.g.
  ``AMD_Instinct_MI300X_OAM``), ``family``, ``deviceID``, ``partitionProfile``; capacity ``memory`` in bytes,
  ``computeUnits``. Its chart's DeviceClass ``gpu.amd.com`` selects every device of the driver, so the claim's
  selector names the type.

Devices are grouped per node by (driver, type, product, memory, profile); each group is one ``GPUFacts`` whose
``resource`` is the DeviceClass to request and whose ``selector`` is the attributes the claim's CEL selector
matches. Only the newest generation of a pool counts (older slices are stale, resource.k8s.io/v1 ResourcePool
``generation``). Slices not bound to one node (``allNodes``, ``nodeSelector``: network-attached devices) are left
out, with a note.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inference_backend.facts.identify import DEFAULTS, INDEX
from inference_backend.facts.sku import mig_share
from inference_backend.quantity import parse_quantity

MIB = 2**20


@dataclass(frozen=True)
class Driver:
    """What one DRA driver publishes: its name, vendor, the DeviceClass of whole devices and of partitions, and the
    ``type`` attribute values of each."""

    name: str
    vendor: str
    whole_type: str
    whole_class: str
    part_type: str
    part_class: str
    source: str


DRIVERS: dict[str, Driver] = {
    "gpu.nvidia.com": Driver(
        "gpu.nvidia.com",
        "nvidia",
        "gpu",
        "gpu.nvidia.com",
        "mig",
        "mig.nvidia.com",
        "NVIDIA DRA driver (k8s-dra-driver-gpu) ResourceSlice",
    ),
    "gpu.amd.com": Driver(
        "gpu.amd.com",
        "amd",
        "amdgpu",
        "gpu.amd.com",
        "amdgpu-partition",
        "gpu.amd.com",
        "AMD DRA driver (k8s-gpu-dra-driver) ResourceSlice",
    ),
}
"""The GPU drivers whose attributes are read (DeviceClass names as their Helm charts create them)."""


@dataclass(frozen=True)
class Device:
    """One device of a ResourceSlice, its attributes unqualified (``productName``) and values as plain Python."""

    driver: str
    name: str
    attributes: Mapping[str, Any]
    memory_bytes: int | None


@dataclass
class NodeDevices:
    """The DRA devices of the GPU drivers on each node, and notes on what was left out."""

    by_node: dict[str, list[Device]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _value(attr: Any) -> Any:
    """A DeviceAttribute's value (exactly one of string, int, bool, version is set)."""
    if not isinstance(attr, Mapping):
        return None
    for key in ("string", "int", "bool", "version"):
        if key in attr:
            return attr[key]
    return None


def _device(driver: str, raw: Mapping[str, Any]) -> Device:
    body = raw.get("basic") or raw  # resource.k8s.io/v1beta1 nests them under basic; v1 does not
    attributes: dict[str, Any] = {}
    for key, attr in (body.get("attributes") or {}).items():
        name = str(key).removeprefix(f"{driver}/")
        attributes[name] = _value(attr)
    memory = (body.get("capacity") or {}).get("memory")
    value = memory.get("value") if isinstance(memory, Mapping) else memory
    try:
        memory_bytes = int(parse_quantity(str(value))) if value is not None else None
    except ValueError:
        memory_bytes = None
    return Device(driver, str(raw.get("name", "?")), attributes, memory_bytes)


def node_devices(slices: Iterable[Mapping[str, Any]]) -> NodeDevices:
    """The devices of the known GPU drivers' ResourceSlices, per node (the newest generation of each pool)."""
    newest: dict[tuple[str, str], int] = {}
    kept: list[Mapping[str, Any]] = []
    out = NodeDevices()
    for s in slices:
        spec = s.get("spec") or {}
        driver = str(spec.get("driver", ""))
        if driver not in DRIVERS:
            continue
        pool = spec.get("pool") or {}
        key = (driver, str(pool.get("name", "")))
        generation = int(pool.get("generation", 0) or 0)
        if generation < newest.get(key, generation):
            continue
        if generation > newest.get(key, generation):
            kept = [k for k in kept if _pool_key(k) != key]
        newest[key] = generation
        kept.append(s)
    for s in kept:
        spec = s.get("spec") or {}
        driver = str(spec["driver"])
        node = spec.get("nodeName")
        devices = spec.get("devices") or []
        if not node:
            if devices:
                name = (s.get("metadata") or {}).get("name", "?")
                out.notes.append(
                    f"ResourceSlice {name} ({driver}) is not bound to one node (allNodes/nodeSelector): "
                    f"its {len(devices)} device(s) are not counted"
                )
            continue
        out.by_node.setdefault(str(node), []).extend(_device(driver, d) for d in devices)
    return out


def _pool_key(s: Mapping[str, Any]) -> tuple[str, str]:
    spec = s.get("spec") or {}
    return str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", ""))


def _compute(value: Any) -> tuple[int, int] | None:
    parts = str(value or "").split(".")
    try:
        return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) if parts[0] else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Group:
    """Devices of one node that are interchangeable for a claim: same driver, type, product, memory, profile."""

    driver: str
    type: str
    product: str
    memory_bytes: int | None
    profile: str
    compute: str


def group(devices: Iterable[Device]) -> dict[Group, int]:
    """Devices per interchangeable group (the count a claim may ask of them)."""
    out: dict[Group, int] = {}
    for d in devices:
        a = d.attributes
        profile = str(a.get("profile") or a.get("partitionProfile") or "")
        key = Group(
            d.driver,
            str(a.get("type") or ""),
            str(a.get("productName") or ""),
            d.memory_bytes,
            profile,
            str(a.get("cudaComputeCapability") or ""),
        )
        out[key] = out.get(key, 0) + 1
    return out


def facts(g: Group, count: int) -> tuple[dict[str, Any], str]:
    """The GPUFacts fields of a group (as keyword arguments) and its note naming each fact's source."""
    drv = DRIVERS[g.driver]
    part = g.type == drv.part_type and g.type != ""
    sku, _ = INDEX.lookup(g.product, g.memory_bytes // MIB if g.memory_bytes else None, drv.vendor)
    src = f"{drv.source} attribute"
    if g.memory_bytes:
        memory, mem_src = g.memory_bytes // MIB, f"{drv.source} capacity memory"
    elif sku is not None and not part:
        memory, mem_src = sku.memory_mib, f"the SKU table ({sku.id})"
    else:
        memory, mem_src = DEFAULTS[drv.vendor][0], "the conservative default (no memory capacity published)"
    compute = _compute(g.compute) or (sku.compute if sku is not None else None)
    c_src = f"{src} cudaComputeCapability={g.compute}" if _compute(g.compute) else "the SKU table"
    bandwidth = float(sku.bandwidth_gbs) if sku is not None else 0.0
    if part and drv.vendor == "nvidia" and sku is not None:
        bandwidth *= mig_share(sku, g.profile)[1]
    product = g.product or "unknown"
    if part and g.profile:
        product = f"{product} MIG {g.profile}" if drv.vendor == "nvidia" else f"{product} {g.profile}"
    selector = [(f"{g.driver}/type", g.type), (f"{g.driver}/productName", g.product)]
    if part and g.profile:
        selector.append((f"{g.driver}/{'profile' if drv.vendor == 'nvidia' else 'partitionProfile'}", g.profile))
    kwargs: dict[str, Any] = {
        "product": product,
        "memory_mib": memory,
        "count": count,
        "resource": drv.part_class if part else drv.whole_class,
        "compute": compute if drv.vendor == "nvidia" else None,
        "mig": part,
        "labelled": bool(g.product) and (g.memory_bytes is not None or sku is not None),
        "vendor": drv.vendor,
        "sku": sku.id if sku is not None else "",
        "bandwidth_gbs": bandwidth,
        "selector": tuple(selector),
        "dra": g.driver,
    }
    what = "partition" if part else "device"
    note = (
        f"{count}x {product} (DRA {what}s of {g.driver}, DeviceClass {kwargs['resource']}): product from {src} "
        f"productName; memory {memory} MiB from {mem_src}"
    )
    if compute is not None and drv.vendor == "nvidia":
        note += f"; compute {compute[0]}.{compute[1]} from {c_src}"
    if sku is not None:
        note += f"; {sku.bandwidth_gbs} GB/s from the SKU table ({sku.id})"
    else:
        note += f"; productName {g.product or '(none)'} is not in the SKU table"
    return kwargs, note
