"""Node facts: the one parser from a v1 Node to the hardware facts the selection needs.

GPU facts come from NVIDIA GPU Feature Discovery (GFD) labels and ``status.allocatable``; CPU facts from
``status.allocatable`` and ``kubernetes.io/arch``. Nodes are grouped into hardware classes so a selection costs
one pass over the classes, not over the nodes (the operator keeps the grouping in a kopf index).
Missing or partial labels never raise: a GPU node without GFD labels gets conservative assumptions and a note.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from inference_backend.quantity import parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
# Assumed for a GPU without GFD labels: the smallest common data-centre GPU (NVIDIA T4: 15360 MiB, compute 7.5).
UNLABELLED_GPU_MEMORY_MIB = 15360
UNLABELLED_GPU_COMPUTE = (7, 5)
# Labels unique to each node; left out of the hardware class so identical nodes share one class.
_PER_NODE_LABELS = ("kubernetes.io/hostname", "kwok.x-k8s.io/", "node.kubernetes.io/instance-id")


@dataclass(frozen=True, order=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, order=True)
class GPUFacts:
    product: str
    """nvidia.com/gpu.product, or "unknown" without GFD labels."""
    memory_mib: int
    """Memory per GPU (or per MIG slice) in MiB."""
    count: int
    """Allocatable GPUs (or MIG slices of this profile) on the node."""
    resource: str = GPU_RESOURCE
    """Extended resource to request: nvidia.com/gpu, or nvidia.com/mig-<profile> (MIG mixed strategy)."""
    compute: tuple[int, int] | None = None
    """CUDA compute capability (major, minor)."""
    mig: bool = False
    """A MIG slice rather than a whole GPU: no tensor parallelism across slices."""
    labelled: bool = True
    """False when GFD labels are missing and memory/compute are assumed."""


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
    """What was assumed or ignored while parsing (no node names, so equal nodes share one class)."""

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


def _gpu_facts(labels: Mapping[str, str], alloc: Mapping[str, Any]) -> tuple[list[GPUFacts], list[str]]:
    notes: list[str] = []
    gpus: list[GPUFacts] = []
    compute = None
    major, minor = (
        _int(labels.get("nvidia.com/cuda.compute.major")),
        _int(labels.get("nvidia.com/cuda.compute.minor")),
    )
    if major is not None:
        compute = (major, minor or 0)
    # MIG mixed strategy: one extended resource per profile, e.g. nvidia.com/mig-1g.10gb: 7.
    for resource in sorted(k for k in alloc if k.startswith(MIG_RESOURCE_PREFIX)):
        profile = resource[len(MIG_RESOURCE_PREFIX) :]
        count = _int(alloc[resource], 0) or 0
        mem = _int(labels.get(f"nvidia.com/mig-{profile}.memory"))
        if mem is None:
            mem = _mig_profile_memory_mib(profile)
            notes.append(f"no memory label for MIG profile {profile}; taking {mem} MiB from its name")
        product = f"{labels.get('nvidia.com/gpu.product', 'unknown')}-MIG-{profile}"
        gpus.append(GPUFacts(product, mem, count, resource, compute, mig=True))
    count = _int(alloc.get(GPU_RESOURCE), 0) or 0
    if count <= 0 and not gpus and "nvidia.com/gpu.product" in labels:
        notes.append("GFD labels present but no allocatable nvidia.com/gpu (device plugin not ready?)")
    if count > 0:
        gfd_product = labels.get("nvidia.com/gpu.product")
        mem = _int(labels.get("nvidia.com/gpu.memory"))
        labelled = gfd_product is not None and mem is not None
        if gfd_product is None:
            notes.append(f"{count} GPU(s) without GFD labels (nvidia.com/gpu.product)")
        if mem is None:
            mem = UNLABELLED_GPU_MEMORY_MIB
            notes.append(f"no nvidia.com/gpu.memory label; assuming {mem} MiB per GPU (conservative)")
        if compute is None:
            compute = UNLABELLED_GPU_COMPUTE
            notes.append(f"no compute capability label; assuming {compute[0]}.{compute[1]}")
        mig = labels.get("nvidia.com/mig.strategy") == "single" and "MIG" in (gfd_product or "")
        labelled_count = _int(labels.get("nvidia.com/gpu.count"))
        if labelled_count is not None and labelled_count != count:
            notes.append(f"nvidia.com/gpu.count={labelled_count} but {count} allocatable; using {count}")
        gpus.append(GPUFacts(gfd_product or "unknown", mem, count, GPU_RESOURCE, compute, mig=mig, labelled=labelled))
    return gpus, notes


def _mig_profile_memory_mib(profile: str) -> int:
    """Memory of a MIG profile from its name, e.g. ``1g.10gb`` -> 10240 MiB; 0 when the name has no size."""
    size = profile.rsplit(".", 1)[-1].removesuffix("gb")
    return (_int(size, 0) or 0) * 1024


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def hardware_class(node: Mapping[str, Any]) -> tuple[str, HardwareClass]:
    """Parse one v1 Node (a dict as the API returns it) into its name and hardware class."""
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
    taints = tuple(
        sorted(
            Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
            for t in (node.get("spec") or {}).get("taints") or []
        )
    )
    kept = tuple(sorted((k, v) for k, v in labels.items() if not k.startswith(_PER_NODE_LABELS)))
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
    )
    return name, cls


ClusterFacts = Mapping[HardwareClass, tuple[str, ...]]
"""Hardware class -> names of the nodes in it."""


def group_nodes(nodes: Iterable[Mapping[str, Any]]) -> dict[HardwareClass, tuple[str, ...]]:
    """Group nodes by hardware class (the CLI's path; the operator builds the same mapping from a kopf index)."""
    groups: dict[HardwareClass, list[str]] = {}
    for node in nodes:
        name, cls = hardware_class(node)
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


# ---- GPU products: relative decode speed --------------------------------------------------------------------------
# Relative speed of GPU products against the reference A100 (memory bandwidth ratio, which bounds decoding).
GPU_SPEED: tuple[tuple[str, float], ...] = (
    ("H200", 2.4), ("H100", 1.65), ("B200", 3.9), ("A100", 1.0), ("L40S", 0.43), ("L40", 0.43), ("A10G", 0.3),
    ("A10", 0.3), ("L4", 0.15), ("T4", 0.16), ("V100", 0.45),
)  # fmt: skip
UNKNOWN_GPU_SPEED = 0.15


def gpu_speed(product: str) -> float:
    """Bandwidth ratio of a GPU product to the A100; the first matching name wins (H200 before H100...)."""
    upper = product.upper()
    for name, speed in GPU_SPEED:
        if name in upper:
            return speed
    return UNKNOWN_GPU_SPEED
