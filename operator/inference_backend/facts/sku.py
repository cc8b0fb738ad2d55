"""What an accelerator is: the SKU row and its MIG profiles, and the lookup from any spelling of its name.

The rows themselves are data (``facts/sku_table.py``), each with its source. Lookup is by canonical tokens
(``facts/tokens.py``): a name matches a row when it carries all of the row's model tokens; among several rows the
memory size and form factor spelled in the name decide, and what stays ambiguous is resolved to the row with the
least memory and bandwidth (conservative), which the caller reports. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inference_backend.facts.tokens import memory_gb, tokens

MIB = 2**20
# Tokens that say which form factor a name means: SXM (HBM3 on H100 is only the SXM part; GKE's "mega" is A3 Mega).
FORM_TOKENS = {
    "sxm": frozenset({"sxm", "sxm2", "sxm4", "sxm5", "sxm6", "hbm3", "mega"}),
    "pcie": frozenset({"pcie"}),
    "nvl": frozenset({"nvl"}),
    "oam": frozenset({"oam"}),
}


@dataclass(frozen=True)
class MigProfile:
    """One MIG profile: its name (``1g.10gb``) and the slices of compute and memory it takes."""

    name: str
    compute_slices: int
    memory_slices: int


@dataclass(frozen=True)
class Sku:
    id: str
    """Canonical row id, e.g. ``H100-SXM5-80GB``."""
    vendor: str
    """nvidia, amd or habana."""
    model: frozenset[str]
    """Tokens every spelling of this part carries (``{"h100"}``)."""
    form: str
    """sxm, pcie, nvl, oam or superchip."""
    memory_gb: int
    """Memory per device as the datasheet states it (for MI250X: per GCD, which the device plugin exposes)."""
    memory_mib: int
    """Memory per device as the driver reports it (what GFD puts in nvidia.com/gpu.memory) where known; else the
    datasheet's decimal GB converted to MiB (an underestimate, so a fit never relies on memory that is not there)."""
    compute: tuple[int, int] | None
    """CUDA compute capability (NVIDIA only)."""
    bandwidth_gbs: int
    """Memory bandwidth per device, GB/s (bounds decoding speed)."""
    bf16: bool
    fp8: bool
    nvlink: bool
    """Devices of one node talk over NVLink (or Infinity Fabric / Gaudi's RoCE links) rather than only PCIe."""
    names: tuple[str, ...]
    """Exact spellings seen in labels: GFD's nvidia.com/gpu.product, AMD's amd.com/gpu.product-name, marketing."""
    source: str
    mig: tuple[MigProfile, ...] = ()
    mig_slices: tuple[int, int] = (7, 8)
    """Compute and memory slices of the whole GPU (A100/H100/H200/B200: 7 and 8; A30: 4 and 4)."""
    arch: str = ""
    """AMD gfx target (engines list the gfx targets their ROCm build supports)."""

    @property
    def title(self) -> str:
        return self.names[0]

    def mig_profile(self, name: str) -> MigProfile | None:
        base = name.split("+", 1)[0]  # 1g.10gb+me: the media-extension variant has the same slices
        return next((p for p in self.mig if p.name == base), None)


def mig_share(sku: Sku | None, profile: str) -> tuple[float, float, str]:
    """(compute share, bandwidth share, how it was found) of a MIG profile of ``sku``.

    From the MIG table when the profile is listed; else from the name: ``<g>g.<size>gb`` takes g of the compute
    slices and size/total of the memory (and so of the memory bandwidth)."""
    p = sku.mig_profile(profile) if sku is not None else None
    slices = sku.mig_slices if sku is not None else (7, 8)
    if p is not None and sku is not None:
        return p.compute_slices / slices[0], p.memory_slices / slices[1], f"MIG profile table ({sku.id})"
    g = profile.split("g.", 1)[0]
    compute = int(g) / slices[0] if g.isdigit() else 1 / slices[0]
    size = profile.split("+", 1)[0].rsplit(".", 1)[-1].removesuffix("gb")
    memory = min(1.0, int(size) / sku.memory_gb) if sku is not None and size.isdigit() else compute
    return compute, memory, "the profile name"


def conservative(rows: list[Sku]) -> Sku:
    """The row promising least: smallest driver-reported memory, then bandwidth, then id (a total order)."""
    return min(rows, key=lambda s: (s.memory_mib, s.bandwidth_gbs, s.id))


class SkuIndex:
    """Lookup over a table of rows."""

    def __init__(self, rows: tuple[Sku, ...]) -> None:
        self.rows = rows
        self.by_id = {r.id: r for r in rows}
        self._exact: dict[frozenset[str], Sku] = {}
        for r in rows:
            for n in r.names:
                self._exact.setdefault(tokens(n), r)

    def lookup(self, name: str, memory_mib: int | None = None, vendor: str | None = None) -> tuple[Sku | None, bool]:
        """The row ``name`` means, and whether the choice was ambiguous (several rows fit; the least promising won).

        ``memory_mib``: the memory a label gives (Karpenter's instance-gpu-memory, ``amd.com/gpu.vram``), which
        tells an A100 40GB from an 80GB when the name does not."""
        name = name.split("-MIG-", 1)[0].removesuffix("-SHARED")
        toks = tokens(name)
        if not toks:
            return None, False
        exact = self._exact.get(toks)
        if exact is not None and (vendor is None or exact.vendor == vendor):
            return exact, False
        rows = [r for r in self.rows if r.model <= toks and (vendor is None or r.vendor == vendor)]
        if not rows:
            return None, False
        most = max(len(r.model) for r in rows)
        rows = [r for r in rows if len(r.model) == most]
        size = memory_gb(toks)
        if size is not None and any(r.memory_gb == size for r in rows):
            rows = [r for r in rows if r.memory_gb == size]
        elif memory_mib:
            best = min(abs(math.log(memory_mib * MIB / (r.memory_gb * 1e9))) for r in rows)
            rows = [r for r in rows if abs(math.log(memory_mib * MIB / (r.memory_gb * 1e9))) <= best + 0.05]
        formed = [r for r in rows if FORM_TOKENS.get(r.form, frozenset()) & toks]
        rows = formed or rows
        return conservative(rows), len(rows) > 1


@dataclass(frozen=True)
class SkuPerf:
    """What a part computes and how fast its devices talk: the performance columns of one SKU row (by id).

    Dense tensor throughput (no 2:4 sparsity) per device; ``None`` where the part has no such tensor cores."""

    tflops_16: float
    """bf16 (fp16 where the part has no bf16) dense tensor TFLOPS: prefill in a 16-bit dtype is bounded by it."""
    tflops_fp8: float | None
    """fp8 dense tensor TFLOPS (w8a8 fp8 models and fp8 KV attention)."""
    tops_int8: float | None
    """int8 dense tensor TOPS (w8a8 int8 models)."""
    link_gbs: float
    """Per-device bandwidth to the other devices of a node, one direction, GB/s (NVLink, Infinity Fabric, Gaudi's
    RoCE links, or the PCIe slot when there is no device link; less where the platform routes GPU-to-GPU traffic
    through host memory: AWS G5's A10Gs): bounds tensor-parallel all-reduces."""
    source: str
