"""Hardware facts: node parsing (facts/nodes.py), accelerator identification in a fixed precedence
(facts/identify.py), the SKU table (facts/sku_table.py) and the cloud tables (facts/clouds.py). Pure: no I/O.

Layering: api -> facts -> decision -> engines -> selection -> render.
"""

from inference_backend.facts.identify import INDEX
from inference_backend.facts.nodes import (
    AMD_RESOURCE,
    ARCH_LABEL,
    DEVICE_RESOURCES,
    GAUDI_RESOURCE,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SHARED_RESOURCE,
    UNKNOWN_GPU_SPEED,
    UNLABELLED_GPU_COMPUTE,
    UNLABELLED_GPU_MEMORY_MIB,
    VENDOR_TITLES,
    ClusterFacts,
    GPUFacts,
    HardwareClass,
    Taint,
    class_label,
    duplicate_nodes,
    extended_resource_tolerations,
    gpu_speed,
    group_nodes,
    hardware_class,
    tolerates,
    with_devices,
)
from inference_backend.facts.pools import (
    SELECTOR_KEYS,
    Pool,
    capacity,
    dra_annotation,
    is_device_resource,
    pod_pool,
    pod_selector,
    pool_of,
    reserved,
)
from inference_backend.vocabulary import DRA_POOL_ANNOTATION


def product_matches(preference: str, gpu: GPUFacts) -> bool:
    """Whether a ``hardware.gpuProducts`` entry names this GPU: the same string, or the same SKU row by tokens
    (``NVIDIA-H100-80GB-HBM3`` names a GKE node labelled ``nvidia-h100-80gb``)."""
    if preference == gpu.product:
        return True
    if not gpu.sku or gpu.mig or gpu.shared:
        return False
    sku, _ = INDEX.lookup(preference)
    return sku is not None and sku.id == gpu.sku


__all__ = [
    "AMD_RESOURCE",
    "ARCH_LABEL",
    "DEVICE_RESOURCES",
    "DRA_POOL_ANNOTATION",
    "GAUDI_RESOURCE",
    "GPU_RESOURCE",
    "MIG_RESOURCE_PREFIX",
    "SELECTOR_KEYS",
    "SHARED_RESOURCE",
    "UNKNOWN_GPU_SPEED",
    "UNLABELLED_GPU_COMPUTE",
    "UNLABELLED_GPU_MEMORY_MIB",
    "VENDOR_TITLES",
    "ClusterFacts",
    "GPUFacts",
    "HardwareClass",
    "Pool",
    "Taint",
    "capacity",
    "class_label",
    "dra_annotation",
    "duplicate_nodes",
    "extended_resource_tolerations",
    "gpu_speed",
    "group_nodes",
    "hardware_class",
    "is_device_resource",
    "pod_pool",
    "pod_selector",
    "pool_of",
    "product_matches",
    "reserved",
    "tolerates",
    "with_devices",
]
