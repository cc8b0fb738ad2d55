"""The accelerator SKU table: one row per part, each with its source. Data only (the lookup is facts/sku.py).

Sources (cited per row in ``source``):
- NVIDIA datasheets for memory, bandwidth, form factor and NVLink; compute capability from NVIDIA's CUDA GPU list
  (developer.nvidia.com/cuda-gpus); bf16 from compute capability >= 8.0, fp8 from >= 8.9 (Ada, Hopper, Blackwell);
- ``memory_mib`` is what the driver reports (nvidia-smi's total, the value GFD writes to nvidia.com/gpu.memory)
  where that figure is known: T4 15360, A10G 23028, L4 23034, A100 40960/81920, H100 81559, H200 143771,
  B200 183359, MI300X 196288 (205822885888 B), MI210 65520; every other row converts the datasheet's decimal GB
  to MiB (``dec``), which is less than the driver reports, so a fit never counts memory that is not there;
- MIG profiles and their compute/memory slices: NVIDIA MIG User Guide, "Supported MIG Profiles" (A100, A30, H100,
  H100 94GB, H200, B200); a slice's bandwidth share is its memory slices over 8 (4 on A30);
- AMD Instinct datasheets (amd.com/en/products/accelerators/instinct); MI250X/MI250 and MI210 rows are per GCD
  (the ROCm device plugin exposes each of the MI250's two GCDs as one amd.com/gpu);
- Intel Gaudi, Gaudi 2 and Gaudi 3 product briefs (habana.ai / intel.com).
"""

from __future__ import annotations

from inference_backend.facts.sku import MigProfile, Sku, SkuPerf

MIB = 2**20


def dec(gb: int) -> int:
    """Decimal GB to MiB, rounded down."""
    return gb * 10**9 // MIB


def _mig(*profiles: tuple[str, int, int]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(n, c, m) for n, c, m in profiles)


MIG_40 = _mig(
    ("1g.5gb", 1, 1), ("1g.10gb", 1, 2), ("2g.10gb", 2, 2), ("3g.20gb", 3, 4), ("4g.20gb", 4, 4), ("7g.40gb", 7, 8)
)
MIG_80 = _mig(
    ("1g.10gb", 1, 1), ("1g.20gb", 1, 2), ("2g.20gb", 2, 2), ("3g.40gb", 3, 4), ("4g.40gb", 4, 4), ("7g.80gb", 7, 8)
)
MIG_94 = _mig(
    ("1g.12gb", 1, 1), ("1g.24gb", 1, 2), ("2g.24gb", 2, 2), ("3g.47gb", 3, 4), ("4g.47gb", 4, 4), ("7g.94gb", 7, 8)
)
MIG_141 = _mig(
    ("1g.18gb", 1, 1), ("1g.35gb", 1, 2), ("2g.35gb", 2, 2), ("3g.71gb", 3, 4), ("4g.71gb", 4, 4), ("7g.141gb", 7, 8)
)
MIG_180 = _mig(
    ("1g.23gb", 1, 1), ("1g.45gb", 1, 2), ("2g.45gb", 2, 2), ("3g.90gb", 3, 4), ("4g.90gb", 4, 4), ("7g.180gb", 7, 8)
)
MIG_A30 = _mig(("1g.6gb", 1, 1), ("2g.12gb", 2, 2), ("4g.24gb", 4, 4))

_H100 = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100)"
_H200 = "NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200)"
_BW = "NVIDIA Blackwell: HGX B200 / GB200 NVL72 / HGX B300 specifications (nvidia.com/en-us/data-center/hgx)"
_A100 = "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"
_ADA = "NVIDIA L4 / L40 / L40S / RTX 6000 Ada datasheets (nvidia.com/en-us/data-center)"
_AMP = "NVIDIA A10 / A10G (AWS G5) / A30 / A40 / RTX A6000 datasheets"
_OLD = "NVIDIA T4 / V100 / P100 / P4 / K80 datasheets"
_AMD = "AMD Instinct datasheets (amd.com/en/products/accelerators/instinct)"
_GAUDI = "Intel Gaudi / Gaudi 2 / Gaudi 3 product briefs (habana.ai, intel.com)"


def _nv(
    id: str,
    model: str,
    form: str,
    gb: int,
    mib: int,
    cc: tuple[int, int],
    bw: int,
    nvlink: bool,
    names: tuple[str, ...],
    source: str,
    mig: tuple[MigProfile, ...] = (),
    slices: tuple[int, int] = (7, 8),
) -> Sku:
    return Sku(
        id,
        "nvidia",
        frozenset(model.split()),
        form,
        gb,
        mib,
        cc,
        bw,
        cc >= (8, 0),
        cc >= (8, 9),
        nvlink,
        names,
        source,
        mig,
        slices,
    )


NVIDIA: tuple[Sku, ...] = (
    _nv(
        "H100-SXM5-80GB",
        "h100",
        "sxm",
        80,
        81559,
        (9, 0),
        3350,
        True,
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 SXM5 80GB", "nvidia-h100-80gb", "nvidia-h100-mega-80gb"),
        _H100,
        MIG_80,
    ),
    _nv(
        "H100-PCIe-80GB",
        "h100",
        "pcie",
        80,
        81559,
        (9, 0),
        2000,
        False,
        ("NVIDIA-H100-PCIe", "NVIDIA H100 PCIe"),
        _H100,
        MIG_80,
    ),
    _nv(
        "H100-NVL-94GB",
        "h100",
        "nvl",
        94,
        dec(94),
        (9, 0),
        3900,
        True,
        ("NVIDIA-H100-NVL", "NVIDIA H100 NVL"),
        _H100,
        MIG_94,
    ),
    _nv(
        "H200-SXM-141GB",
        "h200",
        "sxm",
        141,
        143771,
        (9, 0),
        4800,
        True,
        ("NVIDIA-H200", "NVIDIA H200 SXM 141GB", "nvidia-h200-141gb"),
        _H200,
        MIG_141,
    ),
    _nv(
        "H200-NVL-141GB",
        "h200",
        "nvl",
        141,
        143771,
        (9, 0),
        4800,
        True,
        ("NVIDIA-H200-NVL", "NVIDIA H200 NVL"),
        _H200,
        MIG_141,
    ),
    _nv(
        "GH200-96GB",
        "gh200",
        "superchip",
        96,
        dec(96),
        (9, 0),
        4000,
        True,
        ("NVIDIA-GH200-480GB", "NVIDIA GH200 Grace Hopper Superchip"),
        "NVIDIA GH200 datasheet",
    ),
    _nv(
        "B200-180GB",
        "b200",
        "sxm",
        180,
        183359,
        (10, 0),
        8000,
        True,
        ("NVIDIA-B200", "NVIDIA B200", "nvidia-b200"),
        _BW,
        MIG_180,
    ),
    _nv(
        "GB200-186GB",
        "gb200",
        "superchip",
        186,
        dec(186),
        (10, 0),
        8000,
        True,
        ("NVIDIA-GB200", "NVIDIA GB200 Grace Blackwell Superchip", "nvidia-gb200"),
        _BW,
    ),
    _nv(
        "B300-288GB",
        "b300",
        "sxm",
        288,
        dec(270),
        (10, 3),
        8000,
        True,
        ("NVIDIA-B300-SXM6-AC", "NVIDIA B300"),
        _BW + "; 270 GB counted (GCP A4X Max lists 279 GB per GB300 GPU)",
    ),
    _nv(
        "GB300-279GB",
        "gb300",
        "superchip",
        279,
        dec(270),
        (10, 3),
        8000,
        True,
        ("NVIDIA-GB300", "NVIDIA GB300 Grace Blackwell Ultra Superchip", "nvidia-gb300"),
        _BW + "; GCP a4x-maxgpu-4g-metal: 1,116 GB over 4 GPUs",
    ),
    _nv(
        "A100-SXM4-40GB",
        "a100",
        "sxm",
        40,
        40960,
        (8, 0),
        1555,
        True,
        ("NVIDIA-A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),
        _A100,
        MIG_40,
    ),
    _nv(
        "A100-SXM4-80GB",
        "a100",
        "sxm",
        80,
        81920,
        (8, 0),
        2039,
        True,
        ("NVIDIA-A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "nvidia-a100-80gb"),
        _A100,
        MIG_80,
    ),
    _nv(
        "A100-PCIe-40GB",
        "a100",
        "pcie",
        40,
        40960,
        (8, 0),
        1555,
        False,
        ("NVIDIA-A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB"),
        _A100,
        MIG_40,
    ),
    _nv(
        "A100-PCIe-80GB",
        "a100",
        "pcie",
        80,
        81920,
        (8, 0),
        1935,
        False,
        ("NVIDIA-A100-80GB-PCIe", "NVIDIA A100 80GB PCIe"),
        _A100,
        MIG_80,
    ),
    _nv(
        "A30-24GB", "a30", "pcie", 24, dec(24), (8, 0), 933, False, ("NVIDIA-A30", "NVIDIA A30"), _AMP, MIG_A30, (4, 4)
    ),
    _nv("A10G-24GB", "a10g", "pcie", 24, 23028, (8, 6), 600, False, ("NVIDIA-A10G", "NVIDIA A10G"), _AMP),
    _nv("A10-24GB", "a10", "pcie", 24, 23028, (8, 6), 600, False, ("NVIDIA-A10", "NVIDIA A10"), _AMP),
    _nv("A40-48GB", "a40", "pcie", 48, dec(48), (8, 6), 696, False, ("NVIDIA-A40", "NVIDIA A40"), _AMP),
    _nv(
        "RTX-A6000-48GB",
        "rtx a6000",
        "pcie",
        48,
        dec(48),
        (8, 6),
        768,
        False,
        ("NVIDIA-RTX-A6000", "NVIDIA RTX A6000"),
        _AMP,
    ),
    _nv("L4-24GB", "l4", "pcie", 24, 23034, (8, 9), 300, False, ("NVIDIA-L4", "NVIDIA L4", "nvidia-l4"), _ADA),
    _nv("L40S-48GB", "l40s", "pcie", 48, dec(48), (8, 9), 864, False, ("NVIDIA-L40S", "NVIDIA L40S"), _ADA),
    _nv("L40-48GB", "l40", "pcie", 48, dec(48), (8, 9), 864, False, ("NVIDIA-L40", "NVIDIA L40"), _ADA),
    _nv(
        "RTX-6000-Ada-48GB",
        "rtx 6000 ada",
        "pcie",
        48,
        dec(48),
        (8, 9),
        960,
        False,
        ("NVIDIA-RTX-6000-Ada-Generation", "NVIDIA RTX 6000 Ada Generation"),
        _ADA,
    ),
    _nv(
        "RTX-PRO-6000-96GB",
        "rtx pro 6000",
        "pcie",
        96,
        dec(96),
        (12, 0),
        1792,
        False,
        (
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "nvidia-rtx-pro-6000",
        ),
        "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet",
    ),
    _nv("T4-16GB", "t4", "pcie", 16, 15360, (7, 5), 320, False, ("Tesla-T4", "Tesla T4", "nvidia-tesla-t4"), _OLD),
    _nv(
        "T4G-16GB",
        "t4g",
        "pcie",
        16,
        15360,
        (7, 5),
        320,
        False,
        ("NVIDIA-T4G", "NVIDIA T4G"),
        _OLD + "; T4G: the T4 on AWS G5g (Graviton)",
    ),
    _nv(
        "V100-SXM2-16GB",
        "v100",
        "sxm",
        16,
        dec(16),
        (7, 0),
        900,
        True,
        ("Tesla-V100-SXM2-16GB", "Tesla V100-SXM2-16GB"),
        _OLD,
    ),
    _nv(
        "V100-SXM2-32GB",
        "v100",
        "sxm",
        32,
        dec(32),
        (7, 0),
        900,
        True,
        ("Tesla-V100-SXM2-32GB", "Tesla V100-SXM2-32GB"),
        _OLD,
    ),
    _nv(
        "V100-PCIe-16GB",
        "v100",
        "pcie",
        16,
        dec(16),
        (7, 0),
        900,
        False,
        ("Tesla-V100-PCIE-16GB", "Tesla V100-PCIE-16GB"),
        _OLD,
    ),
    _nv(
        "V100-PCIe-32GB",
        "v100",
        "pcie",
        32,
        dec(32),
        (7, 0),
        900,
        False,
        ("Tesla-V100-PCIE-32GB", "Tesla V100-PCIE-32GB"),
        _OLD,
    ),
    _nv(
        "P100-PCIe-16GB",
        "p100",
        "pcie",
        16,
        dec(16),
        (6, 0),
        732,
        False,
        ("Tesla-P100-PCIE-16GB", "Tesla P100-PCIE-16GB", "nvidia-tesla-p100"),
        _OLD,
    ),
    _nv("P4-8GB", "p4", "pcie", 8, dec(8), (6, 1), 192, False, ("Tesla-P4", "Tesla P4", "nvidia-tesla-p4"), _OLD),
    _nv(
        "K80-12GB",
        "k80",
        "pcie",
        12,
        dec(12),
        (3, 7),
        240,
        False,
        ("Tesla-K80", "Tesla K80", "nvidia-tesla-k80"),
        _OLD + " (per GPU; a K80 board holds two)",
    ),
)


def _amd(
    id: str, model: str, gb: int, mib: int, bw: int, fp8: bool, arch: str, names: tuple[str, ...], note: str = ""
) -> Sku:
    return Sku(
        id, "amd", frozenset(model.split()), "oam", gb, mib, None, bw, True, fp8, True, names, _AMD + note, arch=arch
    )


AMD: tuple[Sku, ...] = (
    _amd(
        "MI300X-192GB",
        "mi300x",
        192,
        196288,
        5300,
        True,
        "gfx942",
        ("AMD_Instinct_MI300X_OAM", "AMD Instinct MI300X", "AMD-MI300X-192G"),
    ),
    _amd(
        "MI325X-256GB",
        "mi325x",
        256,
        dec(256),
        6000,
        True,
        "gfx942",
        ("AMD_Instinct_MI325X_OAM", "AMD Instinct MI325X", "AMD_Instinct_MI325_OAM"),
    ),
    _amd(
        "MI355X-288GB",
        "mi355x",
        288,
        dec(288),
        8000,
        True,
        "gfx950",
        ("AMD_Instinct_MI355X_OAM", "AMD Instinct MI355X"),
    ),
    _amd(
        "MI350X-288GB",
        "mi350x",
        288,
        dec(288),
        8000,
        True,
        "gfx950",
        ("AMD_Instinct_MI350X_OAM", "AMD Instinct MI350X"),
    ),
    _amd(
        "MI250X-GCD-64GB",
        "mi250x",
        64,
        65520,
        1638,
        False,
        "gfx90a",
        ("AMD_Instinct_MI250X", "AMD Instinct MI250X"),
        "; per GCD (128 GB, 3.2 TB/s per board)",
    ),
    _amd(
        "MI250-GCD-64GB",
        "mi250",
        64,
        65520,
        1638,
        False,
        "gfx90a",
        ("AMD_Instinct_MI250", "AMD Instinct MI250"),
        "; per GCD (128 GB, 3.2 TB/s per board)",
    ),
    _amd("MI210-64GB", "mi210", 64, 65520, 1638, False, "gfx90a", ("AMD_Instinct_MI210", "AMD Instinct MI210")),
)

# amd.com/gpu.device-id (PCI device id) -> row, for nodes labelled with the id but not the product name.
AMD_DEVICE_IDS = {"74a1": "MI300X-192GB", "74a5": "MI325X-256GB", "740c": "MI250X-GCD-64GB", "740f": "MI210-64GB"}

GAUDI: tuple[Sku, ...] = (
    Sku(
        "Gaudi-HL-205-32GB",
        "habana",
        frozenset({"gaudi"}),
        "oam",
        32,
        dec(32),
        None,
        1000,
        True,
        False,
        True,
        ("HL-205", "Gaudi", "gaudi-hl-205"),
        _GAUDI,
    ),
    Sku(
        "Gaudi2-HL-225-96GB",
        "habana",
        frozenset({"gaudi2"}),
        "oam",
        96,
        dec(96),
        None,
        2450,
        True,
        True,
        True,
        ("HL-225", "Gaudi2", "Gaudi 2", "HL-225H"),
        _GAUDI,
    ),
    Sku(
        "Gaudi3-HL-325-128GB",
        "habana",
        frozenset({"gaudi3"}),
        "oam",
        128,
        dec(128),
        None,
        3700,
        True,
        True,
        True,
        ("HL-325", "Gaudi3", "Gaudi 3", "HL-325L"),
        _GAUDI,
    ),
)

SKUS: tuple[Sku, ...] = NVIDIA + AMD + GAUDI


# ---- Performance columns (selection/workload.py): dense TFLOPS per dtype and the device link, per row id. ----
# Dense figures are the datasheets' sparse figures halved where only those are printed. Link: NVLink per GPU one
# direction (H100/H200 900 GB/s bidirectional: 450; A100 600: 300; B200/GB200 1.8 TB/s: 900; H100 NVL bridge
# 600: 300), PCIe x16 one direction (Gen3 16, Gen4 32, Gen5 64 GB/s), AMD Infinity Fabric (MI300X/MI325X 7 links x
# 64 GB/s = 448; MI355X/MI350X 7 x 76.8 = 538), Gaudi's on-chip RoCE (Gaudi 2: 24 x 100 GbE = 300 GB/s; Gaudi 3:
# 24 x 200 GbE = 600 GB/s). Cross-checked with aiconfigurator 0.12.0's system files (aiconfigurator_core/systems/
# <system>.yaml: bfloat16/fp8/int8_tc_flops, intra_node_bw) for every part it models.
_AIC = "; aiconfigurator 0.12.0 systems/{}.yaml agrees"
_MI300 = "AMD Instinct MI300X / MI325X datasheets: 1307.4 TFLOPS bf16, 2614.9 fp8/int8 dense; Infinity Fabric 896 GB/s"
_MI350 = "AMD Instinct MI350 series datasheet: MI355X 2.5 PF fp16, 5.0 PF fp8 dense (MI350X 2.3 / 4.6)"


_A10G_RATE = " (AWS publishes no A10G tensor rate: the A10's is taken)"
_G5_ALLREDUCE_GBS = 4.0
_G5 = (
    "; link: AWS G5 instances give their A10Gs no peer-to-peer access (TensorRT-LLM issue #1487 on g5.12xlarge: 'peer"
    " access is not available'), so NCCL's all-reduce runs through host shared memory, two PCIe crossings a hop and"
    " the host's memory shared by every GPU: 4 GB/s is the effective bus bandwidth fitted to the non-held-out 4x and"
    " 8x A10G rows of tests/data/perf-calibration (vLLM and TGI; clipped mean |log2| 0.50 at the slot's 32 GB/s, 0.29"
    " at 4), and the held-out ones agree (0.80 -> 0.33)"
)
"""What a tensor-parallel all-reduce gets across AWS G5's A10Gs, GB/s (the slot's PCIe gen4 x16 would be 32)."""


def _p(tf16: float, fp8: float | None, int8: float | None, link: float, source: str) -> SkuPerf:
    return SkuPerf(tf16, fp8, int8, link, source)


PERF: dict[str, SkuPerf] = {
    "H100-SXM5-80GB": _p(989, 1979, 1979, 450, _H100 + _AIC.format("h100_sxm")),
    "H100-PCIe-80GB": _p(756, 1513, 1513, 64, _H100 + _AIC.format("h100_pcie")),
    "H100-NVL-94GB": _p(835, 1671, 1671, 300, _H100 + " (H100 NVL: 3,341 TFLOPS fp8 sparse; NVLink bridge 600 GB/s)"),
    "H200-SXM-141GB": _p(989, 1979, 1979, 450, _H200 + _AIC.format("h200_sxm")),
    "H200-NVL-141GB": _p(835, 1671, 1671, 450, _H200 + " (H200 NVL: 1,671 TFLOPS bf16 sparse; 900 GB/s bridge)"),
    "GH200-96GB": _p(989, 1979, 1979, 450, "NVIDIA GH200 datasheet (the H100 SXM's tensor cores)"),
    "B200-180GB": _p(2250, 4500, 4500, 900, _BW + _AIC.format("b200_sxm")),
    "GB200-186GB": _p(2500, 5000, 5000, 900, _BW + _AIC.format("gb200")),
    "B300-288GB": _p(
        2250, 4500, 153.5, 900, _BW + " (Blackwell Ultra cut int8 to 307 TOPS sparse)" + _AIC.format("b300_sxm")
    ),
    "GB300-279GB": _p(2500, 5000, 165, 900, _BW + _AIC.format("gb300")),
    "A100-SXM4-40GB": _p(312, None, 624, 300, _A100 + _AIC.format("a100_sxm")),
    "A100-SXM4-80GB": _p(312, None, 624, 300, _A100 + _AIC.format("a100_sxm")),
    "A100-PCIe-40GB": _p(312, None, 624, 32, _A100 + _AIC.format("a100_pcie")),
    "A100-PCIe-80GB": _p(312, None, 624, 32, _A100 + _AIC.format("a100_pcie")),
    "A30-24GB": _p(165, None, 330, 32, _AMP + _AIC.format("a30")),
    "A10G-24GB": _p(125, None, 250, _G5_ALLREDUCE_GBS, _AMP + _A10G_RATE + _G5),
    "A10-24GB": _p(125, None, 250, 32, _AMP),
    "A40-48GB": _p(149.7, None, 299.3, 32, _AMP),
    "RTX-A6000-48GB": _p(154.8, None, 309.7, 32, _AMP),
    "L4-24GB": _p(121, 242, 242, 32, _ADA + _AIC.format("l4")),
    "L40S-48GB": _p(362, 733, 733, 32, _ADA + _AIC.format("l40s")),
    "L40-48GB": _p(181, 362, 362, 32, _ADA),
    "RTX-6000-Ada-48GB": _p(364, 728, 728, 32, _ADA),
    "RTX-PRO-6000-96GB": _p(
        467.8,
        935.6,
        935.6,
        64,
        "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet, "
        "dense at 2430 MHz" + _AIC.format("rtx_pro_6000_server"),
    ),
    "T4-16GB": _p(65, None, 130, 16, _OLD + " (fp16 tensor; no bf16)"),
    "T4G-16GB": _p(65, None, 130, 16, _OLD + " (fp16 tensor; no bf16)"),
    "V100-SXM2-16GB": _p(125, None, None, 150, _OLD + " (fp16 tensor; NVLink 2: 300 GB/s)"),
    "V100-SXM2-32GB": _p(125, None, None, 150, _OLD + " (fp16 tensor; NVLink 2: 300 GB/s)"),
    "V100-PCIe-16GB": _p(112, None, None, 16, _OLD + " (fp16 tensor)"),
    "V100-PCIe-32GB": _p(112, None, None, 16, _OLD + " (fp16 tensor)"),
    "P100-PCIe-16GB": _p(18.7, None, None, 16, _OLD + " (fp16, no tensor cores)"),
    "P4-8GB": _p(5.5, None, 22, 16, _OLD + " (fp32 rate; no fast fp16)"),
    "K80-12GB": _p(4.4, None, None, 8, _OLD + " (fp32 per GPU)"),
    "MI300X-192GB": _p(1307.4, 2614.9, 2614.9, 448, _MI300),
    "MI325X-256GB": _p(1307.4, 2614.9, 2614.9, 448, _MI300),
    "MI355X-288GB": _p(2516, 5033, 5033, 538, _MI350),
    "MI350X-288GB": _p(2307, 4614, 4614, 538, _MI350),
    "MI250X-GCD-64GB": _p(191.5, None, 191.5, 100, _AMD + " (383 TFLOPS bf16 per board, per GCD half)"),
    "MI250-GCD-64GB": _p(181, None, 181, 100, _AMD + " (362 TFLOPS bf16 per board, per GCD half)"),
    "MI210-64GB": _p(181, None, 181, 50, _AMD),
    "Gaudi2-HL-225-96GB": _p(432, 865, None, 300, _GAUDI + " (MME bf16 432, fp8 865 TFLOPS)"),
    "Gaudi3-HL-325-128GB": _p(1835, 1835, None, 600, _GAUDI + " (MME bf16 and fp8 1835 TFLOPS)"),
}
"""Rows without an entry (the first Gaudi) have no published dense rate: the workload model says so and rates
their compute from bandwidth (selection/workload.py)."""
