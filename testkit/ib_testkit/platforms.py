"""v1 Nodes (and ResourceSlices) as each platform writes them: labels, taints and allocatable figures, each builder
citing where they come from. Used by tests/test_placement_platforms.py and e2e/test_dra.py.

Sources:
- GKE: "About GPUs in GKE" (``cloud.google.com/gke-accelerator``, the ``nvidia.com/gpu=present:NoSchedule`` taint
  GKE puts on GPU node pools), "Arm workloads on GKE" (every Arm node tainted ``kubernetes.io/arch=arm64:NoSchedule``;
  GKE adds the toleration to pods selecting arm64), "Standard cluster architecture: node allocatable" (a 100 GB
  default boot disk leaves about 95 GiB of allocatable ephemeral storage, issue 30's A3 figure); machine types
  from facts/clouds.py (Compute Engine GPU machine types: a3-highgpu-8g 208 vCPU / 1872 GB, a4x-highgpu-4g 140 vCPU /
  884 GB arm64 Grace hosts; C4A Axion arm64).
- EKS with Karpenter: Karpenter's well-known labels (``karpenter.k8s.aws/instance-gpu-name``, ``-manufacturer``,
  ``-memory``, ``-count``, ``karpenter.sh/nodepool``), the EKS GPU NodePool taint ``nvidia.com/gpu:NoSchedule`` of
  the Karpenter docs' GPU example; a 100 Gi root volume leaves 89 Gi allocatable (issue 30's p5en figure);
  Graviton: g5g (T4G, arm64) and m7g CPU instances (EC2 instance types, facts/clouds.py).
- AKS: ``node.kubernetes.io/instance-type`` Standard_NC*, ``kubernetes.azure.com/agentpool``, the ``sku=gpu:NoSchedule``
  taint of "Use GPUs on AKS"; a 128 GB managed OS disk (AKS default) leaves about 118 GiB allocatable.
- OpenShift with the NVIDIA GPU Operator: GFD labels (k8s-device-plugin docs/gpu-feature-discovery/README.md
  "Generated labels"), ``node-role.kubernetes.io/worker``, RHCOS ``node.openshift.io/os_id``.
- On-prem GPU Operator with time-slicing / MPS: GFD's ``nvidia.com/gpu.replicas``, ``.sharing-strategy``,
  ``-SHARED`` product suffix and the multiplied ``nvidia.com/gpu`` (k8s-device-plugin README "Shared Access to
  GPUs", internal/lm/resource.go); MIG: ``nvidia.com/mig-<profile>`` resources (mixed strategy).
- DRA: NVIDIA's ``gpu.nvidia.com`` ResourceSlices (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin deviceinfo.go
  ``GpuInfo.Attributes``, capacity ``memory``; DeviceClass ``gpu.nvidia.com``): the node has no nvidia.com/gpu.
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]


def _node(
    name: str, labels: dict[str, str], alloc: dict[str, str], taints: list[Json] | None = None, arch: str = "amd64"
) -> Json:
    lab = {"kubernetes.io/arch": arch, "kubernetes.io/os": "linux", "kubernetes.io/hostname": name, **labels}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": lab},
        "spec": {"taints": taints} if taints else {},
        "status": {
            "allocatable": {"pods": "110", **alloc},
            "capacity": {"pods": "110", **alloc},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


GKE_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
ARM64_TAINT = {"key": "kubernetes.io/arch", "value": "arm64", "effect": "NoSchedule"}


def gke_a3(name: str, disk: str = "95Gi") -> Json:
    """GKE A3 High (a3-highgpu-8g, 8x H100 80GB), default 100 GB boot disk."""
    labels = {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "cloud.google.com/gke-nodepool": "a3",
        "node.kubernetes.io/instance-type": "a3-highgpu-8g",
        "cloud.google.com/gke-gpu": "true",
    }
    alloc = {"cpu": "207", "memory": "1800Gi", "ephemeral-storage": disk, "nvidia.com/gpu": "8"}
    return _node(name, labels, alloc, [GKE_GPU_TAINT])


def gke_a4x(name: str) -> Json:
    """GKE A4X (a4x-highgpu-4g: 4x GB200 on an arm64 Grace host), tainted as an Arm node and as a GPU node."""
    labels = {
        "cloud.google.com/gke-accelerator": "nvidia-gb200",
        "cloud.google.com/gke-nodepool": "a4x",
        "node.kubernetes.io/instance-type": "a4x-highgpu-4g",
    }
    alloc = {"cpu": "139", "memory": "850Gi", "ephemeral-storage": "450Gi", "nvidia.com/gpu": "4"}
    return _node(name, labels, alloc, [GKE_GPU_TAINT, ARM64_TAINT], arch="arm64")


def gke_c4a(name: str) -> Json:
    """GKE C4A (Axion, arm64) CPU node: c4a-standard-16, tainted as GKE taints every Arm node."""
    labels = {"cloud.google.com/gke-nodepool": "c4a", "node.kubernetes.io/instance-type": "c4a-standard-16"}
    alloc = {"cpu": "15890m", "memory": "58Gi", "ephemeral-storage": "95Gi"}
    return _node(name, labels, alloc, [ARM64_TAINT], arch="arm64")


def eks_p5en(name: str, disk: str = "89Gi") -> Json:
    """EKS with Karpenter, p5en.48xlarge (8x H200), 100 Gi root volume, the Karpenter GPU NodePool's taint."""
    labels = {
        "karpenter.k8s.aws/instance-gpu-name": "h200",
        "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
        "karpenter.k8s.aws/instance-gpu-memory": "144384",
        "karpenter.k8s.aws/instance-gpu-count": "8",
        "karpenter.sh/nodepool": "gpu",
        "node.kubernetes.io/instance-type": "p5en.48xlarge",
    }
    alloc = {"cpu": "191450m", "memory": "1980Gi", "ephemeral-storage": disk, "nvidia.com/gpu": "8"}
    return _node(name, labels, alloc, [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])


def eks_g5g(name: str) -> Json:
    """EKS with Karpenter, g5g.2xlarge: 1x T4G on an arm64 Graviton2 host."""
    labels = {
        "karpenter.k8s.aws/instance-gpu-name": "t4g",
        "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
        "karpenter.k8s.aws/instance-gpu-memory": "16384",
        "karpenter.k8s.aws/instance-gpu-count": "1",
        "node.kubernetes.io/instance-type": "g5g.2xlarge",
    }
    alloc = {"cpu": "7910m", "memory": "14Gi", "ephemeral-storage": "89Gi", "nvidia.com/gpu": "1"}
    return _node(name, labels, alloc, arch="arm64")


def eks_graviton_cpu(name: str) -> Json:
    """EKS m7g.4xlarge (Graviton3, arm64) CPU node; no taint (EKS does not taint Arm nodes)."""
    labels = {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m7g.4xlarge"}
    alloc = {"cpu": "15890m", "memory": "57Gi", "ephemeral-storage": "89Gi"}
    return _node(name, labels, alloc, arch="arm64")


def eks_intel_cpu(name: str) -> Json:
    """EKS m7i.4xlarge (amd64) CPU node."""
    labels = {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m7i.4xlarge"}
    alloc = {"cpu": "15890m", "memory": "57Gi", "ephemeral-storage": "89Gi"}
    return _node(name, labels, alloc)


def aks_nc24_a100(name: str) -> Json:
    """AKS Standard_NC24ads_A100_v4 (1x A100 80GB PCIe), GPU pool tainted sku=gpu:NoSchedule, 128 GB OS disk."""
    labels = {
        "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
        "kubernetes.azure.com/agentpool": "gpu",
        "kubernetes.azure.com/accelerator": "nvidia",
    }
    alloc = {"cpu": "23660m", "memory": "200Gi", "ephemeral-storage": "118Gi", "nvidia.com/gpu": "1"}
    return _node(name, labels, alloc, [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}])


def openshift_l40s(name: str, count: int = 4) -> Json:
    """OpenShift worker with the NVIDIA GPU Operator (GFD labels), 4x L40S."""
    labels = {
        "node-role.kubernetes.io/worker": "",
        "node.openshift.io/os_id": "rhcos",
        "nvidia.com/gpu.product": "NVIDIA-L40S",
        "nvidia.com/gpu.memory": "46068",
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/cuda.compute.major": "8",
        "nvidia.com/cuda.compute.minor": "9",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }
    alloc = {"cpu": "63500m", "memory": "500Gi", "ephemeral-storage": "400Gi", "nvidia.com/gpu": str(count)}
    return _node(name, labels, alloc)


def shared_l4(name: str, replicas: int = 4, strategy: str = "time-slicing", renamed: bool = False) -> Json:
    """GPU Operator time-slicing (or MPS) of one L4 into ``replicas`` shares: GFD's labels and the multiplied
    resource (``nvidia.com/gpu.shared`` under renameByDefault, the product without the -SHARED suffix then)."""
    product = "NVIDIA-L4" if renamed else "NVIDIA-L4-SHARED"
    labels = {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": "23034",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": strategy,
        "nvidia.com/cuda.compute.major": "8",
        "nvidia.com/cuda.compute.minor": "9",
        "nvidia.com/mps.capable": str(strategy == "mps").lower(),
    }
    resource = "nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu"
    alloc = {"cpu": "15740m", "memory": "60Gi", "ephemeral-storage": "400Gi", resource: str(replicas)}
    return _node(name, labels, alloc)


def mig_a100(name: str) -> Json:
    """GPU Operator MIG mixed strategy: 8x A100 80GB each split 2x 3g.40gb."""
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig-3g.40gb.memory": "40192",
        "nvidia.com/cuda.compute.major": "8",
        "nvidia.com/cuda.compute.minor": "0",
    }
    alloc = {"cpu": "127", "memory": "1000Gi", "ephemeral-storage": "800Gi", "nvidia.com/mig-3g.40gb": "16"}
    return _node(name, labels, alloc)


def dra_node(name: str, cpu: str = "190", memory: str = "1900Gi") -> Json:
    """A node whose GPUs only NVIDIA's DRA driver publishes: no nvidia.com/gpu, no GFD labels."""
    return _node(name, {}, {"cpu": cpu, "memory": memory, "ephemeral-storage": "800Gi"})


def nvidia_slice(
    node: str,
    count: int = 8,
    product: str = "NVIDIA H100 80GB HBM3",
    memory: str = "81559Mi",
    compute: str = "9.0.0",
    generation: int = 1,
) -> Json:
    """The ResourceSlice NVIDIA's DRA driver publishes for ``node``'s GPUs (resource.k8s.io/v1)."""
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": f"GPU-{node}-{i}"},
                "productName": {"string": product},
                "brand": {"string": "Nvidia"},
                "architecture": {"string": "Hopper"},
                "cudaComputeCapability": {"version": compute},
                "driverVersion": {"version": "580.82.7"},
            },
            "capacity": {"memory": {"value": memory}},
        }
        for i in range(count)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


DEVICE_CLASSES = {"gpu.nvidia.com": "gpu.nvidia.com", "mig.nvidia.com": "gpu.nvidia.com", "gpu.amd.com": "gpu.amd.com"}
"""DeviceClass -> driver, as the drivers' charts create them."""
