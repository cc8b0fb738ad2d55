"""v1 Node dicts labelled the way real clusters label them: GPU Feature Discovery and NFD on GPU nodes (with the
per-node labels, a timestamp and a kernel build, that real GFD/NFD write), GKE, Karpenter and instance-type labels
on cloud nodes, AMD's node labeller and Gaudi's device plugin. Used by tests/test_hardware_facts.py and
bench/select_nodes.py."""

from __future__ import annotations

import random
from typing import Any

# product, memory MiB (nvidia-smi), compute major/minor, family, GFD's gpu.machine
GFD = {
    "h100": ("NVIDIA-H100-80GB-HBM3", 81559, 9, 0, "hopper", "PowerEdge-XE9680"),
    "h200": ("NVIDIA-H200", 143771, 9, 0, "hopper", "p5e.48xlarge"),
    "a100-80": ("NVIDIA-A100-SXM4-80GB", 81920, 8, 0, "ampere", "DGX-A100"),
    "l4": ("NVIDIA-L4", 23034, 8, 9, "ada-lovelace", "g2-standard-24"),
    "a10g": ("NVIDIA-A10G", 23028, 8, 6, "ampere", "g5.12xlarge"),
    "t4": ("Tesla-T4", 15360, 7, 5, "turing", "g4dn.xlarge"),
}
# Per-node labels real GFD and NFD write: a different value on every node (or on a few groups of nodes).
NFD_STATIC = {
    "feature.node.kubernetes.io/cpu-cpuid.AVX2": "true",
    "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
    "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
}


def _base(
    name: str, alloc: dict[str, Any], labels: dict[str, str], taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    lab = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name, **labels}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": lab},
        "spec": {"taints": taints} if taints else {},
        "status": {"allocatable": alloc, "capacity": dict(alloc), "conditions": [{"type": "Ready", "status": "True"}]},
    }


def gfd_node(
    name: str,
    gpu: str,
    count: int,
    rnd: random.Random | None = None,
    zone: str = "us-east-1a",
    cpu: str = "190",
    memory: str = "1900Gi",
) -> dict[str, Any]:
    """A GPU node as the NVIDIA GPU operator labels it (GFD + NFD), with the per-node labels they write."""
    rnd = rnd or random.Random(name)
    product, mem, major, minor, family, machine = GFD[gpu]
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(mem),
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.machine": machine,
        "nvidia.com/cuda.compute.major": str(major),
        "nvidia.com/cuda.compute.minor": str(minor),
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "127",
        "nvidia.com/cuda.driver.rev": "08",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "false",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "nvidia.com/gpu-driver-upgrade-state": rnd.choice(["upgrade-done", "upgrade-required"]),
        # per node: GFD's last labelling time, NFD's kernel build
        "nvidia.com/gfd.timestamp": str(1_700_000_000 + rnd.randrange(10**7)),
        "feature.node.kubernetes.io/kernel-version.full": rnd.choice(["5.15.0-1051-aws", "5.15.0-1052-aws"]),
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        **NFD_STATIC,
        "topology.kubernetes.io/zone": zone,
        "node.kubernetes.io/instance-type": machine,
    }
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(count), "ephemeral-storage": "900Gi"}
    return _base(name, alloc, labels)


def gke_node(
    name: str,
    accelerator: str,
    count: int,
    machine: str,
    partition: str | None = None,
    cpu: str = "200",
    memory: str = "1800Gi",
) -> dict[str, Any]:
    """A GKE GPU node: gke-accelerator label and GKE's nvidia.com/gpu=present:NoSchedule taint, no GFD."""
    labels = {
        "cloud.google.com/gke-accelerator": accelerator,
        "cloud.google.com/gke-nodepool": "gpu-pool",
        "node.kubernetes.io/instance-type": machine,
        "cloud.google.com/gke-gpu": "true",
    }
    if partition:
        labels["cloud.google.com/gke-gpu-partition-size"] = partition
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(count)}
    return _base(name, alloc, labels, [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])


def instance_node(
    name: str,
    instance_type: str,
    count: int,
    resource: str = "nvidia.com/gpu",
    extra: dict[str, str] | None = None,
    cpu: str = "190",
    memory: str = "1900Gi",
) -> dict[str, Any]:
    """A cloud node with only the well-known instance-type label (EKS/AKS managed node groups without GFD)."""
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", resource: str(count)}
    return _base(name, alloc, {"node.kubernetes.io/instance-type": instance_type, **(extra or {})})


def amd_node(
    name: str, count: int, labels: dict[str, str] | None = None, cpu: str = "190", memory: str = "1800Gi"
) -> dict[str, Any]:
    """An AMD Instinct node: amd.com/gpu from the ROCm device plugin, labels from its node labeller."""
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", "amd.com/gpu": str(count)}
    return _base(name, alloc, labels or {})


def gaudi_node(name: str, count: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    alloc = {"cpu": "94", "memory": "700Gi", "pods": "110", "habana.ai/gaudi": str(count)}
    return _base(name, alloc, labels or {})


def real_cluster(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` nodes in a few real pools (H100, L4, A10G GFD pools, a GKE H100 pool and CPU nodes)."""
    rnd = random.Random(seed)
    nodes: list[dict[str, Any]] = []
    for i in range(n):
        pick = rnd.random()
        zone = rnd.choice(["us-east-1a", "us-east-1b"])
        name = f"node-{i:05d}"
        if pick < 0.3:
            nodes.append(gfd_node(name, "h100", 8, rnd, zone))
        elif pick < 0.5:
            nodes.append(gfd_node(name, "l4", 1, rnd, zone, cpu="15", memory="60Gi"))
        elif pick < 0.6:
            nodes.append(gfd_node(name, "a10g", 4, rnd, zone, cpu="47", memory="180Gi"))
        elif pick < 0.7:
            nodes.append(gke_node(name, "nvidia-h100-80gb", 8, "a3-highgpu-8g"))
        else:
            cpu = _base(
                name,
                {"cpu": "31", "memory": "120Gi", "pods": "110"},
                {
                    **NFD_STATIC,
                    "topology.kubernetes.io/zone": zone,
                    "feature.node.kubernetes.io/kernel-version.full": rnd.choice(["6.1.0-a", "6.1.0-b"]),
                    "node.kubernetes.io/instance-type": "m6i.8xlarge",
                },
            )
            nodes.append(cpu)
    return nodes
