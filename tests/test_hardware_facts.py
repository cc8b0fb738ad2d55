"""Hardware facts from every source (GFD, device labels, cloud labels, instance types, defaults), table-driven; the
test ids carry the source and the figure each case expects."""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import node
from ib_testkit.gfd import amd_node, gaudi_node, gke_node, instance_node
from inference_backend.facts import INDEX, hardware_class
from inference_backend.facts.clouds import GKE_ACCELERATORS, INSTANCE_TYPES
from inference_backend.facts.sku_table import SKUS, dec
from inference_backend.facts.tokens import tokens


def only(labels: dict[str, str], count: int = 1, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    n = instance_node("n", "none", count, resource, labels)
    del n["metadata"]["labels"]["node.kubernetes.io/instance-type"]
    return n


# (id: source and expected figures, node, product, memory MiB, compute, sku, source named in the notes)
FACTS = [
    (
        "gfd-product-only-h100-81559MiB-compute-9.0-from-sku-table",
        only({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, 8),
        "NVIDIA-H100-80GB-HBM3",
        81559,
        (9, 0),
        "H100-SXM5-80GB",
        "the SKU table",
    ),
    (
        "gfd-product-only-l4-23034MiB-8.9",
        only({"nvidia.com/gpu.product": "NVIDIA-L4"}),
        "NVIDIA-L4",
        23034,
        (8, 9),
        "L4-24GB",
        "the SKU table (L4-24GB)",
    ),
    (
        "gfd-product-only-a10g-23028MiB-8.6-not-a10",
        only({"nvidia.com/gpu.product": "NVIDIA-A10G"}),
        "NVIDIA-A10G",
        23028,
        (8, 6),
        "A10G-24GB",
        "the SKU table (A10G-24GB)",
    ),
    (
        "gfd-product-only-t4-15360MiB-7.5",
        only({"nvidia.com/gpu.product": "Tesla-T4"}),
        "Tesla-T4",
        15360,
        (7, 5),
        "T4-16GB",
        "the SKU table",
    ),
    (
        "gfd-product-only-v100-16GB-decimal-15258MiB-7.0",
        only({"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"}),
        "Tesla-V100-SXM2-16GB",
        dec(16),
        (7, 0),
        "V100-SXM2-16GB",
        "the SKU table",
    ),
    (
        "gfd-memory-label-beats-table-h100-80000",
        only({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "80000"}),
        "NVIDIA-H100-80GB-HBM3",
        80000,
        (9, 0),
        "H100-SXM5-80GB",
        "GFD nvidia.com/gpu.memory",
    ),
    (
        "gfd-product-beats-gke-label",
        only({"nvidia.com/gpu.product": "NVIDIA-L4", "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}),
        "NVIDIA-L4",
        23034,
        (8, 9),
        "L4-24GB",
        "GFD",
    ),
    (
        "gke-nvidia-tesla-t4-15360MiB",
        only({"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}),
        "Tesla-T4",
        15360,
        (7, 5),
        "T4-16GB",
        "GKE cloud.google.com/gke-accelerator",
    ),
    (
        "gke-nvidia-h100-80gb-81559MiB-9.0",
        only({"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, 8),
        "NVIDIA-H100-80GB-HBM3",
        81559,
        (9, 0),
        "H100-SXM5-80GB",
        "GKE",
    ),
    (
        "gke-nvidia-h100-mega-80gb-is-h100-sxm",
        only({"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}, 8),
        "NVIDIA-H100-80GB-HBM3",
        81559,
        (9, 0),
        "H100-SXM5-80GB",
        "GKE",
    ),
    (
        "gke-nvidia-a100-80gb-81920MiB-8.0",
        only({"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}),
        "NVIDIA-A100-SXM4-80GB",
        81920,
        (8, 0),
        "A100-SXM4-80GB",
        "GKE",
    ),
    (
        "gke-nvidia-l4-23034MiB",
        only({"cloud.google.com/gke-accelerator": "nvidia-l4"}),
        "NVIDIA-L4",
        23034,
        (8, 9),
        "L4-24GB",
        "GKE",
    ),
    (
        "karpenter-a100-81920MiB-picks-80GB-no-instance-type-so-pcie-the-least-promising",
        only({"karpenter.k8s.aws/instance-gpu-name": "a100", "karpenter.k8s.aws/instance-gpu-memory": "81920"}, 8),
        "NVIDIA-A100-80GB-PCIe",
        81920,
        (8, 0),
        "A100-PCIe-80GB",
        "fits several SKU rows",
    ),
    (
        "karpenter-a100-40960MiB-on-p4d-is-sxm4-40GB",
        instance_node(
            "n",
            "p4d.24xlarge",
            8,
            extra={"karpenter.k8s.aws/instance-gpu-name": "a100", "karpenter.k8s.aws/instance-gpu-memory": "40960"},
        ),
        "NVIDIA-A100-SXM4-40GB",
        40960,
        (8, 0),
        "A100-SXM4-40GB",
        "Karpenter",
    ),
    (
        "karpenter-a100-81920MiB-on-p4de-is-sxm4-80GB",
        instance_node(
            "n",
            "p4de.24xlarge",
            8,
            extra={"karpenter.k8s.aws/instance-gpu-name": "a100", "karpenter.k8s.aws/instance-gpu-memory": "81920"},
        ),
        "NVIDIA-A100-SXM4-80GB",
        81920,
        (8, 0),
        "A100-SXM4-80GB",
        "Karpenter",
    ),
    (
        "karpenter-t4-ec2-16384MiB-driver-15360MiB-from-table",
        only({"karpenter.k8s.aws/instance-gpu-name": "t4", "karpenter.k8s.aws/instance-gpu-memory": "16384"}),
        "Tesla-T4",
        15360,
        (7, 5),
        "T4-16GB",
        "the SKU table",
    ),
    (
        "karpenter-h100-refined-by-p5-instance-type-to-sxm",
        instance_node(
            "n",
            "p5.48xlarge",
            8,
            extra={"karpenter.k8s.aws/instance-gpu-name": "h100", "karpenter.k8s.aws/instance-gpu-memory": "81920"},
        ),
        "NVIDIA-H100-80GB-HBM3",
        81559,
        (9, 0),
        "H100-SXM5-80GB",
        "Karpenter",
    ),
    (
        "instance-type-p5.48xlarge-8x-h100-81559MiB",
        instance_node("n", "p5.48xlarge", 8),
        "NVIDIA-H100-80GB-HBM3",
        81559,
        (9, 0),
        "H100-SXM5-80GB",
        "instance-type table (p5.48xlarge)",
    ),
    (
        "instance-type-g5.xlarge-a10g",
        instance_node("n", "g5.xlarge", 1),
        "NVIDIA-A10G",
        23028,
        (8, 6),
        "A10G-24GB",
        "instance-type table",
    ),
    (
        "instance-type-g6.xlarge-l4",
        instance_node("n", "g6.xlarge", 1),
        "NVIDIA-L4",
        23034,
        (8, 9),
        "L4-24GB",
        "instance-type table",
    ),
    (
        "instance-type-azure-NC24ads_A100_v4-a100-pcie-80gb",
        instance_node("n", "Standard_NC24ads_A100_v4", 1),
        "NVIDIA-A100-80GB-PCIe",
        81920,
        (8, 0),
        "A100-PCIe-80GB",
        "instance-type table",
    ),
    (
        "instance-type-azure-NV12ads_A10_v5-third-of-a10-8192MiB",
        instance_node("n", "Standard_NV12ads_A10_v5", 1),
        "NVIDIA-A10",
        8192,
        (8, 6),
        "A10-24GB",
        "a partition of the GPU",
    ),
    (
        "instance-type-gcp-a3-highgpu-8g-h100",
        instance_node("n", "a3-highgpu-8g", 8),
        "NVIDIA-H100-80GB-HBM3",
        81559,
        (9, 0),
        "H100-SXM5-80GB",
        "instance-type table",
    ),
    (
        "instance-type-gcp-g2-standard-4-l4",
        instance_node("n", "g2-standard-4", 1),
        "NVIDIA-L4",
        23034,
        (8, 9),
        "L4-24GB",
        "instance-type table",
    ),
    ("default-no-labels-15360MiB-7.5-assumed", only({}), "unknown", 15360, (7, 5), "", "conservative"),
    (
        "amd-product-and-vram-192G-decimal-183105MiB",
        amd_node("n", 8, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "amd.com/gpu.vram": "192G"}),
        "AMD_Instinct_MI300X_OAM",
        dec(192),
        None,
        "MI300X-192GB",
        "device label amd.com/gpu.vram",
    ),
    (
        "amd-product-only-mi300x-196288MiB-from-table",
        amd_node("n", 8, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
        "AMD_Instinct_MI300X_OAM",
        196288,
        None,
        "MI300X-192GB",
        "the SKU table",
    ),
    (
        "amd-device-id-74a1-is-mi300x",
        amd_node("n", 8, {"amd.com/gpu.device-id": "74a1"}),
        "unknown",
        196288,
        None,
        "MI300X-192GB",
        "the SKU table",
    ),
    (
        "amd-azure-ND96is_MI300X_v5",
        amd_node("n", 8, {"node.kubernetes.io/instance-type": "Standard_ND96is_MI300X_v5"}),
        "AMD_Instinct_MI300X_OAM",
        196288,
        None,
        "MI300X-192GB",
        "instance-type table",
    ),
    ("amd-unlabelled-16384MiB-assumed", amd_node("n", 2), "unknown", 16384, None, "", "conservative"),
    (
        "gaudi-dl1.24xlarge-hl-205-32GB",
        gaudi_node("n", 8, {"node.kubernetes.io/instance-type": "dl1.24xlarge"}),
        "HL-205",
        dec(32),
        None,
        "Gaudi-HL-205-32GB",
        "instance-type table",
    ),
    (
        "gaudi-karpenter-gaudi-hl-205",
        gaudi_node(
            "n",
            8,
            {
                "karpenter.k8s.aws/instance-gpu-name": "gaudi-hl-205",
                "karpenter.k8s.aws/instance-gpu-manufacturer": "habana",
            },
        ),
        "HL-205",
        dec(32),
        None,
        "Gaudi-HL-205-32GB",
        "Karpenter",
    ),
]


@pytest.mark.parametrize(
    ("node_", "product", "memory", "compute", "sku", "source"), [c[1:] for c in FACTS], ids=[c[0] for c in FACTS]
)
def test_facts_from_each_source(
    node_: dict[str, Any], product: str, memory: int, compute: tuple[int, int] | None, sku: str, source: str
) -> None:
    _, cls = hardware_class(node_)
    (gpu,) = cls.gpus
    assert (gpu.product, gpu.memory_mib, gpu.compute, gpu.sku) == (product, memory, compute, sku), cls.notes
    assert any(source in n for n in cls.notes), cls.notes
    assert gpu.labelled == (sku != "" and product != "unknown")


TOKENS = [
    ("A10-is-not-A10G", "NVIDIA-A10", "A10-24GB"),
    ("A10G-is-not-A10", "NVIDIA A10G", "A10G-24GB"),
    ("L40-is-not-L40S", "NVIDIA-L40", "L40-48GB"),
    ("L40S-is-not-L40", "nvidia-l40s", "L40S-48GB"),
    ("GH200-is-not-H100-or-H200", "NVIDIA-GH200-480GB", "GH200-96GB"),
    ("h100-pcie-lowercase-with-spaces", "h100 pcie", "H100-PCIe-80GB"),
    ("h100-nvl", "NVIDIA-H100-NVL", "H100-NVL-94GB"),
    ("mig-single-product-suffix-stripped", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-SXM4-40GB"),
    ("time-sliced-SHARED-suffix-stripped", "NVIDIA-A100-SXM4-40GB-SHARED", "A100-SXM4-40GB"),
    ("amd-192G-memory-token", "AMD-MI300X-192G", "MI300X-192GB"),
    ("marketing-name-h200-sxm", "NVIDIA H200 SXM 141GB", "H200-SXM-141GB"),
    ("rtx-pro-6000-is-not-rtx-6000-ada", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "RTX-PRO-6000-96GB"),
    ("rtx-6000-ada", "NVIDIA-RTX-6000-Ada-Generation", "RTX-6000-Ada-48GB"),
    ("bare-h100-ambiguous-conservative-pcie", "H100", "H100-PCIe-80GB"),
]


@pytest.mark.parametrize(("name", "sku"), [c[1:] for c in TOKENS], ids=[c[0] for c in TOKENS])
def test_names_match_by_canonical_tokens(name: str, sku: str) -> None:
    found, _ = INDEX.lookup(name)
    assert found is not None and found.id == sku


def test_unknown_names_match_nothing() -> None:
    for name in ("NVIDIA-X9000", "", "Tesla", "A1000"):
        assert INDEX.lookup(name)[0] is None, name


def test_every_row_has_a_source_and_never_counts_more_than_its_datasheet() -> None:
    """memory_mib <= datasheet GB x 1024 (the driver never reports more than the GiB reading of the datasheet)."""
    for s in SKUS:
        assert s.source and s.names and s.model <= tokens(s.names[0]) | s.model, s.id
        assert 0 < s.memory_mib <= s.memory_gb * 1024, s.id
        assert s.bandwidth_gbs > 0 and (s.vendor != "nvidia" or s.compute is not None), s.id
        for p in s.mig:
            assert p.compute_slices <= s.mig_slices[0] and p.memory_slices <= s.mig_slices[1], (s.id, p)
            assert int(p.name.rsplit(".", 1)[1].removesuffix("gb")) <= s.memory_gb, (s.id, p)
    assert len({s.id for s in SKUS}) == len(SKUS)


def test_cloud_tables_name_existing_rows() -> None:
    for key, row in INSTANCE_TYPES.items():
        assert row.sku in INDEX.by_id and row.count > 0 and row.vcpus > 0 and key == key.lower(), key
    assert set(GKE_ACCELERATORS.values()) <= set(INDEX.by_id)
    for value in (
        "nvidia-tesla-t4",
        "nvidia-l4",
        "nvidia-h100-80gb",
        "nvidia-h100-mega-80gb",
        "nvidia-a100-80gb",
        "nvidia-tesla-a100",
        "nvidia-h200-141gb",
        "nvidia-b200",
    ):
        assert value in GKE_ACCELERATORS


def test_gke_mig_partition_1g_5gb_takes_one_seventh_compute_one_eighth_of_1555GBps() -> None:
    _, cls = hardware_class(gke_node("g", "nvidia-tesla-a100", 7, "a2-highgpu-1g", partition="1g.5gb"))
    (gpu,) = cls.gpus
    assert gpu.mig and gpu.count == 7 and gpu.memory_mib == 5 * 1024 and gpu.product.endswith("-MIG-1g.5gb")
    assert gpu.bandwidth_gbs == pytest.approx(1555 / 8)
    assert any("0.14 of the compute and 0.12 of the bandwidth from MIG profile table" in n for n in cls.notes)


def test_mig_mixed_3g_40gb_on_a100_80gb_takes_half_of_2039GBps() -> None:
    _, cls = hardware_class(node("m", "a100-40", 1, mig="mixed"))
    (gpu,) = cls.gpus  # the factory labels an A100 40GB product with a 3g.40gb profile: not in its MIG table
    assert gpu.resource == "nvidia.com/mig-3g.40gb" and gpu.memory_mib == 40192
    assert any("from the profile name" in n for n in cls.notes)


def test_mig_slice_is_slower_than_the_whole_gpu() -> None:
    whole = hardware_class(node("w", "a100-40", 1))[1].gpus[0]
    _, cls = hardware_class(gke_node("g", "nvidia-tesla-a100", 7, "a2-highgpu-1g", partition="1g.5gb"))
    assert cls.gpus[0].speed == pytest.approx(whole.speed / 8)


def test_the_docs_sku_and_cloud_tables_are_made_from_the_data() -> None:
    from ib_testkit import ROOT
    from inference_backend.facts.table import markdown

    doc = (ROOT / "docs" / "selection.md").read_text()
    between = doc.split("<!-- sku-table:start -->\n")[1].split("\n<!-- sku-table:end -->")[0]
    assert between == markdown(), "docs/selection.md's SKU tables are stale: python -m inference_backend.facts.table"
