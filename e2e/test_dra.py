"""DRA on the local control plane (issue 30 item 4): a KWOK node whose GPUs only NVIDIA's DRA driver publishes
(ResourceSlices of ``gpu.nvidia.com``, resource.k8s.io/v1, as the driver's kubelet plugin writes them; no
``nvidia.com/gpu`` on the node), the driver's DeviceClass, and the operator with the chart's RBAC.

What is real here: the API server serving resource.k8s.io/v1 (GA, on by default in Kubernetes 1.36: e2e/up sets no
feature gate or runtime-config for it), the kube-controller-manager's resourceclaim controller making each pod's
ResourceClaim from the operator's ResourceClaimTemplate, and kube-scheduler's DynamicResources plugin allocating
devices from the slices and binding the pod. KWOK then plays the kubelet (it does not call a driver, which is the
one part not exercised). Checked: the backend becomes Ready on the DRA node, each pod's claim is allocated
``gpu.nvidia.com`` devices of that node, and capacity is honoured across backends: a second backend waits while the
first holds every device, and is placed when they are released.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ib_testkit import platforms as P
from ib_testkit.cluster import KWOK_TOLERATION, Operator, apply, get_json, ib, kubectl, wait_phase

NODE = "dra-h100"
TAINT = {"key": "inference-backend.dev/dra-e2e", "value": "true", "effect": "NoSchedule"}
"""Keeps the other e2e modules' backends off this node (their selection leaves it out: not tolerated)."""
TOLERATIONS = [{**TAINT, "operator": "Equal"}, KWOK_TOLERATION]
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}
"""As the driver's chart creates it (k8s-dra-driver-gpu deployments/helm/.../deviceclass-gpu.yaml)."""


def kwok_node() -> dict[str, Any]:
    node = P.dra_node(NODE, cpu="96", memory="1000Gi")
    node["metadata"]["annotations"] = {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}
    node["metadata"]["labels"] |= {"type": "kwok", "inference-backend.dev/node-class": "dra"}
    node["spec"] = {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}, TAINT]}
    return node


@pytest.fixture(scope="module")
def dra_node(operator: Operator, wait_until: Any) -> Iterator[str]:
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([kwok_node(), DEVICE_CLASS, P.nvidia_slice(NODE, count=2)]))
    wait_until(
        "the DRA node Ready",
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in get_json("node", NODE)["status"].get("conditions", [])
        ),
        timeout=120,
    )
    yield NODE
    kubectl("delete", "resourceslice", f"{NODE}-gpu.nvidia.com", "--ignore-not-found")
    kubectl("delete", "node", NODE, "--ignore-not-found")
    kubectl("delete", "deviceclass", "gpu.nvidia.com", "--ignore-not-found")


def backend(ns: str, name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "model": {"modelRef": "llama-3-1-8b", "credentialsSecret": "hf-token"},
            "hardware": {
                "accelerator": "gpu",
                "nodeSelector": {"inference-backend.dev/node-class": "dra"},
                "tolerations": TOLERATIONS,
            },
        },
    }


def claims_on(ns: str) -> list[dict[str, Any]]:
    return list(get_json("resourceclaims.resource.k8s.io", "-n", ns)["items"])


def test_a_dra_only_gpu_node_serves_and_capacity_is_counted_per_device(dra_node: str, ns: str, wait_until: Any) -> None:
    apply(backend(ns, "dra-a", 2))
    st = wait_phase(wait_until, ns, "dra-a", "Ready", timeout=180)["status"]
    assert st["backend"] == "vllm" and st["ready"] == "2/2"
    assert st["decision"]["placement"]["gpuResource"] == "gpu.nvidia.com"
    tpl = get_json("resourceclaimtemplates.resource.k8s.io", "dra-a-gpus", "-n", ns)
    request = tpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == "gpu.nvidia.com" and request["count"] == 1
    assert tpl["metadata"]["ownerReferences"][0]["name"] == "dra-a"
    pods = get_json("pods", "-n", ns, "-l", "app.kubernetes.io/instance=dra-a")["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == [NODE, NODE]
    assert all("nvidia.com/gpu" not in (p["spec"]["containers"][0]["resources"].get("limits") or {}) for p in pods)
    allocated = [
        r
        for c in claims_on(ns)
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    ]
    assert sorted(r["device"] for r in allocated) == ["gpu-0", "gpu-1"]  # the scheduler allocated both devices
    assert {(r["driver"], r["pool"]) for r in allocated} == {("gpu.nvidia.com", NODE)}

    apply(backend(ns, "dra-b", 1))  # both devices are held: it waits, and says so

    def waiting() -> dict[str, Any] | None:
        conds = {c["type"]: c for c in (ib(ns, "dra-b").get("status") or {}).get("conditions", [])}
        ready = conds.get("Ready") or {}
        return ready if ready.get("reason") == "InsufficientCapacity" else None

    why = wait_until("dra-b waiting for capacity", waiting, timeout=120)["message"]
    assert "gpu.nvidia.com" in why and "2 allocatable" in why and "dra-a" in why
    kubectl("delete", "inferencebackends.serving.inferencebackend.io", "dra-a", "-n", ns, "--wait=true")
    st = wait_phase(wait_until, ns, "dra-b", "Ready", timeout=180)["status"]
    assert st["ready"] == "1/1"


STATIC_CLASS = "ib-e2e-static"


def test_a_storage_class_cache_gets_one_claim_the_operator_creates(
    operator: Operator, ns: str, wait_until: Any, audit_log: Any
) -> None:
    """spec.model.cache.storageClass (issue 30 item 1): the operator creates the weights' claim once, owned by the
    backend, and the backend's pod mounts it. No provisioner runs here: the class is a static one
    (kubernetes.io/no-provisioner, Immediate binding) with a PersistentVolume for the PV controller to bind."""
    mark = audit_log.mark()
    klass = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STATIC_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate",
    }
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{ns}-weights"},
        "spec": {
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": STATIC_CLASS,
            "hostPath": {"path": "/tmp"},
            "claimRef": {"namespace": ns, "name": "cached-weights"},
        },
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([klass, volume]))
    doc = {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": "cached", "namespace": ns},
        "spec": {
            "model": {
                "modelRef": "llama-3-1-8b",
                "credentialsSecret": "hf-token",
                "cache": {"storageClass": STATIC_CLASS},
            },
            "hardware": {"accelerator": "gpu", "tolerations": [KWOK_TOLERATION]},
        },
    }
    apply(doc)
    st = wait_phase(wait_until, ns, "cached", "Ready", timeout=180)["status"]
    assert st["ready"] == "1/1"
    claim = get_json("pvc", "cached-weights", "-n", ns)
    assert claim["spec"]["storageClassName"] == STATIC_CLASS and claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "18Gi"  # 15.0 GiB x 1.1 + 1, rounded up
    assert claim["metadata"]["ownerReferences"][0]["name"] == "cached" and claim["status"]["phase"] == "Bound"
    pod = get_json("pods", "-n", ns, "-l", "app.kubernetes.io/instance=cached")["items"][0]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["weights-cache"]["persistentVolumeClaim"]["claimName"] == "cached-weights"
    kubectl("annotate", "inferencebackends.serving.inferencebackend.io", "cached", "-n", ns, "e2e/poke=1")
    wait_phase(wait_until, ns, "cached", "Ready", timeout=60)
    sa = "system:serviceaccount:ib-system:ib-inference-backend"
    made = [
        e
        for e in audit_log.writes(mark, user=sa, resource="persistentvolumeclaims", namespace=ns)
        if (e.get("responseStatus") or {}).get("code") == 201
    ]
    assert len(made) == 1, made  # created once; later applies only patch it
    assert get_json("pvc", "cached-weights", "-n", ns)["metadata"]["uid"] == claim["metadata"]["uid"]
    kubectl("delete", "pv", f"{ns}-weights", "--ignore-not-found", "--wait=false")
