"""The SKU and cloud tables of docs/selection.md, made from the data (facts/sku_table.py, facts/clouds.py).

``python -m inference_backend.facts.table`` prints them; tests/test_hardware_facts.py fails when the doc differs.
"""

from __future__ import annotations

from inference_backend.facts.clouds import AWS, AZURE, GCP, GKE_ACCELERATORS, InstanceType
from inference_backend.facts.sku_table import SKUS


def skus() -> str:
    lines = [
        "| row | vendor | names (as labelled) | memory (datasheet / counted MiB) | compute | GB/s | bf16 | fp8 | "
        "link | MIG profiles |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in SKUS:
        cc = f"{s.compute[0]}.{s.compute[1]}" if s.compute else (s.arch or "-")
        mig = (
            ", ".join(
                f"{p.name} ({p.compute_slices}/{s.mig_slices[0]}, {p.memory_slices}/{s.mig_slices[1]})" for p in s.mig
            )
            or "-"
        )
        link = "NVLink" if s.nvlink and s.vendor == "nvidia" else ("fabric" if s.nvlink else "PCIe")
        cells = (
            s.id,
            s.vendor,
            ", ".join(f"`{n}`" for n in s.names),
            f"{s.memory_gb} GB / {s.memory_mib}",
            cc,
            str(s.bandwidth_gbs),
            "yes" if s.bf16 else "no",
            "yes" if s.fp8 else "no",
            link,
            mig,
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _instances(title: str, rows: dict[str, InstanceType]) -> list[str]:
    out = [f"| {title} | accelerators | vCPU | host memory (GB/GiB as listed) |", "|---|---|---|---|"]
    for key in sorted(rows):
        r = rows[key]
        part = f" ({r.gpu_memory_gib:g} GiB partition)" if r.gpu_memory_gib else ""
        out.append(f"| `{key}` | {r.count}x {r.sku}{part} | {r.vcpus} | {r.memory_gb} |")
    return out


def clouds() -> str:
    gke = ["| `cloud.google.com/gke-accelerator` | row |", "|---|---|"]
    gke += [f"| `{k}` | {v} |" for k, v in sorted(GKE_ACCELERATORS.items())]
    parts = [
        gke,
        _instances("AWS instance type", AWS),
        _instances("GCP machine type", GCP),
        _instances("Azure VM size", AZURE),
    ]
    return "\n\n".join("\n".join(p) for p in parts)


def markdown() -> str:
    return skus() + "\n\n" + clouds()


if __name__ == "__main__":
    print(markdown())
