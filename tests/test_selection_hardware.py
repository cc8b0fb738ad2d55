"""Selection on clusters labelled as real ones are: product-only GFD labels, GKE, instance types, AMD and Gaudi.
Each id says what decides it."""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import MODELS, node, spec
from ib_testkit.gfd import amd_node, gaudi_node, gke_node, instance_node
from inference_backend.api import InferenceBackend
from inference_backend.facts import group_nodes
from inference_backend.render import render_result
from inference_backend.selection import Decision, select

CPU = [node("cpu-a", cpu="32", memory="128Gi")]
MI300X = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "amd.com/gpu.vram": "192G"}


def product_only(name: str, product: str, count: int, **kw: Any) -> dict[str, Any]:
    n = node(name, cpu=kw.get("cpu", "190"), memory=kw.get("memory", "1900Gi"))
    n["metadata"]["labels"]["nvidia.com/gpu.product"] = product
    n["status"]["allocatable"]["nvidia.com/gpu"] = str(count)
    return n


def decide(raw: dict[str, Any], nodes: list[dict[str, Any]]) -> Decision:
    return select(spec(**raw), group_nodes(nodes), MODELS)


def pod(raw: dict[str, Any], decision: Decision) -> dict[str, Any]:
    body = {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": "x"},
        "spec": raw,
    }
    ib = InferenceBackend.model_validate(body)
    deployment = render_result(ib, decision).objects[0]
    spec_: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec_


def test_h100_with_only_gpu_product_is_compute_9_0_so_tgi_serves_bf16_at_tp1() -> None:
    d = decide(
        {"backend": "tgi", "model": {"modelRef": "llama-3-1-8b"}}, [product_only("h", "NVIDIA-H100-80GB-HBM3", 8)]
    )
    assert d.backend == "tgi" and d.placement is not None and d.placement.gpus_per_replica == 1
    assert d.serving_dtype == "bfloat16"
    assert any("compute 9.0 from the SKU table (H100-SXM5-80GB)" in r for r in d.reasons)


@pytest.mark.parametrize(
    ("product", "memory"),
    [("NVIDIA-L4", 23034), ("NVIDIA-A10G", 23028)],
    ids=["l4-23034MiB-fits-8B-bf16", "a10g-23028MiB-fits-8B-bf16"],
)
def test_8b_on_product_only_24gb_gpus_runs_on_the_gpu_not_cpu(product: str, memory: int) -> None:
    d = decide({"model": {"modelRef": "llama-3-1-8b"}}, [product_only("g", product, 1, cpu="16", memory="64Gi"), *CPU])
    assert d.backend == "vllm" and d.placement is not None and d.placement.gpu is not None
    assert d.placement.gpu.memory_mib == memory


def test_t4_product_only_serves_qwen_in_float16_on_its_real_15360MiB() -> None:
    d = decide({"model": {"modelRef": "qwen-0-5b"}}, [product_only("t", "Tesla-T4", 1, cpu="8", memory="32Gi")])
    assert d.backend == "vllm" and d.serving_dtype == "float16"
    assert any("lacks bfloat16" in r for r in d.reasons)


def test_70b_on_p5_48xlarge_with_only_instance_type_labels_goes_to_h100_tp4_not_cpu() -> None:
    nodes = [instance_node(f"p5-{i}", "p5.48xlarge", 8, cpu="191", memory="1900Gi") for i in range(2)]
    raw = {"model": {"modelRef": "llama-3-1-70b"}}
    d = decide(raw, nodes)
    assert d.backend == "vllm" and d.placement is not None and d.placement.gpu is not None
    assert d.placement.gpu.product == "NVIDIA-H100-80GB-HBM3" and d.placement.gpus_per_replica == 4
    assert any("instance-type table (p5.48xlarge)" in r for r in d.reasons)
    assert pod(raw, d)["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}


def test_gke_h100_pool_tainted_gpu_present_is_used_and_the_pod_tolerates_it() -> None:
    raw = {"model": {"modelRef": "llama-3-1-70b"}}
    d = decide(raw, [gke_node("gke-h100", "nvidia-h100-80gb", 8, "a3-highgpu-8g"), *CPU])
    assert d.backend == "vllm" and d.placement is not None and d.placement.gpu is not None
    assert d.placement.gpu.sku == "H100-SXM5-80GB" and d.placement.gpus_per_replica == 4
    p = pod(raw, d)
    assert p["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert p["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_gpu_products_preference_in_gfd_spelling_matches_a_gke_node_by_tokens() -> None:
    raw = {"model": {"modelRef": "llama-3-1-8b"}, "hardware": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}}
    nodes = [
        gke_node("gke-h100", "nvidia-h100-80gb", 8, "a3-highgpu-8g"),
        gke_node("gke-l4", "nvidia-l4", 1, "g2-standard-8", cpu="8", memory="32Gi"),
    ]
    d = decide(raw, nodes)
    assert d.placement is not None and d.placement.gpu is not None and d.placement.gpu.sku == "H100-SXM5-80GB"


def test_70b_on_mi300x_nodes_is_vllm_rocm_requesting_amd_gpu() -> None:
    raw = {"model": {"modelRef": "llama-3-1-70b"}}
    d = decide(raw, [amd_node("mi300x-1", 8, MI300X), *CPU])
    assert d.backend == "vllm" and d.placement is not None and d.placement.gpu is not None
    assert d.placement.gpu.resource == "amd.com/gpu" and d.placement.gpus_per_replica == 1  # 183105 MiB fits 70B
    rejected = dict(d.rejected)
    assert "has no AMD Instinct (ROCm) build" in rejected["tgi"]
    p = pod(raw, d)
    container = p["containers"][0]
    assert container["image"] == "vllm/vllm-openai-rocm:v0.33.0"
    assert (
        container["resources"]["limits"]["amd.com/gpu"] == 1
        and "nvidia.com/gpu" not in container["resources"]["limits"]
    )
    assert p["nodeSelector"] == {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}


def test_gguf_on_amd_is_llamacpp_hip_image() -> None:
    raw = {"model": {"modelRef": "llama-3-2-3b-gguf"}}
    d = decide(raw, [amd_node("mi210", 1, {"amd.com/gpu.product-name": "AMD_Instinct_MI210"})])
    assert d.backend == "llamacpp" and d.placement is not None and d.placement.gpu is not None
    assert pod(raw, d)["containers"][0]["image"].startswith("ghcr.io/ggml-org/llama.cpp:server-rocm-b")


def test_gaudi_only_cluster_says_no_engine_runs_on_gaudi_by_name() -> None:
    nodes = [gaudi_node("dl1", 8, {"node.kubernetes.io/instance-type": "dl1.24xlarge"})]
    d = decide({"model": {"modelRef": "llama-3-1-8b"}, "hardware": {"accelerator": "gpu"}}, nodes)
    assert d.backend is None
    assert any("HL-205 (habana.ai/gaudi): no candidate engine runs on Intel Gaudi" in r for r in d.reasons)
    auto = decide({"model": {"modelRef": "llama-3-1-8b"}}, nodes)
    assert any("no candidate engine runs on Intel Gaudi" in r for r in auto.reasons), "never silently CPU"
    if auto.placement is not None:
        assert auto.placement.gpu is None
        assert any("CPU placements considered on GPU nodes" in r for r in auto.reasons)


def test_two_mig_nodes_of_one_shape_with_a_garbage_compute_label_do_not_break_class_ordering() -> None:
    a = node("mig-a", "a100-40", 1, mig="mixed")
    b = node("mig-b", "a100-40", 1, mig="mixed")
    b["metadata"]["labels"]["nvidia.com/cuda.compute.major"] = "garbage"
    c = node("mig-c", "a100-40", 1, mig="mixed")
    del c["metadata"]["labels"]["nvidia.com/gpu.product"]
    d_ = node("mig-d", "a100-40", 1, mig="mixed")  # no product and a garbage compute label: compute unknown
    del d_["metadata"]["labels"]["nvidia.com/gpu.product"]
    d_["metadata"]["labels"]["nvidia.com/cuda.compute.major"] = "garbage"
    cluster = group_nodes([a, b, c, d_])
    assert [g.compute for cls in sorted(cluster) for g in cls.gpus].count(None) == 1
    assert len(cluster) == 4  # the compute labels differ, so four classes, one with compute unknown
    d = select(spec(model={"modelRef": "llama-3-1-8b"}), cluster, MODELS)
    assert d.backend == "vllm"
