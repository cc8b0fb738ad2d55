"""Write the node lists in docs/examples/nodes/ (as `kubectl get nodes -o yaml` prints them).

Run: python hack/example_nodes.py docs/examples/nodes
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

GPUS = {
    "h100": {"product": "NVIDIA-H100-80GB-HBM3", "memory": "81559", "major": "9", "minor": "0"},
    "l4": {"product": "NVIDIA-L4", "memory": "23034", "major": "8", "minor": "9"},
    "a10g": {"product": "NVIDIA-A10G", "memory": "23028", "major": "8", "minor": "6"},
}


def node(
    name: str, cpu: str, memory: str, gpu: str | None = None, count: int = 0, gfd: bool = True, disk: str = "500Gi"
) -> dict[str, Any]:
    labels = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}
    alloc: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": disk}
    if gpu is not None:
        alloc["nvidia.com/gpu"] = str(count)
        if gfd:
            g = GPUS[gpu]
            labels |= {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": g["product"],
                "nvidia.com/gpu.memory": g["memory"],
                "nvidia.com/gpu.count": str(count),
                "nvidia.com/cuda.compute.major": g["major"],
                "nvidia.com/cuda.compute.minor": g["minor"],
                "nvidia.com/gpu.family": {"h100": "hopper", "l4": "ada-lovelace", "a10g": "ampere"}[gpu],
            }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def node_list(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(nodes)}


def cpu_nodes(n: int) -> list[dict[str, Any]]:
    return [node(f"cpu-{i}", "15900m", "63Gi") for i in range(1, n + 1)]


SETS = {
    "cpu-only.yaml": node_list(*cpu_nodes(3)),
    "h100x8.yaml": node_list(*[node(f"h100-{i}", "191", "1900Gi", "h100", 8) for i in (1, 2)], *cpu_nodes(1)),
    # enough 8x H100 nodes for a 405B-class model over two nodes per replica (docs/multinode.md), two replicas; local
    # NVMe as the kubelet's root filesystem (DGX H100, p5.48xlarge instance storage): every pod downloads 831 GiB
    "h100x8-x4.yaml": node_list(*[node(f"h100-{i}", "191", "1900Gi", "h100", 8, disk="28Ti") for i in (1, 2, 3, 4)]),
    "l4.yaml": node_list(*[node(f"l4-{i}", "15", "60Gi", "l4", 1) for i in (1, 2, 3)], *cpu_nodes(1)),
    "gpu-nolabels.yaml": node_list(node("gpu-nolabels-1", "31", "120Gi", "l4", 1, gfd=False), *cpu_nodes(1)),
    "mixed.yaml": node_list(
        node("h100-1", "191", "1900Gi", "h100", 8),
        node("a10g-1", "31", "120Gi", "a10g", 1),
        node("l4-1", "15", "60Gi", "l4", 1),
        node("gpu-nolabels-1", "31", "120Gi", "l4", 1, gfd=False),
        *cpu_nodes(2),
    ),
}


def main(out: str) -> None:
    for name, doc in SETS.items():
        path = Path(out) / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/examples/nodes")
