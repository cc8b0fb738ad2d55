"""Fake nodes for the local control plane, played by KWOK (stdlib only).

    python -m ib_testkit.kwok_nodes N [--classes h100x8,l4,a10g,cpu] [--prefix scale]   N nodes, classes in turn
    python -m ib_testkit.kwok_nodes --class l4 [--name gpu-l4]                          one node of a class

Prints multi-document YAML for `kubectl apply -f -`. The node sets e2e/nodes/*.yaml are this module's output
(`python -m ib_testkit.kwok_nodes --write` rewrites them), so the classes live in one place; bench/operator_scale.py
builds its nodes with ``node`` too.

Every node carries what KWOK manages it by (annotation kwok.x-k8s.io/node=fake, label type=kwok)
and KWOK's taint kwok.x-k8s.io/node=fake:NoSchedule, so pods meant for them tolerate it. GPU
nodes carry the labels NVIDIA's GPU feature discovery (GFD) sets and allocatable nvidia.com/gpu,
as the device plugin would report it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import uuid
from typing import Any

from ib_testkit import ROOT

KUBELET_VERSION = "v1.36.3"
WRITER = "python -m ib_testkit.kwok_nodes --write"

# GFD labels that every GPU class shares: driver 570.x (CUDA 12.8), as on a current GPU node image.
_GFD_COMMON = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/cuda.driver.major": "570",
    "nvidia.com/cuda.driver.minor": "133",
    "nvidia.com/cuda.driver.rev": "20",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "8",
    "nvidia.com/gfd.timestamp": "1767225600",
    "nvidia.com/mig.capable": "false",
    "feature.node.kubernetes.io/pci-10de.present": "true",
}


def _gpu(
    product: str, memory_mib: int, count: int, major: int, minor: int, family: str, machine: str
) -> dict[str, str]:
    return {
        **_GFD_COMMON,
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.machine": machine,
        "nvidia.com/cuda.compute.major": str(major),
        "nvidia.com/cuda.compute.minor": str(minor),
    }


# class -> (instance type, cpu, memory, gpus, GFD labels). Shapes follow common cloud instances.
CLASSES: dict[str, dict[str, Any]] = {
    "h100x8": {
        "instance": "p5.48xlarge",
        "cpu": 192,
        "memory_gi": 2048,
        "gpus": 8,
        "labels": _gpu("NVIDIA-H100-80GB-HBM3", 81559, 8, 9, 0, "hopper", "p5.48xlarge"),
    },
    "l4": {
        "instance": "g6.4xlarge",
        "cpu": 16,
        "memory_gi": 64,
        "gpus": 1,
        "labels": _gpu("NVIDIA-L4", 23034, 1, 8, 9, "ada-lovelace", "g6.4xlarge"),
    },
    "a10g": {
        "instance": "g5.4xlarge",
        "cpu": 16,
        "memory_gi": 64,
        "gpus": 1,
        "labels": _gpu("NVIDIA-A10G", 23028, 1, 8, 6, "ampere", "g5.4xlarge"),
    },
    "cpu": {"instance": "m7i.4xlarge", "cpu": 16, "memory_gi": 64, "gpus": 0, "labels": {}},
    # A GPU the device plugin advertises but GFD never labelled (GFD not installed, or broken).
    "nolabels": {"instance": "g5.2xlarge", "cpu": 8, "memory_gi": 32, "gpus": 1, "labels": {}},
}

# The committed node sets: file name -> (class, node name).
NODE_SETS = {
    "gpu-h100x8.yaml": ("h100x8", "gpu-h100x8"),
    "gpu-l4.yaml": ("l4", "gpu-l4"),
    "gpu-a10g.yaml": ("a10g", "gpu-a10g"),
    "cpu.yaml": ("cpu", "cpu"),
    "gpu-nolabels.yaml": ("nolabels", "gpu-nolabels"),
}

# Pools of several nodes of one class, under e2e/nodes/pools/: not part of the default node sets (e2e/nodes/apply
# and the e2e fixtures apply e2e/nodes/*.yaml only), applied by the tests that need them and deleted afterwards.
# file name -> (class, node names). h100x8: multi-node serving (a LeaderWorkerSet's leader and workers, 8 GPUs each).
POOLS = {
    "pools/gpu-h100x8-pool.yaml": ("h100x8", [f"gpu-h100x8-pool-{i}" for i in range(3)]),
    "pools/cpu-b.yaml": ("cpu", ["cpu-b"]),  # the demo: its two llama.cpp examples each take a whole CPU node
}


def node(cls: str, name: str) -> dict[str, Any]:
    c = CLASSES[cls]
    # What the kubelet reserves (system + kube reserved, eviction threshold), roughly as GKE/EKS do.
    reserved_cpu_m = 100 + 10 * c["cpu"]
    reserved_mem_mi = 1024 + 16 * c["memory_gi"]
    capacity = {
        "cpu": str(c["cpu"]),
        "memory": f"{c['memory_gi']}Gi",
        "ephemeral-storage": "500Gi",
        "pods": "110",
    }
    allocatable = {
        "cpu": f"{c['cpu'] * 1000 - reserved_cpu_m}m",
        "memory": f"{c['memory_gi'] * 1024 - reserved_mem_mi}Mi",
        "ephemeral-storage": "450Gi",
        "pods": "110",
    }
    if c["gpus"]:
        capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = str(c["gpus"])
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": c["instance"],
                "inference-backend.dev/node-class": cls,
                **c["labels"],
            },
        },
        "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            # Every field of NodeSystemInfo is required by the API schema (typed clients check it).
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"boot.{name}.ib-e2e")),
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, f"machine.{name}.ib-e2e").hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"system.{name}.ib-e2e")).upper(),
                "containerRuntimeVersion": "containerd://2.1.4",
                "osImage": "Ubuntu 24.04.3 LTS",
                "kernelVersion": "6.8.0-1031-aws",
            },
        },
    }


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")


def _key(k: str) -> str:
    return k if _PLAIN.match(k) else json.dumps(k)


def to_yaml(obj: Any, indent: int = 0) -> str:
    """A small YAML emitter for dicts, lists and strings (all strings double-quoted, JSON style)."""
    pad = "  " * indent
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{_key(k)}:")
                lines.append(to_yaml(v, indent + (1 if isinstance(v, dict) else 0)))
            else:
                lines.append(f"{pad}{_key(k)}: {json.dumps(v)}")
    elif isinstance(obj, list):
        for item in obj:
            body = to_yaml(item, indent + 1).lstrip()
            lines.append(f"{pad}- {body}")
    else:
        lines.append(f"{pad}{json.dumps(obj)}")
    return "\n".join(lines)


def documents(nodes: list[dict[str, Any]]) -> str:
    return "".join(f"---\n{to_yaml(n)}\n" for n in nodes)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("count", nargs="?", type=int, help="how many nodes, of the --classes in turn")
    p.add_argument("--classes", default="h100x8,l4,a10g,cpu", help="comma-separated classes to cycle")
    p.add_argument("--prefix", default="scale", help="node name prefix for COUNT nodes")
    p.add_argument("--class", dest="cls", choices=sorted(CLASSES), help="print one node of this class")
    p.add_argument("--name", help="name of the one --class node (default: the class)")
    p.add_argument("--write", action="store_true", help="rewrite the node sets e2e/nodes/*.yaml")
    a = p.parse_args(argv)

    if a.write:
        here = ROOT / "e2e" / "nodes"
        for fname, (cls, name) in NODE_SETS.items():
            header = f"# Fake node ({cls}) for the local control plane; written by {WRITER}.\n"
            (here / fname).write_text(header + documents([node(cls, name)]))
        for fname, (cls, names) in POOLS.items():
            header = f"# A pool of {len(names)} fake {cls} nodes for the local control plane; written by {WRITER}.\n"
            (here / fname).parent.mkdir(exist_ok=True)
            (here / fname).write_text(header + documents([node(cls, n) for n in names]))
        return 0
    if a.cls:
        sys.stdout.write(documents([node(a.cls, a.name or a.cls)]))
        return 0
    if a.count is None or a.count < 0:
        p.error("give a node COUNT, --class or --write")
    classes = [c.strip() for c in a.classes.split(",") if c.strip()]
    unknown = [c for c in classes if c not in CLASSES]
    if unknown or not classes:
        p.error(f"unknown classes {unknown}; known: {sorted(CLASSES)}")
    width = len(str(max(a.count - 1, 0)))
    nodes = [
        node(classes[i % len(classes)], f"{a.prefix}-{classes[i % len(classes)]}-{i:0{width}d}") for i in range(a.count)
    ]
    sys.stdout.write(documents(nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
