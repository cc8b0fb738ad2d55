"""Cloud tables: instance and machine types to accelerator SKU, count and host CPU/memory; GKE's accelerator label.

Data only, each table with its source. Keys are matched case-insensitively (AKS writes ``Standard_NC24ads_A100_v4``).
Host memory is as the provider lists it (AWS: GiB; GCP: GB as Compute Engine writes it; Azure: GiB).

Sources:
- AWS: EC2 accelerated computing instance types (aws.amazon.com/ec2/instance-types, "Accelerated Computing":
  P6, P5/P5e/P5en, P4d/P4de, P3/P3dn, G6e, G6, Gr6, G5, G5g, G4dn, DL1);
- GCP: Compute Engine GPU machine types (cloud.google.com/compute/docs/gpus and docs.cloud.google.com/
  ai-hypercomputer/docs/gpu: A4X Max, A4X, A4, A3 Ultra/Mega/High/Edge, A2 Standard/Ultra, G2, G4); GKE's
  ``cloud.google.com/gke-accelerator`` values from "About GPUs in GKE" (cloud.google.com/kubernetes-engine/docs/
  concepts/gpus) and the gcloud ``--accelerator type=`` list;
- Azure: virtual machine sizes, GPU accelerated (learn.microsoft.com/azure/virtual-machines/sizes: NC A100 v4,
  NCads H100 v5, NCasT4_v3, NCv3, ND A100 v4, ND H100 v5, ND H200 v5, ND MI300X v5, NDv2, NVadsA10 v5).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    sku: str
    """Row id in facts/sku_table.py."""
    count: int
    """Accelerators the instance has (what the device plugin will advertise)."""
    vcpus: int
    memory_gb: int
    """Host memory as the provider lists it."""
    source: str
    gpu_memory_gib: float | None = None
    """Memory of each advertised GPU when it is a fraction of the SKU (Azure NVadsA10 v5 partitions)."""


_AWS = "AWS EC2 instance types (Accelerated Computing)"
_GCP = "Compute Engine GPU machine types"
_AZ = "Azure VM sizes (GPU accelerated)"


def _rows(source: str, sku: str, rows: dict[str, tuple[int, int, int]]) -> dict[str, InstanceType]:
    return {k.lower(): InstanceType(sku, c, v, m, source) for k, (c, v, m) in rows.items()}


def _sizes(family: str, sizes: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, int, int]]:
    return {f"{family}.{s}": v for s, v in sizes.items()}


# (GPUs, vCPUs, GiB) of the G5/G6 layout (1 GPU up to 16xlarge, 4 at 12x/24x, 8 at 48x).
_G_LAYOUT = {
    "xlarge": (1, 4, 16),
    "2xlarge": (1, 8, 32),
    "4xlarge": (1, 16, 64),
    "8xlarge": (1, 32, 128),
    "16xlarge": (1, 64, 256),
    "12xlarge": (4, 48, 192),
    "24xlarge": (4, 96, 384),
    "48xlarge": (8, 192, 768),
}
_G6E = {
    "xlarge": (1, 4, 32),
    "2xlarge": (1, 8, 64),
    "4xlarge": (1, 16, 128),
    "8xlarge": (1, 32, 256),
    "16xlarge": (1, 64, 512),
    "12xlarge": (4, 48, 384),
    "24xlarge": (4, 96, 768),
    "48xlarge": (8, 192, 1536),
}
_G4DN = {
    "xlarge": (1, 4, 16),
    "2xlarge": (1, 8, 32),
    "4xlarge": (1, 16, 64),
    "8xlarge": (1, 32, 128),
    "16xlarge": (1, 64, 256),
    "12xlarge": (4, 48, 192),
    "metal": (8, 96, 384),
}
_G5G = {
    "xlarge": (1, 4, 8),
    "2xlarge": (1, 8, 16),
    "4xlarge": (1, 16, 32),
    "8xlarge": (1, 32, 64),
    "16xlarge": (2, 64, 128),
    "metal": (2, 64, 128),
}

AWS: dict[str, InstanceType] = {
    **_rows(_AWS, "B200-180GB", {"p6-b200.48xlarge": (8, 192, 2048)}),
    **_rows(_AWS, "H200-SXM-141GB", {"p5e.48xlarge": (8, 192, 2048), "p5en.48xlarge": (8, 192, 2048)}),
    **_rows(_AWS, "H100-SXM5-80GB", {"p5.48xlarge": (8, 192, 2048), "p5.4xlarge": (1, 16, 256)}),
    **_rows(_AWS, "A100-SXM4-80GB", {"p4de.24xlarge": (8, 96, 1152)}),
    **_rows(_AWS, "A100-SXM4-40GB", {"p4d.24xlarge": (8, 96, 1152)}),
    **_rows(
        _AWS, "V100-SXM2-16GB", {"p3.2xlarge": (1, 8, 61), "p3.8xlarge": (4, 32, 244), "p3.16xlarge": (8, 64, 488)}
    ),
    **_rows(_AWS, "V100-SXM2-32GB", {"p3dn.24xlarge": (8, 96, 768)}),
    **_rows(_AWS, "L40S-48GB", _sizes("g6e", _G6E)),
    **_rows(_AWS, "L4-24GB", {**_sizes("g6", _G_LAYOUT), "gr6.4xlarge": (1, 16, 128), "gr6.8xlarge": (1, 32, 256)}),
    **_rows(_AWS, "A10G-24GB", _sizes("g5", _G_LAYOUT)),
    **_rows(_AWS, "T4G-16GB", _sizes("g5g", _G5G)),
    **_rows(_AWS, "T4-16GB", _sizes("g4dn", _G4DN)),
    **_rows(_AWS, "Gaudi-HL-205-32GB", {"dl1.24xlarge": (8, 96, 768)}),
}

GCP: dict[str, InstanceType] = {
    **_rows(_GCP, "GB300-279GB", {"a4x-maxgpu-4g-metal": (4, 144, 960)}),
    **_rows(_GCP, "GB200-186GB", {"a4x-highgpu-4g": (4, 140, 884)}),
    **_rows(_GCP, "B200-180GB", {"a4-highgpu-8g": (8, 224, 3968)}),
    **_rows(_GCP, "H200-SXM-141GB", {"a3-ultragpu-8g": (8, 224, 2952)}),
    **_rows(
        _GCP,
        "H100-SXM5-80GB",
        {
            "a3-megagpu-8g": (8, 208, 1872),
            "a3-highgpu-8g": (8, 208, 1872),
            "a3-highgpu-4g": (4, 104, 936),
            "a3-highgpu-2g": (2, 52, 468),
            "a3-highgpu-1g": (1, 26, 234),
            "a3-edgegpu-8g": (8, 208, 1872),
        },
    ),
    **_rows(
        _GCP,
        "A100-SXM4-80GB",
        {
            "a2-ultragpu-1g": (1, 12, 170),
            "a2-ultragpu-2g": (2, 24, 340),
            "a2-ultragpu-4g": (4, 48, 680),
            "a2-ultragpu-8g": (8, 96, 1360),
        },
    ),
    **_rows(
        _GCP,
        "A100-SXM4-40GB",
        {
            "a2-highgpu-1g": (1, 12, 85),
            "a2-highgpu-2g": (2, 24, 170),
            "a2-highgpu-4g": (4, 48, 340),
            "a2-highgpu-8g": (8, 96, 680),
            "a2-megagpu-16g": (16, 96, 1360),
        },
    ),
    **_rows(
        _GCP,
        "L4-24GB",
        {
            "g2-standard-4": (1, 4, 16),
            "g2-standard-8": (1, 8, 32),
            "g2-standard-12": (1, 12, 48),
            "g2-standard-16": (1, 16, 64),
            "g2-standard-24": (2, 24, 96),
            "g2-standard-32": (1, 32, 128),
            "g2-standard-48": (4, 48, 192),
            "g2-standard-96": (8, 96, 384),
        },
    ),
    **_rows(
        _GCP,
        "RTX-PRO-6000-96GB",
        {
            "g4-standard-48": (1, 48, 180),
            "g4-standard-96": (2, 96, 360),
            "g4-standard-192": (4, 192, 720),
            "g4-standard-384": (8, 384, 1440),
        },
    ),
}

AZURE: dict[str, InstanceType] = {
    **_rows(_AZ, "H200-SXM-141GB", {"Standard_ND96isr_H200_v5": (8, 96, 1850)}),
    **_rows(_AZ, "H100-SXM5-80GB", {"Standard_ND96isr_H100_v5": (8, 96, 1900)}),
    **_rows(
        _AZ, "H100-NVL-94GB", {"Standard_NC40ads_H100_v5": (1, 40, 320), "Standard_NC80adis_H100_v5": (2, 80, 640)}
    ),
    **_rows(_AZ, "A100-SXM4-80GB", {"Standard_ND96amsr_A100_v4": (8, 96, 1900)}),
    **_rows(_AZ, "A100-SXM4-40GB", {"Standard_ND96asr_v4": (8, 96, 900)}),
    **_rows(
        _AZ,
        "A100-PCIe-80GB",
        {
            "Standard_NC24ads_A100_v4": (1, 24, 220),
            "Standard_NC48ads_A100_v4": (2, 48, 440),
            "Standard_NC96ads_A100_v4": (4, 96, 880),
        },
    ),
    **_rows(_AZ, "MI300X-192GB", {"Standard_ND96is_MI300X_v5": (8, 96, 1850)}),
    **_rows(_AZ, "V100-SXM2-32GB", {"Standard_ND40rs_v2": (8, 40, 672)}),
    **_rows(
        _AZ,
        "V100-PCIe-16GB",
        {
            "Standard_NC6s_v3": (1, 6, 112),
            "Standard_NC12s_v3": (2, 12, 224),
            "Standard_NC24s_v3": (4, 24, 448),
            "Standard_NC24rs_v3": (4, 24, 448),
        },
    ),
    **_rows(
        _AZ,
        "T4-16GB",
        {
            "Standard_NC4as_T4_v3": (1, 4, 28),
            "Standard_NC8as_T4_v3": (1, 8, 56),
            "Standard_NC16as_T4_v3": (1, 16, 110),
            "Standard_NC64as_T4_v3": (4, 64, 440),
        },
    ),
    **_rows(
        _AZ,
        "A10-24GB",
        {
            "Standard_NV36ads_A10_v5": (1, 36, 440),
            "Standard_NV36adms_A10_v5": (1, 36, 880),
            "Standard_NV72ads_A10_v5": (2, 72, 880),
        },
    ),
    # NVadsA10 v5 partitions: the VM sees one GPU holding 1/6, 1/3 or 1/2 of an A10's 24 GB.
    "standard_nv6ads_a10_v5": InstanceType("A10-24GB", 1, 6, 55, _AZ, 4),
    "standard_nv12ads_a10_v5": InstanceType("A10-24GB", 1, 12, 110, _AZ, 8),
    "standard_nv18ads_a10_v5": InstanceType("A10-24GB", 1, 18, 220, _AZ, 12),
}

INSTANCE_TYPES: dict[str, InstanceType] = {**AWS, **GCP, **AZURE}

# cloud.google.com/gke-accelerator -> SKU row. Every value GKE documents (the -vws ones are the same GPUs with a
# virtual-workstation licence).
GKE_ACCELERATORS: dict[str, str] = {
    "nvidia-gb300": "GB300-279GB",
    "nvidia-gb200": "GB200-186GB",
    "nvidia-b200": "B200-180GB",
    "nvidia-h200-141gb": "H200-SXM-141GB",
    "nvidia-h100-mega-80gb": "H100-SXM5-80GB",
    "nvidia-h100-80gb": "H100-SXM5-80GB",
    "nvidia-a100-80gb": "A100-SXM4-80GB",
    "nvidia-tesla-a100": "A100-SXM4-40GB",
    "nvidia-rtx-pro-6000": "RTX-PRO-6000-96GB",
    "nvidia-l4": "L4-24GB",
    "nvidia-l4-vws": "L4-24GB",
    "nvidia-tesla-t4": "T4-16GB",
    "nvidia-tesla-t4-vws": "T4-16GB",
    "nvidia-tesla-v100": "V100-SXM2-16GB",
    "nvidia-tesla-p100": "P100-PCIe-16GB",
    "nvidia-tesla-p100-vws": "P100-PCIe-16GB",
    "nvidia-tesla-p4": "P4-8GB",
    "nvidia-tesla-p4-vws": "P4-8GB",
    "nvidia-tesla-k80": "K80-12GB",
}
