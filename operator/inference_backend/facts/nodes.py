"""Node facts: the one parser from a v1 Node to the hardware facts the selection needs.

Accelerators are found by their device plugin's extended resource in ``status.allocatable`` (``nvidia.com/gpu``,
``nvidia.com/mig-<profile>``, ``amd.com/gpu``, ``habana.ai/gaudi``) and identified from the node's labels in the
precedence of facts/identify.py; memory, compute capability and bandwidth come from labels or the SKU table, and
every GPU's facts carry a note naming the source of each. CPU facts come from ``status.allocatable`` and
``kubernetes.io/arch``. Nodes are grouped into hardware classes so a selection costs one pass over the classes, not
over the nodes (the operator keeps the grouping in a kopf index); labels that differ per node without changing what
can run (hostnames, GFD's timestamp, most NFD feature labels) are left out of the class, so thousands of identical
nodes are one class. Missing or partial labels never raise: an unidentified device gets conservative assumptions
and a note.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, replace
from typing import Any

from inference_backend.facts.dra import Device, node_devices
from inference_backend.facts.dra import facts as dra_facts
from inference_backend.facts.dra import group as dra_group
from inference_backend.facts.identify import AMD_VRAM as _AMD_VRAM
from inference_backend.facts.identify import (
    DEFAULTS,
    GFD_MEMORY,
    GFD_PRODUCT,
    GKE_PARTITION,
    Identity,
    amd_vram_mib,
    identify,
)
from inference_backend.facts.sku import mig_share
from inference_backend.quantity import parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_RESOURCE = "nvidia.com/gpu.shared"
"""Time-sliced or MPS shares under the device plugin's ``renameByDefault: true`` (k8s-device-plugin README, "Shared
Access to GPUs"): the same GFD labels, the resource renamed."""
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
AMD_RESOURCE = "amd.com/gpu"
GAUDI_RESOURCE = "habana.ai/gaudi"
DEVICE_RESOURCES = {GPU_RESOURCE: "nvidia", SHARED_RESOURCE: "nvidia", AMD_RESOURCE: "amd", GAUDI_RESOURCE: "habana"}
ARCH_LABEL = "kubernetes.io/arch"
SHARING_STRATEGIES = ("time-slicing", "mps")
"""GFD's ``nvidia.com/gpu.sharing-strategy`` values that share a card (``none`` does not; k8s-device-plugin
internal/lm/resource.go baseLabeler, README "Catalog of Labels")."""
VENDOR_TITLES = {"nvidia": "NVIDIA GPU", "amd": "AMD Instinct (ROCm)", "habana": "Intel Gaudi"}
UNLABELLED_GPU_MEMORY_MIB, UNLABELLED_GPU_COMPUTE = DEFAULTS["nvidia"][0], (7, 5)
REFERENCE_BANDWIDTH_GBS = 2039
"""The A100 SXM4 80GB's bandwidth: the engine profiles' reference GPU (engines/card.py REFERENCE)."""
UNKNOWN_GPU_SPEED = 0.15
# Labels that differ from node to node without changing what can run: left out of the hardware class, so
# identical nodes share one class (and a status does not grow with the node count).
_PER_NODE_PREFIXES = (
    "kubernetes.io/hostname",
    "kwok.x-k8s.io/",
    "node.kubernetes.io/instance-id",
    "alpha.eksctl.io/instance-id",
    "nvidia.com/gfd.timestamp",
    "nvidia.com/gpu-driver-upgrade",
    "nvidia.com/gpu.deploy.",
    "nvidia.com/mig.config.state",
    "feature.node.kubernetes.io/",
    "nfd.node.kubernetes.io/",
    "kubernetes.azure.com/node-image-version",
    "eks.amazonaws.com/nodegroup-image",
    "k8s.io/cloud-provider-aws",
    "csi.volume.kubernetes.io/",
    "topology.ebs.csi.aws.com/",
    "topology.gke.io/zone",
)
# NFD labels that do change what can run on a CPU (instruction sets the CPU engines' kernels use) stay.
_KEPT_NFD = ("feature.node.kubernetes.io/cpu-cpuid.",)


@dataclass(frozen=True, order=True)
class Taint:
    key: str
    value: str
    effect: str


@functools.total_ordering
@dataclass(frozen=True)
class GPUFacts:
    product: str
    """The product as its node labels name it (GFD's nvidia.com/gpu.product, AMD's product name), else the SKU
    table's GFD form of the part a cloud label or instance type names, or "unknown"."""
    memory_mib: int
    """Memory per GPU (or per MIG slice) in MiB."""
    count: int
    """Allocatable GPUs (or MIG slices of this profile) on the node."""
    resource: str = GPU_RESOURCE
    """Extended resource to request: nvidia.com/gpu, nvidia.com/mig-<profile>, amd.com/gpu or habana.ai/gaudi."""
    compute: tuple[int, int] | None = None
    """CUDA compute capability (major, minor); None for AMD and Gaudi."""
    mig: bool = False
    """A MIG slice rather than a whole GPU: no tensor parallelism across slices."""
    labelled: bool = True
    """True when memory and compute are known (labels or the SKU table); False when the default was assumed."""
    vendor: str = "nvidia"
    sku: str = ""
    """SKU table row id, "" when the part is not identified."""
    bandwidth_gbs: float = 0.0
    """Memory bandwidth of this device (a MIG slice: its share), 0 when unknown."""
    selector: tuple[tuple[str, str], ...] = ()
    """Node labels naming this product (the pod's nodeSelector); empty when none does. For a DRA device: the
    driver's attributes naming it (``gpu.nvidia.com/productName``), which the claim's CEL selector matches."""
    replicas: int = 1
    """Shares per physical card (GFD ``nvidia.com/gpu.replicas`` under time-slicing or MPS); 1 when not shared.
    ``memory_mib`` and ``bandwidth_gbs`` are then one share's: the card's divided by ``replicas``."""
    sharing: str = ""
    """``time-slicing`` or ``mps`` when the device is a share of a card, else empty."""
    dra: str = ""
    """The DRA driver publishing this device in ResourceSlices (``gpu.nvidia.com``, ``gpu.amd.com``); empty for a
    device-plugin extended resource. ``resource`` is then the DeviceClass a ResourceClaimTemplate requests."""

    def _key(self) -> tuple[Any, ...]:
        t = astuple(self)
        return (*t[:4], self.compute or (-1, -1), *t[5:])

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, GPUFacts):
            return NotImplemented
        return self._key() < other._key()

    @property
    def shared(self) -> bool:
        """A share of a card (time-slicing or MPS): never tensor parallel across shares, like a MIG slice."""
        return self.replicas > 1

    @property
    def speed(self) -> float:
        """Memory bandwidth relative to the reference A100 80GB (decoding is bandwidth-bound)."""
        return self.bandwidth_gbs / REFERENCE_BANDWIDTH_GBS if self.bandwidth_gbs else UNKNOWN_GPU_SPEED


@dataclass(frozen=True, order=True)
class HardwareClass:
    """Everything the selection needs to know about a node, minus its name. Equal nodes share one class."""

    arch: str
    cpu_millis: int
    memory_bytes: int
    gpus: tuple[GPUFacts, ...] = ()
    schedulable: bool = True
    ready: bool = True
    taints: tuple[Taint, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    """What was found, assumed or ignored while parsing, with the source of each fact (no node names)."""
    ephemeral_bytes: int | None = None
    """Allocatable ``ephemeral-storage`` (the kubelet's root filesystem, where emptyDirs live), whole GiB rounded
    down; None when the node reports none (a trimmed node list): the disk is then not checked."""

    @property
    def has_gpu(self) -> bool:
        return any(g.count > 0 for g in self.gpus)

    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


def _int(value: Any, default: int | None = None) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def _mig_profile_memory_mib(profile: str) -> int:
    """Memory of a MIG profile from its name, e.g. ``1g.10gb`` -> 10240 MiB; 0 when the name has no size."""
    size = profile.split("+", 1)[0].rsplit(".", 1)[-1].removesuffix("gb")
    return (_int(size, 0) or 0) * 1024


def _compute(labels: Mapping[str, str]) -> tuple[int, int] | None:
    major = _int(labels.get("nvidia.com/cuda.compute.major"))
    minor = _int(labels.get("nvidia.com/cuda.compute.minor"))
    return (major, minor or 0) if major is not None and major > 0 else None


def _slice(
    ident: Identity,
    product: str,
    profile: str,
    count: int,
    resource: str,
    memory: int | None,
    memory_source: str,
    labels: Mapping[str, str],
) -> tuple[GPUFacts, str]:
    sku = ident.sku
    compute = _compute(labels) or (sku.compute if sku else None)
    if memory is None:
        memory, memory_source = _mig_profile_memory_mib(profile), "the MIG profile name"
    c_share, bw_share, share_src = mig_share(sku, profile)
    bw = sku.bandwidth_gbs * bw_share if sku else 0.0
    name = f"{product}-MIG-{profile}" if "-MIG-" not in product else product
    gpu = GPUFacts(
        name,
        memory,
        count,
        resource,
        compute,
        mig=True,
        vendor="nvidia",
        sku=sku.id if sku else "",
        bandwidth_gbs=bw,
        selector=ident.selector,
    )
    note = (
        f"{count}x {name} ({resource}): MIG slice, memory {memory} MiB from {memory_source}; "
        f"{c_share:.2f} of the compute and {bw_share:.2f} of the bandwidth from {share_src}"
    )
    return gpu, note


def _nvidia(labels: Mapping[str, str], alloc: Mapping[str, Any]) -> tuple[list[GPUFacts], list[str]]:
    notes: list[str] = []
    gpus: list[GPUFacts] = []
    ident = identify("nvidia", labels)
    product = ident.product or "unknown"
    # MIG mixed strategy: one extended resource per profile, e.g. nvidia.com/mig-1g.10gb: 7.
    for resource in sorted(k for k in alloc if k.startswith(MIG_RESOURCE_PREFIX)):
        profile = resource[len(MIG_RESOURCE_PREFIX) :]
        count = _int(alloc[resource], 0) or 0
        mem = _int(labels.get(f"nvidia.com/mig-{profile}.memory"))
        if mem is None:
            notes.append(
                f"no memory label for MIG profile {profile}; taking "
                f"{_mig_profile_memory_mib(profile)} MiB from its name"
            )
        gpu, note = _slice(
            ident,
            product.split("-MIG-", 1)[0],
            profile,
            count,
            resource,
            mem,
            f"GFD nvidia.com/mig-{profile}.memory",
            labels,
        )
        gpu, shared = _share(gpu, labels, f"nvidia.com/mig-{profile}")
        gpus.append(gpu)
        notes.extend([note, *shared])
    resource = GPU_RESOURCE if (_int(alloc.get(GPU_RESOURCE), 0) or 0) > 0 else SHARED_RESOURCE
    count = _int(alloc.get(resource), 0) or 0
    if count <= 0 and not gpus and (ident.product is not None or ident.instance is not None):
        src = "GFD labels" if labels.get(GFD_PRODUCT) else ident.product_source or "the instance type"
        notes.append(f"{src} present but no allocatable nvidia.com/gpu (device plugin not ready?)")
    if count <= 0:
        return gpus, notes + ident.notes
    single = labels.get("nvidia.com/mig.strategy") == "single" and "-MIG-" in product
    partition = labels.get(GKE_PARTITION)
    if single or partition:
        profile = product.split("-MIG-", 1)[1].removesuffix("-SHARED") if single else str(partition)
        mem = _int(labels.get(GFD_MEMORY)) if single else None
        src = f"GFD {GFD_MEMORY}" if single else f"GKE {GKE_PARTITION}"
        gpu, note = _slice(ident, product, profile, count, resource, mem, src, labels)
        gpu, shared = _share(gpu, labels, GPU_RESOURCE)
        return [*gpus, gpu], [*notes, note, *shared, *ident.notes]
    gpu, facts = _whole("nvidia", resource, count, ident, labels)
    gpu, shared = _share(gpu, labels, GPU_RESOURCE)
    labelled_count = _int(labels.get("nvidia.com/gpu.count"))
    if labelled_count is not None and labelled_count != count and not gpu.shared:
        facts.append(f"nvidia.com/gpu.count={labelled_count} but {count} allocatable; using {count}")
    return [*gpus, gpu], notes + facts + shared + ident.notes


def _replicas(gpu: GPUFacts, labels: Mapping[str, str], prefix: str, suffixed: bool) -> tuple[int, str]:
    """Shares per card, and where that figure comes from: GFD's ``<resource>.replicas``, else the allocatable
    count over GFD's physical ``<resource>.count``; for a share nothing counts, all of them on one card."""
    labelled = _int(labels.get(f"{prefix}.replicas"))
    if labelled is not None and labelled > 1:
        return labelled, f"GFD {prefix}.replicas={labelled}"
    physical = _int(labels.get(f"{prefix}.count"))
    if physical and gpu.count > physical:
        return gpu.count // physical, f"{gpu.count} allocatable over GFD {prefix}.count={physical}"
    if suffixed:
        return max(gpu.count, 2), (
            f"no {prefix}.replicas label: assuming all {gpu.count} shares are of one card (conservative)"
        )
    return 1, ""


def _share(gpu: GPUFacts, labels: Mapping[str, str], prefix: str) -> tuple[GPUFacts, list[str]]:
    """A time-sliced or MPS device as one share of a card: the card's memory and bandwidth divided by its replicas
    (GFD ``<resource>.sharing-strategy``, ``.replicas``, the ``-SHARED`` product suffix or the ``.shared`` resource
    of ``renameByDefault``; k8s-device-plugin README "Shared Access to GPUs")."""
    strategy = labels.get(f"{prefix}.sharing-strategy", "")
    suffixed = gpu.product.endswith("-SHARED") or gpu.resource == SHARED_RESOURCE
    if strategy not in SHARING_STRATEGIES and not suffixed:
        return gpu, []
    replicas, source = _replicas(gpu, labels, prefix, suffixed)
    if replicas <= 1:
        return gpu, []
    if strategy not in SHARING_STRATEGIES:
        strategy, source = "time-slicing", f"{source}; the sharing strategy is not labelled: taken as time-slicing"
    memory = gpu.memory_mib // replicas
    shared = replace(
        gpu, memory_mib=memory, bandwidth_gbs=gpu.bandwidth_gbs / replicas, replicas=replicas, sharing=strategy
    )
    what = (
        f"{gpu.count}x {gpu.product} ({gpu.resource}): {strategy}, {replicas} shares per card ({source}); one "
        f"share is planned with 1/{replicas} of the card's {gpu.memory_mib} MiB = {memory} MiB and 1/{replicas} "
        "of its bandwidth, "
    )
    if strategy == "mps":
        what += (
            "the limits the device plugin's MPS control daemon sets on each share (pinned device memory and "
            "active threads, 1/replicas each)"
        )
    else:
        what += (
            "an assumption: time-slicing partitions neither memory nor compute, the shares' processes take turns "
            "on the card and must fit in it together"
        )
    return shared, [what + "; never tensor parallel across shares of one card"]


def _whole(
    vendor: str, resource: str, count: int, ident: Identity, labels: Mapping[str, str]
) -> tuple[GPUFacts, list[str]]:
    """A node's whole GPUs (or AMD GPUs, or Gaudis): memory, compute and bandwidth, each fact with its source."""
    notes: list[str] = []
    sku = ident.sku
    default_mem, default_compute = DEFAULTS[vendor]
    memory: int | None = None
    mem_src = ""
    if vendor == "nvidia" and (m := _int(labels.get(GFD_MEMORY))) is not None:
        memory, mem_src = m, f"GFD {GFD_MEMORY}"
    vram = next((labels[k] for k in _AMD_VRAM if labels.get(k)), None)
    if memory is None and vendor == "amd" and vram and (m := amd_vram_mib(vram)) is not None:
        memory, mem_src = m, f"device label amd.com/gpu.vram={vram}"
    if memory is None and ident.instance is not None and ident.instance.gpu_memory_gib:
        memory = int(ident.instance.gpu_memory_gib * 1024)
        mem_src = f"the instance-type table ({ident.instance_type}: a partition of the GPU)"
    if memory is None and sku is not None:
        memory, mem_src = sku.memory_mib, f"the SKU table ({sku.id})"
    if memory is None and ident.cloud_memory_mib:
        memory, mem_src = ident.cloud_memory_mib, "Karpenter karpenter.k8s.aws/instance-gpu-memory"
    known = memory is not None
    if memory is None:
        memory = default_mem
        notes.append(
            f"no {GFD_MEMORY} label; assuming {memory} MiB per GPU (conservative)"
            if vendor == "nvidia"
            else f"no memory label; assuming {memory} MiB per device (conservative)"
        )
    compute = _compute(labels) if vendor == "nvidia" else None
    c_src = "GFD nvidia.com/cuda.compute.*" if compute else ""
    if compute is None and sku is not None and sku.compute is not None:
        compute, c_src = sku.compute, f"the SKU table ({sku.id})"
    if compute is None and vendor == "nvidia":
        compute = default_compute
        known = False
        if compute is not None:
            notes.append(f"no compute capability label; assuming {compute[0]}.{compute[1]}")
    if ident.product is None and vendor == "nvidia":
        notes.append(f"{count} GPU(s) without GFD labels (nvidia.com/gpu.product)")
    product = ident.product or "unknown"
    facts = [
        f"product from {ident.product_source}" if ident.product else "product unknown",
        f"memory {memory} MiB from {mem_src or 'the default'}",
    ]
    if compute is not None:
        facts.append(f"compute {compute[0]}.{compute[1]} from {c_src or 'the default'}")
    if sku is not None:
        facts.append(f"{sku.bandwidth_gbs} GB/s from the SKU table ({sku.id}, identified by {ident.sku_source})")
    if ident.instance is not None:
        i = ident.instance
        facts.append(
            f"instance type {ident.instance_type}: {i.count}x {i.sku}, {i.vcpus} vCPU, {i.memory_gb} GB "
            f"host memory ({i.source})"
        )
    gpu = GPUFacts(
        product,
        memory,
        count,
        resource,
        compute,
        mig=False,
        labelled=known and ident.product is not None,
        vendor=vendor,
        sku=sku.id if sku else "",
        bandwidth_gbs=float(sku.bandwidth_gbs) if sku else 0.0,
        selector=ident.selector,
    )
    return gpu, [f"{count}x {product} ({resource}): " + "; ".join(facts), *notes]


def _gpu_facts(labels: Mapping[str, str], alloc: Mapping[str, Any]) -> tuple[list[GPUFacts], list[str]]:
    gpus, notes = _nvidia(labels, alloc)
    for resource in (AMD_RESOURCE, GAUDI_RESOURCE):
        count = _int(alloc.get(resource), 0) or 0
        if count > 0:
            vendor = DEVICE_RESOURCES[resource]
            ident = identify(vendor, labels)
            gpu, facts = _whole(vendor, resource, count, ident, labels)
            gpus.append(gpu)
            notes.extend(facts + ident.notes)
    return gpus, notes


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def class_label(key: str) -> bool:
    """Whether a node label belongs in the hardware class (False: it differs per node and changes nothing)."""
    return key.startswith(_KEPT_NFD) or not key.startswith(_PER_NODE_PREFIXES)


def _ephemeral(alloc: Mapping[str, Any], notes: list[str]) -> int | None:
    value = alloc.get("ephemeral-storage")
    if value is None:
        return None
    try:
        return int(parse_quantity(str(value))) // 2**30 * 2**30
    except ValueError as exc:
        notes.append(f"unreadable allocatable ephemeral-storage ({exc}); the disk is not checked")
        return None


def _dra_gpus(devices: Sequence[Device]) -> tuple[list[GPUFacts], list[str]]:
    gpus, notes = [], []
    for g, count in sorted(dra_group(devices).items(), key=lambda kv: astuple(kv[0])):
        kwargs, note = dra_facts(g, count)
        gpus.append(GPUFacts(**kwargs))
        notes.append(note)
    return gpus, notes


def with_devices(cls: HardwareClass, devices: Sequence[Device]) -> HardwareClass:
    """``cls`` (a node's class from its Node alone) with the GPUs DRA drivers publish for the node."""
    if not devices:
        return cls
    dra, notes = _dra_gpus(devices)
    return replace(cls, gpus=(*cls.gpus, *dra), notes=(*cls.notes, *notes))


def hardware_class(node: Mapping[str, Any], devices: Sequence[Device] = ()) -> tuple[str, HardwareClass]:
    """Parse one v1 Node (a dict as the API returns it) into its name and hardware class. ``devices``: the node's
    devices published by GPU DRA drivers in ResourceSlices (facts/dra.py), placed through resource claims."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", "?"))
    labels: dict[str, str] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    notes: list[str] = []
    try:
        cpu = int(parse_quantity(alloc.get("cpu", 0)) * 1000)
        memory = int(parse_quantity(alloc.get("memory", 0)))
    except ValueError as exc:
        notes.append(f"unreadable allocatable cpu/memory ({exc}); treating as 0")
        cpu, memory = 0, 0
    gpus, gpu_notes = _gpu_facts(labels, alloc)
    dra, dra_notes = _dra_gpus(devices)
    gpus, gpu_notes = gpus + dra, gpu_notes + dra_notes
    taints = tuple(
        sorted(
            Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
            for t in (node.get("spec") or {}).get("taints") or []
        )
    )
    kept = tuple(sorted((k, v) for k, v in labels.items() if class_label(k)))
    cls = HardwareClass(
        arch=labels.get("kubernetes.io/arch", "amd64"),
        cpu_millis=cpu // 1000 * 1000,  # whole cores and GiB, so near-identical nodes share a class
        memory_bytes=memory // 2**30 * 2**30,
        gpus=tuple(gpus),
        schedulable=not (node.get("spec") or {}).get("unschedulable", False),
        ready=_ready(node),
        taints=taints,
        labels=kept,
        notes=tuple(notes + gpu_notes),
        ephemeral_bytes=_ephemeral(alloc, notes),
    )
    return name, cls


ClusterFacts = Mapping[HardwareClass, tuple[str, ...]]
"""Hardware class -> names of the nodes in it."""


def duplicate_nodes(items: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names that more than one Node of the list carries (each name once, in order): a name is unique in a cluster,
    so a list repeating one was pasted together, and counting both would double the node's capacity."""
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        if item.get("kind", "Node") != "Node":
            continue
        name = str((item.get("metadata") or {}).get("name", "?"))
        if name in seen and name not in out:
            out.append(name)
        seen.add(name)
    return out


def group_nodes(items: Iterable[Mapping[str, Any]]) -> dict[HardwareClass, tuple[str, ...]]:
    """Group nodes by hardware class (the CLI's path; the operator keeps the same mapping up to date from its node
    and ResourceSlice watches). ``items``: v1 Nodes, and the ResourceSlices of GPU DRA drivers (facts/dra.py); a
    Node whose name came before is ignored (``duplicate_nodes`` names them; the CLI refuses such a list)."""
    listed = list(items)
    devices = node_devices(i for i in listed if i.get("kind") == "ResourceSlice")
    groups: dict[HardwareClass, list[str]] = {}
    seen: set[str] = set()
    for node in listed:
        if node.get("kind", "Node") != "Node":
            continue
        name = str((node.get("metadata") or {}).get("name", "?"))
        if name in seen:
            continue
        seen.add(name)
        name, cls = hardware_class(node, devices.by_node.get(name, ()))
        groups.setdefault(cls, []).append(name)
    return {cls: tuple(sorted(names)) for cls, names in groups.items()}


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    """core/v1 toleration matching (k8s.io/api/core/v1/toleration.go ToleratesTaint)."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = tol.get("key") or ""
        op = tol.get("operator") or "Equal"
        if not key and op == "Exists":
            return True
        if key != taint.key:
            continue
        if op == "Exists" or (tol.get("value") or "") == taint.value:
            return True
    return False


def extended_resource_tolerations(cls: HardwareClass) -> list[dict[str, str]]:
    """The tolerations the ExtendedResourceToleration admission plugin adds to a pod requesting this class's
    accelerators (key = the resource name, operator Exists, effect NoSchedule); GKE enables it, so its
    ``nvidia.com/gpu=present:NoSchedule`` taint never keeps GPU pods off GPU nodes. The renderer adds the same
    toleration to the pod, so the pod schedules where the plugin is not enabled too."""
    return [
        {"key": r, "operator": "Exists", "effect": "NoSchedule"}
        for r in sorted({g.resource for g in cls.gpus if not g.dra})
    ]


def gpu_speed(product: str) -> float:
    """Bandwidth ratio of a product (any spelling) to the reference A100 80GB, from the SKU table."""
    from inference_backend.facts.identify import INDEX

    sku, _ = INDEX.lookup(product)
    return sku.bandwidth_gbs / REFERENCE_BANDWIDTH_GBS if sku else UNKNOWN_GPU_SPEED
