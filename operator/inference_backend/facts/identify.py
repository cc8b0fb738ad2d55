"""Which accelerator a node has, from whatever labels it carries, in a fixed precedence; each fact with its source.

Precedence (the first source that gives a fact wins, and the reasons say which one did):
1. GPU Feature Discovery (``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory``, ``nvidia.com/cuda.compute.*``);
2. device labels of other vendors' plugins (AMD's node labeller ``amd.com/gpu.product-name``, ``.vram``,
   ``.device-id``, and their ``beta.amd.com/`` forms);
3. cloud labels: GKE's ``cloud.google.com/gke-accelerator`` (and ``gke-gpu-partition-size`` for MIG), Karpenter's
   ``karpenter.k8s.aws/instance-gpu-name``/``-memory``/``-manufacturer`` (and EKS Auto Mode's
   ``eks.amazonaws.com/instance-gpu-name``);
4. the instance-type table (``node.kubernetes.io/instance-type``: AWS, GCP, Azure; facts/clouds.py);
5. a conservative default (the smallest common part of the vendor), reported as assumed.
Memory and compute capability of an identified part come from the SKU table when no label gives them; a cloud
label's memory (EC2 lists a T4 as 16384 MiB where the driver reports 15360) is used only for a part the table does
not know. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from inference_backend.facts.clouds import GKE_ACCELERATORS, INSTANCE_TYPES, InstanceType
from inference_backend.facts.sku import Sku, SkuIndex
from inference_backend.facts.sku_table import AMD_DEVICE_IDS, SKUS, dec

INDEX = SkuIndex(SKUS)

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_PARTITION = "cloud.google.com/gke-gpu-partition-size"
KARPENTER_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
KARPENTER_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
KARPENTER_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
KARPENTER_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
EKS_AUTO_GPU_NAME = "eks.amazonaws.com/instance-gpu-name"
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
AMD_PRODUCT = ("amd.com/gpu.product-name", "beta.amd.com/gpu.product-name")
AMD_VRAM = ("amd.com/gpu.vram", "beta.amd.com/gpu.vram")
AMD_DEVICE_ID = ("amd.com/gpu.device-id", "beta.amd.com/gpu.device-id")

# The conservative default per vendor: memory (MiB) and compute capability assumed for an unidentified device.
# NVIDIA: the T4 (15360 MiB, compute 7.5), the smallest common data-centre GPU; AMD: 16 GiB (the smallest ROCm
# data-centre and workstation parts); Gaudi: 32 GB, the first Gaudi (every later one has more).
DEFAULTS: dict[str, tuple[int, tuple[int, int] | None]] = {
    "nvidia": (15360, (7, 5)),
    "amd": (16384, None),
    "habana": (dec(32), None),
}
KARPENTER_MANUFACTURERS = {"nvidia": "nvidia", "amd": "amd", "habana": "habana"}


@dataclass
class Identity:
    """What the labels say a node's accelerator is, and where each fact came from."""

    sku: Sku | None = None
    sku_source: str = ""
    product: str | None = None
    product_source: str = ""
    selector: tuple[tuple[str, str], ...] = ()
    """A node label naming this product, for the pod's nodeSelector."""
    instance: InstanceType | None = None
    instance_type: str = ""
    cloud_memory_mib: int | None = None
    notes: list[str] = field(default_factory=list)

    def found(self, sku: Sku | None, source: str, ambiguous: bool = False) -> None:
        if sku is not None and self.sku is None:
            self.sku, self.sku_source = sku, source
            if ambiguous:
                self.notes.append(f"{source} fits several SKU rows; taking {sku.id}, the one promising least")

    def named(self, product: str, source: str, selector: tuple[str, str]) -> None:
        if self.product is None:
            self.product, self.product_source, self.selector = product, source, (selector,)


def _first(labels: Mapping[str, str], keys: tuple[str, ...]) -> tuple[str, str] | None:
    return next(((k, labels[k]) for k in keys if labels.get(k)), None)


def _int(value: str | None) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def amd_vram_mib(value: str) -> int | None:
    """``amd.com/gpu.vram`` ("192G") in MiB, read as decimal GB (the smaller reading)."""
    digits = value.upper().removesuffix("B").removesuffix("G")
    return dec(int(digits)) if digits.isdigit() else None


def identify(vendor: str, labels: Mapping[str, str]) -> Identity:
    """The accelerator of a node whose device plugin advertises ``vendor``'s resource."""
    ident = Identity()
    if vendor == "nvidia" and labels.get(GFD_PRODUCT):
        raw = labels[GFD_PRODUCT]
        sku, amb = INDEX.lookup(raw, _int(labels.get(GFD_MEMORY)), "nvidia")
        ident.named(raw, f"GFD {GFD_PRODUCT}", (GFD_PRODUCT, raw))
        ident.found(sku, f"GFD {GFD_PRODUCT}={raw}", amb)
        if sku is None:
            ident.notes.append(f"{GFD_PRODUCT}={raw} is not in the SKU table")
    if vendor == "amd":
        hit = _first(labels, AMD_PRODUCT)
        vram = _first(labels, AMD_VRAM)
        if hit is not None:
            hint = amd_vram_mib(vram[1]) if vram else None
            sku, amb = INDEX.lookup(hit[1], hint, "amd")
            ident.named(hit[1], f"device label {hit[0]}", hit)
            ident.found(sku, f"device label {hit[0]}={hit[1]}", amb)
        dev = _first(labels, AMD_DEVICE_ID)
        if dev is not None and dev[1].lower() in AMD_DEVICE_IDS:
            ident.found(INDEX.by_id[AMD_DEVICE_IDS[dev[1].lower()]], f"device label {dev[0]}={dev[1]}")
    gke = labels.get(GKE_ACCELERATOR)
    if vendor == "nvidia" and gke:
        sku_id = GKE_ACCELERATORS.get(gke)
        if sku_id is not None:
            sku = INDEX.by_id[sku_id]
            ident.named(sku.names[0], f"GKE {GKE_ACCELERATOR}", (GKE_ACCELERATOR, gke))
            ident.found(sku, f"GKE {GKE_ACCELERATOR}={gke}")
        else:
            ident.notes.append(f"{GKE_ACCELERATOR}={gke} is not in the GKE accelerator table")
    itype_hit = _first(labels, INSTANCE_TYPE_LABELS)
    if itype_hit is not None:
        ident.instance_type = itype_hit[1]
        row = INSTANCE_TYPES.get(itype_hit[1].lower())
        if row is not None and INDEX.by_id[row.sku].vendor == vendor:
            ident.instance = row
    _karpenter(vendor, labels, ident)
    if ident.instance is not None and itype_hit is not None:
        sku = INDEX.by_id[ident.instance.sku]
        ident.named(sku.names[0], f"instance-type table ({itype_hit[1]})", itype_hit)
        ident.found(sku, f"instance-type table ({itype_hit[0]}={itype_hit[1]})")
    return ident


def _karpenter(vendor: str, labels: Mapping[str, str], ident: Identity) -> None:
    for key in (KARPENTER_GPU_NAME, EKS_AUTO_GPU_NAME):
        name = labels.get(key)
        maker = labels.get(KARPENTER_GPU_MANUFACTURER, vendor).lower()
        if not name or KARPENTER_MANUFACTURERS.get(maker, maker) != vendor:
            continue
        memory = _int(labels.get(KARPENTER_GPU_MEMORY))
        ident.cloud_memory_mib = ident.cloud_memory_mib or memory
        sku, amb = INDEX.lookup(name, memory, vendor)
        if sku is not None and ident.instance is not None:
            row = INDEX.by_id[ident.instance.sku]
            if row.model == sku.model:
                sku, amb = row, False  # the instance type says which variant (p5: SXM, not PCIe)
        if sku is not None:
            ident.named(sku.names[0], f"Karpenter {key}", (key, name))
            ident.found(sku, f"Karpenter {key}={name}", amb)
        else:
            ident.notes.append(f"{key}={name} is not in the SKU table")
        return
