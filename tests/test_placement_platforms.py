"""Placement per platform: GKE, EKS with Karpenter, AKS, OpenShift, on-prem GPU Operator with time-slicing, MPS,
MIG and DRA, on nodes labelled, tainted and sized as each platform does (ib_testkit.platforms cites where every
label, taint and allocatable figure comes from). Each case renders the pod and checks it against the node it must
land on (selectors, affinity, taints, requests including ephemeral storage and extended resources, DRA claims,
image platform: ib_testkit.landing) and, where the case says so, against the nodes it must not land on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit import platforms as P
from ib_testkit.factories import MODELS, spec
from ib_testkit.landing import misfits
from inference_backend.api import InferenceBackend
from inference_backend.facts import group_nodes
from inference_backend.quantity import parse_quantity
from inference_backend.render import render_result
from inference_backend.selection import Decision, select

Json = dict[str, Any]
ONNX = {"uri": "s3://models/phi-3-mini/model.onnx", "parameters": "3.8B", "format": "onnx", "dtype": "float32"}
GGUF = {"modelRef": "llama-3-2-3b-gguf"}
QWEN14 = {"uri": "hf://Qwen/Qwen2.5-14B-Instruct", "parameters": "14.8B", "dtype": "bfloat16"}
AKS_TOLERATION = [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]


def decide(raw: Json, items: list[Json]) -> Decision:
    return select(spec(**raw), group_nodes(items), MODELS)


def rendered(raw: Json, d: Decision) -> tuple[Json, dict[str, Json]]:
    """The pod template's spec and the rendered ResourceClaimTemplates by name."""
    ib = InferenceBackend.model_validate(
        {
            "apiVersion": "serving.inferencebackend.io/v1alpha1",
            "kind": "InferenceBackend",
            "metadata": {"name": "x", "namespace": "ml"},
            "spec": raw,
        }
    )
    objects = render_result(ib, d).objects
    workload = next(o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet"))
    tpl = workload["spec"].get("template") or workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    claims = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceClaimTemplate"}
    return tpl["spec"], claims


def lands(raw: Json, d: Decision, node: Json, items: list[Json]) -> list[str]:
    pod, claims = rendered(raw, d)
    slices = [i for i in items if i.get("kind") == "ResourceSlice"]
    return misfits(pod, node, claims, slices, P.DEVICE_CLASSES)


# (id, spec, nodes, index of the node the pod must land on, indices it must not, engine, what the reasons say)
PLACED = [
    (
        "gke-a3-70b-with-cache-pvc",
        {"model": {"modelRef": "llama-3-1-70b", "cache": {"pvc": "weights"}}},
        [P.gke_a3("a3-1")],
        0,
        [],
        "vllm",
        "4x NVIDIA-H100-80GB-HBM3",
    ),
    (
        "gke-a3-8b-downloads-15GiB-into-95GiB",
        {"model": {"modelRef": "llama-3-1-8b"}},
        [P.gke_a3("a3-1")],
        0,
        [],
        "vllm",
        "1x NVIDIA-H100-80GB-HBM3",
    ),
    (
        "gke-a4x-gb200-arm64-vllm-multiarch-image",
        {"model": {"modelRef": "llama-3-1-8b"}},
        [P.gke_a4x("a4x-1")],
        0,
        [],
        "vllm",
        "nodeSelector kubernetes.io/arch=arm64",
    ),
    ("gke-c4a-arm64-cpu-onnx", {"model": ONNX}, [P.gke_c4a("c4a-1")], 0, [], "onnxruntime", "GKE's Arm nodes"),
    ("gke-c4a-arm64-cpu-gguf", {"model": GGUF}, [P.gke_c4a("c4a-1")], 0, [], "llamacpp", "arm64"),
    (
        "eks-graviton-g5g-t4g-arm64",
        {"model": {"modelRef": "qwen-0-5b"}},
        [P.eks_g5g("g5g-1")],
        0,
        [],
        "vllm",
        "NVIDIA-T4G",
    ),
    (
        "eks-mixed-cpu-pins-amd64-or-arm64",
        {"model": ONNX},
        [P.eks_graviton_cpu("m7g-1"), P.eks_intel_cpu("m7i-1")],
        None,
        [],
        "onnxruntime",
        "mix amd64 and arm64",
    ),
    (
        "eks-p5en-70b-with-cache",
        {"model": {"modelRef": "llama-3-1-70b", "cache": {"pvc": "weights"}}},
        [P.eks_p5en("p5en-1")],
        0,
        [],
        "vllm",
        "NVIDIA-H200",
    ),
    (
        "aks-nc24-a100-tolerated",
        {"model": {"modelRef": "llama-3-1-8b"}, "hardware": {"tolerations": AKS_TOLERATION}},
        [P.aks_nc24_a100("aks-1")],
        0,
        [],
        "vllm",
        "NVIDIA-A100-80GB-PCIe",
    ),
    (
        "openshift-l40s-gfd",
        {"model": {"modelRef": "llama-3-1-8b"}},
        [P.openshift_l40s("ocp-1")],
        0,
        [],
        "vllm",
        "NVIDIA-L40S",
    ),
    (
        "time-sliced-l4-share-0.5b",
        {"model": {"modelRef": "qwen-0-5b"}},
        [P.shared_l4("l4-1", 4)],
        0,
        [],
        "vllm",
        "5758 MiB",
    ),
    (
        "mps-l4-share-renamed-resource",
        {"model": {"modelRef": "qwen-0-5b"}},
        [P.shared_l4("l4-1", 2, "mps", renamed=True)],
        0,
        [],
        "vllm",
        "MPS control daemon",
    ),
    ("mig-3g40gb-8b", {"model": {"modelRef": "llama-3-1-8b"}}, [P.mig_a100("mig-1")], 0, [], "vllm", "MIG"),
    (
        "dra-only-h100-8b",
        {"model": {"modelRef": "llama-3-1-8b"}},
        [P.dra_node("dra-1"), P.nvidia_slice("dra-1")],
        0,
        [],
        "vllm",
        "DRA devices of gpu.nvidia.com",
    ),
    (
        "dra-only-h100-70b-tp4",
        {"model": {"modelRef": "llama-3-1-70b", "cache": {"pvc": "w"}}},
        [P.dra_node("dra-1"), P.nvidia_slice("dra-1")],
        0,
        [],
        "vllm",
        "4x NVIDIA H100 80GB HBM3",
    ),
    (
        "half-cpu-node-excluded",
        {"model": GGUF},
        [
            P.eks_intel_cpu("big"),
            {
                **P.eks_intel_cpu("tiny"),
                "status": {
                    "allocatable": {"cpu": "500m", "memory": "57Gi", "ephemeral-storage": "89Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        ],
        0,
        [1],
        "llamacpp",
        "CPU",
    ),
]


@pytest.mark.parametrize(
    ("raw", "items", "on", "off", "engine", "says"), [pytest.param(*case[1:], id=case[0]) for case in PLACED]
)
def test_placed_and_the_pod_lands_on_its_node(
    raw: Json, items: list[Json], on: int | None, off: list[int], engine: str, says: str
) -> None:
    d = decide(raw, items)
    assert d.backend == engine, d.reasons
    assert any(says in r for r in d.reasons), d.reasons
    nodes = [i for i in items if i.get("kind") == "Node"]
    targets = nodes if on is None else [nodes[on]]
    if on is None:  # a mixed pool: the pod must land on the chosen node's architecture only
        arch = d.placement.hardware.arch if d.placement else ""
        targets = [n for n in nodes if n["metadata"]["labels"]["kubernetes.io/arch"] == arch]
        off = [i for i, n in enumerate(nodes) if n not in targets]
    for node in targets:
        assert lands(raw, d, node, items) == [], node["metadata"]["name"]
    for i in off:
        assert lands(raw, d, nodes[i], items), nodes[i]["metadata"]["name"]


def test_70b_on_100gb_disk_gke_a3_without_cache_is_unsatisfiable_naming_disk_and_cache() -> None:
    d = decide({"model": {"modelRef": "llama-3-1-70b"}}, [P.gke_a3("a3-1"), P.gke_a3("a3-2"), P.eks_intel_cpu("c")])
    assert d.backend is None
    last = d.reasons[-1]
    assert "146.0 GiB of ephemeral-storage" in last and "95.0 GiB" in last and "spec.model.cache" in last
    assert "not placed on CPU" in last


def test_70b_on_karpenter_p5en_100gi_root_volume_is_unsatisfiable_without_cache() -> None:
    d = decide({"model": {"modelRef": "llama-3-1-70b"}}, [P.eks_p5en("p5en-1")])
    assert d.backend is None and "89.0 GiB" in d.reasons[-1] and "spec.model.cache" in d.reasons[-1]


def test_70b_on_a3_with_cache_requests_no_weights_disk() -> None:
    raw = {"model": {"modelRef": "llama-3-1-70b", "cache": {"pvc": "weights"}}}
    d = decide(raw, [P.gke_a3("a3-1")])
    pod, _ = rendered(raw, d)
    assert pod["containers"][0]["resources"]["requests"]["ephemeral-storage"] == "1Gi"


def test_8b_emptydir_request_is_the_figure_checked_against_the_node() -> None:
    raw = {"model": {"modelRef": "llama-3-1-8b"}}
    items = [
        {
            **P.gke_a3("a3-small"),
            "status": {
                **P.gke_a3("x")["status"],
                "allocatable": {**P.gke_a3("x")["status"]["allocatable"], "ephemeral-storage": "17Gi"},
            },
        }
    ]
    d = decide(raw, items)  # 8.03B bf16 = 15.0 GiB: 15.0 x 1.1 + 1 -> 18 GiB > 17 GiB
    assert d.backend is None and "needs 18.0 GiB of ephemeral-storage" in d.reasons[-1]
    items[0]["status"]["allocatable"]["ephemeral-storage"] = "18Gi"
    d = decide(raw, items)
    assert d.backend == "vllm"
    assert rendered(raw, d)[0]["containers"][0]["resources"]["requests"]["ephemeral-storage"] == "18Gi"


def test_arm64_only_gpu_cluster_refuses_tgi_naming_the_architecture_and_the_source() -> None:
    d = decide({"backend": "tgi", "model": {"modelRef": "llama-3-1-8b"}}, [P.gke_a4x("a4x-1")])
    assert d.backend is None
    why = dict(d.rejected)["tgi"]
    assert "built for amd64 only" in why and "not arm64" in why and "build.yaml" in why


def test_arm64_cpu_only_onnx_gets_the_arm64_toleration_and_selector_gke_adds() -> None:
    d = decide({"model": ONNX}, [P.gke_c4a("c4a-1")])
    pod, _ = rendered({"model": ONNX}, d)
    assert pod["nodeSelector"]["kubernetes.io/arch"] == "arm64"
    assert {"key": "kubernetes.io/arch", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_onnx_gpu_on_arm64_is_refused_naming_the_missing_cuda_arm64_wheels() -> None:
    d = decide({"backend": "onnxruntime", "model": ONNX, "hardware": {"accelerator": "gpu"}}, [P.eks_g5g("g5g-1")])
    assert d.backend is None
    assert "no aarch64 wheels" in dict(d.rejected)["onnxruntime"]


def test_single_arch_pool_renders_no_arch_selector() -> None:
    d = decide({"model": ONNX}, [P.eks_intel_cpu("a"), P.eks_intel_cpu("b")])
    assert "kubernetes.io/arch" not in rendered({"model": ONNX}, d)[0].get("nodeSelector", {})


@pytest.mark.parametrize("replicas", [2, 4])
def test_time_sliced_l4_never_gets_tensor_parallel_across_its_shares(replicas: int) -> None:
    items = [P.shared_l4("l4-1", replicas)]
    d = decide({"model": QWEN14, "hardware": {"accelerator": "gpu"}}, items)
    assert d.backend is None  # 14.8B bf16 (27.6 GiB) fits no share; before, TP across shares of one 24 GB L4
    assert all("x NVIDIA-L4-SHARED offers" not in r or "1x NVIDIA-L4-SHARED offers" in r for r in d.reasons)
    assert any("1x NVIDIA-L4-SHARED offers" in r for r in d.reasons)
    small = decide({"model": {"modelRef": "qwen-0-5b"}}, items)
    assert small.placement is not None and small.placement.gpus_per_replica == 1
    assert small.placement.gpu is not None and small.placement.gpu.memory_mib == 23034 // replicas
    assert any(f"1/{replicas} of the card's 23034 MiB" in r and "an assumption" in r for r in small.reasons)


def test_mps_share_is_the_limit_the_daemon_enforces_not_an_assumption() -> None:
    d = decide({"model": {"modelRef": "qwen-0-5b"}}, [P.shared_l4("l4-1", 2, "mps")])
    note = next(r for r in d.reasons if "2 shares per card" in r)
    assert "mps" in note and "MPS control daemon" in note and "an assumption" not in note


def test_dra_pod_claims_devices_through_a_template_not_an_extended_resource() -> None:
    raw = {"model": {"modelRef": "llama-3-1-70b", "cache": {"pvc": "w"}}}
    d = decide(raw, [P.dra_node("dra-1"), P.nvidia_slice("dra-1")])
    pod, claims = rendered(raw, d)
    limits = pod["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits and pod["containers"][0]["resources"]["claims"] == [{"name": "gpus"}]
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "x-gpus"}]
    request = claims["x-gpus"]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == "gpu.nvidia.com" and request["count"] == 4
    assert (
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
        in request["selectors"][0]["cel"]["expression"]
    )
    assert "nodeSelector" not in pod and all(t.get("key") != "nvidia.com/gpu" for t in pod.get("tolerations", []))


def test_dra_capacity_is_counted_per_device_and_a_stale_generation_is_ignored() -> None:
    old = P.nvidia_slice("dra-1", count=8, generation=1)
    new = P.nvidia_slice("dra-1", count=2, generation=2)
    classes = group_nodes([P.dra_node("dra-1"), old, new])
    (cls,) = classes
    assert [g.count for g in cls.gpus] == [2]
    d = decide(
        {"model": {"modelRef": "llama-3-1-70b", "cache": {"pvc": "w"}}, "hardware": {"accelerator": "gpu"}},
        [P.dra_node("dra-1"), old, new],
    )
    assert d.backend is None or (d.placement is not None and d.placement.gpus_per_replica <= 2)


def test_duplicate_node_names_count_once() -> None:
    node = P.gke_a3("a3-1")
    assert group_nodes([node, node]) == group_nodes([node])


def test_cli_refuses_a_node_list_naming_a_node_twice(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": [P.gke_a3("a3-1"), P.gke_a3("a3-2"), P.gke_a3("a3-1")]}
        )
    )
    ib = tmp_path / "ib.yaml"
    ib.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "serving.inferencebackend.io/v1alpha1",
                "kind": "InferenceBackend",
                "metadata": {"name": "x"},
                "spec": {"model": {"uri": "hf://meta-llama/Llama-3.1-8B", "parameters": "8B"}},
            }
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "inference_backend.cli", "select", "-f", str(ib), "--nodes", str(nodes)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2, out
    assert "a3-1" in out.stderr and "twice" in out.stderr


def test_node_whose_cpu_cannot_hold_the_fetch_init_container_is_left_out_with_the_reason() -> None:
    tiny = P.eks_intel_cpu("tiny")
    tiny["status"]["allocatable"]["cpu"] = "500m"
    d = decide({"model": ONNX}, [tiny])
    assert d.backend is None
    why = dict(d.rejected)["onnxruntime"]
    assert "the fetch init container 1 CPU" in why and "the node allocates 0 CPU" in why


@pytest.mark.parametrize(("cpu", "init_cpu"), [(None, "1"), ("100m", "100m"), ("1500m", "1")])
def test_the_fetch_step_requests_no_more_cpu_than_the_engine(cpu: str | None, init_cpu: str) -> None:
    """The scheduler reserves the larger of the init and the engine containers' requests for the pod's whole life:
    an engine asking for 100m behind a fetch step of one core held a core of a real 2-core node, and a third such pod
    stayed Pending (e2e/test_real_nodes.py). The fetch step's CPU request is the engine's when that is smaller, and
    the selection counts the same."""
    two = P.eks_intel_cpu("two")
    two["status"]["allocatable"].update(cpu="2", memory="23Gi")
    resources = {"requests": {"memory": "1Gi", **({"cpu": cpu} if cpu else {})}, "limits": {"memory": "1Gi"}}
    raw = {"model": ONNX, "resources": resources}
    pod, _ = rendered(raw, decide(raw, [two]))
    (init,) = pod["initContainers"]
    assert init["resources"]["requests"] == {"cpu": init_cpu, "memory": "1Gi"}
    engine = pod["containers"][0]["resources"]["requests"]["cpu"]
    assert parse_quantity(init_cpu) <= parse_quantity(engine), "the pod reserves what its engine asks for, no more"
    assert engine == (cpu or engine)


@pytest.mark.parametrize(("replicas", "mode"), [(1, "ReadWriteOnce"), (2, "ReadWriteMany")])
def test_storage_class_cache_creates_one_claim_sized_from_the_weights(replicas: int, mode: str) -> None:
    raw = {"replicas": replicas, "model": {"modelRef": "llama-3-1-70b", "cache": {"storageClass": "filestore"}}}
    d = decide(raw, [P.gke_a3("a3-1"), P.gke_a3("a3-2")])
    assert d.backend == "vllm"  # placed: the weights go to the claim, not to the 95 GiB boot disk
    ib = InferenceBackend.model_validate(
        {
            "apiVersion": "serving.inferencebackend.io/v1alpha1",
            "kind": "InferenceBackend",
            "metadata": {"name": "llama", "namespace": "ml"},
            "spec": raw,
        }
    )
    objects = render_result(ib, d).objects
    claims = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert [c["metadata"]["name"] for c in claims] == ["llama-weights"]
    assert claims[0]["spec"] == {
        "accessModes": [mode],
        "storageClassName": "filestore",
        "resources": {"requests": {"storage": "146Gi"}},
    }
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert {"name": "weights-cache", "persistentVolumeClaim": {"claimName": "llama-weights"}} in pod["volumes"]
    assert pod["initContainers"][0]["command"][:2] == ["inference-backend", "fetch"]
    assert lands(raw, d, P.gke_a3("a3-1"), []) == []


def test_storage_class_cache_takes_the_given_size_and_refuses_two_sources() -> None:
    raw = {"model": {"modelRef": "llama-3-1-8b", "cache": {"storageClass": "standard-rwo", "size": "40Gi"}}}
    d = decide(raw, [P.gke_a3("a3-1")])
    body = {"apiVersion": "serving.inferencebackend.io/v1alpha1", "kind": "InferenceBackend", "metadata": {"name": "c"}}
    ib = InferenceBackend.model_validate({**body, "spec": raw})
    (claim,) = [o for o in render_result(ib, d).objects if o["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "40Gi"
    with pytest.raises(ValueError, match="set one of pvc, storageClass and hostPath"):
        spec(model={"modelRef": "x", "cache": {"storageClass": "a", "pvc": "b"}})


def test_405b_across_small_disk_nodes_is_unsatisfiable_for_disk_not_for_a_lack_of_nodes() -> None:
    raw = {"model": {"uri": "hf://meta-llama/Llama-3.1-405B-Instruct", "parameters": "405B", "dtype": "bfloat16"}}
    small = decide(raw, [P.gke_a3(f"a3-{i}") for i in range(3)])
    assert small.backend is None and "across nodes, needs 831.0 GiB of ephemeral-storage" in small.reasons[-1]
    assert "spec.model.cache" in small.reasons[-1]
    big = decide(raw, [P.gke_a3(f"a3-{i}", disk="2000Gi") for i in range(3)])
    assert big.backend == "vllm" and big.placement is not None and big.placement.multi_node


def test_the_adapters_sidecar_counts_beside_the_engine_in_the_node_fit() -> None:
    """Adapters loaded at run time come with a native sidecar (50m CPU, 128Mi) that runs beside the engine for the
    pod's whole life: the scheduler adds its requests to the engine's, and so does the selection. A node whose
    allocatable holds the engine's requests exactly takes the pod without adapters and is left out, with the
    sidecar named, with them."""
    node = P.eks_intel_cpu("exact")
    node["status"]["allocatable"].update(cpu="2", memory="8Gi")
    raw: Json = {
        "backend": "pytorch",
        "model": {
            "uri": "s3://research-models/gpt-1b/",
            "format": "safetensors",
            "architecture": "GPT2LMHeadModel",
            "parameters": "1.2B",
            "dtype": "bfloat16",
        },
        "hardware": {"accelerator": "cpu"},
        "resources": {"requests": {"cpu": "2", "memory": "6Gi"}, "limits": {"memory": "6Gi"}},
    }
    assert decide(raw, [node]).backend == "pytorch"
    with_adapters = {**raw, "adapters": [{"name": "poems", "uri": "s3://research-models/adapters/poems/", "rank": 8}]}
    d = decide(with_adapters, [node])
    assert d.backend is None
    why = dict(d.rejected)["pytorch"]
    assert "the adapters sidecar beside it 0.05 CPU" in why and "the node allocates 2 CPU" in why, why
    pod, _ = rendered(with_adapters, decide(with_adapters, [P.eks_intel_cpu("roomy")]))
    sidecar = next(c for c in pod["initContainers"] if c.get("restartPolicy") == "Always")
    assert sidecar["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}
