"""Smoke test of the local control plane (e2e/up): version, fake GPU nodes, scheduling, GC, CEL.

Runs against $KUBECONFIG; see e2e/conftest.py. The tests share the cluster and run in file order:
the node sets applied by test_node_sets are used by the ones after it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError
from lightkube.codecs import load_all_yaml
from lightkube.models.apps_v1 import DeploymentSpec
from lightkube.models.core_v1 import (
    Container,
    PodSpec,
    PodTemplateSpec,
    ResourceRequirements,
    Toleration,
)
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import Deployment, ReplicaSet
from lightkube.resources.core_v1 import ConfigMap, Node, Pod

NODE_FILES = sorted((Path(__file__).resolve().parent / "nodes").glob("*.yaml"))
KWOK_TOLERATION = Toleration(key="kwok.x-k8s.io/node", operator="Exists", effect="NoSchedule")


def is_ready(obj: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (obj.status.conditions or []))


def gpu_count(node: Any) -> int:
    return int((node.status.allocatable or {}).get("nvidia.com/gpu", "0"))


def test_version_is_pinned(kube_http: Any, kube_version: str) -> None:
    r = kube_http.get("/version")
    r.raise_for_status()
    info = r.json()
    assert info["gitVersion"] == kube_version, info
    assert (info["major"], info["minor"]) == tuple(kube_version.lstrip("v").split(".")[:2])


def test_node_sets(kube: Any, wait_until: Any) -> None:
    """The committed node sets apply (creating what's missing) and KWOK makes them Ready."""
    assert {f.name for f in NODE_FILES} >= {
        "gpu-h100x8.yaml",
        "gpu-l4.yaml",
        "gpu-a10g.yaml",
        "cpu.yaml",
        "gpu-nolabels.yaml",
    }
    names = []
    for f in NODE_FILES:
        for node in load_all_yaml(f.read_text()):
            names.append(node.metadata.name)
            try:
                kube.get(Node, node.metadata.name)
            except ApiError as e:
                if e.status.code != 404:
                    raise
                kube.create(node)  # status (capacity, allocatable) is only taken on create
    for name in names:
        wait_until(f"node {name} Ready", lambda n=name: is_ready(kube.get(Node, n)), timeout=60)

    h100 = kube.get(Node, "gpu-h100x8")
    labels = h100.metadata.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert (labels["nvidia.com/cuda.compute.major"], labels["nvidia.com/cuda.compute.minor"]) == ("9", "0")
    assert gpu_count(h100) == 8
    assert gpu_count(kube.get(Node, "cpu")) == 0
    nolabels = kube.get(Node, "gpu-nolabels")
    assert gpu_count(nolabels) == 1
    assert not any(k.startswith("nvidia.com/") for k in nolabels.metadata.labels)


def gpu_deployment(name: str, replicas: int) -> Deployment:
    labels = {"app": name}
    return Deployment(
        metadata=ObjectMeta(name=name, labels=labels),
        spec=DeploymentSpec(
            replicas=replicas,
            selector=LabelSelector(matchLabels=labels),
            template=PodTemplateSpec(
                metadata=ObjectMeta(labels=labels),
                spec=PodSpec(
                    containers=[
                        Container(
                            name="server",
                            image="registry.k8s.io/pause:3.10",  # never pulled: KWOK plays the kubelet
                            resources=ResourceRequirements(
                                requests={"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"},
                                limits={"nvidia.com/gpu": "1"},
                            ),
                        )
                    ],
                    tolerations=[KWOK_TOLERATION],
                    terminationGracePeriodSeconds=0,
                ),
            ),
        ),
    )


def test_gpu_deployment_runs_then_is_garbage_collected(kube: Any, namespace: str, wait_until: Any) -> None:
    gpu_nodes = {n.metadata.name for n in kube.list(Node, labels={"type": "kwok"}) if gpu_count(n) > 0}
    assert gpu_nodes, "no GPU nodes: test_node_sets should have applied them"

    kube.create(gpu_deployment("gpu-smoke", 2), namespace=namespace)

    def running_ready_pods() -> list[Any] | None:
        pods = list(kube.list(Pod, namespace=namespace, labels={"app": "gpu-smoke"}))
        ok = [p for p in pods if p.status.phase == "Running" and is_ready(p)]
        return ok if len(ok) == 2 else None

    pods = wait_until("2 Running and Ready pods", running_ready_pods, timeout=120)
    for p in pods:
        assert p.spec.nodeName in gpu_nodes, f"{p.metadata.name} is on {p.spec.nodeName}, not a GPU node"
    wait_until(
        "the Deployment to report 2 ready replicas",
        lambda: (kube.get(Deployment, "gpu-smoke", namespace=namespace).status.readyReplicas or 0) == 2,
        timeout=60,
    )
    rs = list(kube.list(ReplicaSet, namespace=namespace, labels={"app": "gpu-smoke"}))
    assert len(rs) == 1 and rs[0].metadata.ownerReferences[0].kind == "Deployment"

    kube.delete(Deployment, "gpu-smoke", namespace=namespace)
    wait_until(
        "the garbage collector to delete the ReplicaSet and pods",
        lambda: not list(kube.list(ReplicaSet, namespace=namespace)) and not list(kube.list(Pod, namespace=namespace)),
        timeout=120,
    )


def test_gpu_requests_beyond_capacity_stay_pending(kube: Any, namespace: str, wait_until: Any) -> None:
    """Nine GPUs fit on no node (the largest has 8): the scheduler must leave the pod Pending."""
    dep = gpu_deployment("too-big", 1)
    dep.spec.template.spec.containers[0].resources.requests["nvidia.com/gpu"] = "9"
    dep.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] = "9"
    kube.create(dep, namespace=namespace)

    def unschedulable() -> bool:
        for p in kube.list(Pod, namespace=namespace, labels={"app": "too-big"}):
            for c in p.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    return True
        return False

    wait_until("the scheduler to mark the pod Unschedulable", unschedulable, timeout=60)


def test_validating_admission_policy_with_cel(kube: Any, namespace: str) -> None:
    """ValidatingAdmissionPolicy (CEL) is served and enforced."""
    from lightkube.generic_resource import create_global_resource

    vap = create_global_resource(
        "admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies"
    )
    binding = create_global_resource(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    )
    name = f"ib-e2e-no-forbidden-{namespace}"
    kube.create(
        vap(
            metadata=ObjectMeta(name=name),
            spec={
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["configmaps"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.data) || !('forbidden' in object.data)",
                        "message": "key 'forbidden' is not allowed",
                    }
                ],
            },
        )
    )
    try:
        kube.create(
            binding(
                metadata=ObjectMeta(name=name),
                spec={
                    "policyName": name,
                    "validationActions": ["Deny"],
                    "matchResources": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                    },
                },
            )
        )
        # The policy reaches the admission plugin through an informer: retry until it bites.
        for _ in range(60):
            try:
                kube.create(
                    ConfigMap(metadata=ObjectMeta(generateName="cel-"), data={"forbidden": "x"}),
                    namespace=namespace,
                )
            except ApiError as e:
                assert e.status.code in (400, 403, 422), e.status
                assert "forbidden" in (e.status.message or "")
                break
            time.sleep(0.5)
        else:
            pytest.fail("the ValidatingAdmissionPolicy never denied a ConfigMap")
        kube.create(ConfigMap(metadata=ObjectMeta(name="allowed"), data={"ok": "x"}), namespace=namespace)
    finally:
        kube.delete(binding, name)
        kube.delete(vap, name)


def test_audit_log_records_writes(kube: Any, namespace: str, audit_log: Any, wait_until: Any) -> None:
    """e2e/up's audit policy logs writes at Metadata level to $E2E_DIR/audit.log; reads are not logged."""
    mark = audit_log.mark()
    kube.create(ConfigMap(metadata=ObjectMeta(name="audited"), data={"a": "b"}), namespace=namespace)
    kube.get(ConfigMap, "audited", namespace=namespace)

    def mine() -> list[dict] | None:
        evs = audit_log.writes(mark, user="kubernetes-admin", resource="configmaps", namespace=namespace)
        return evs or None

    evs = wait_until("the ConfigMap create in the audit log", mine, timeout=30)
    assert [(e["verb"], e["objectRef"]["name"]) for e in evs] == [("create", "audited")]
    assert evs[0]["level"] == "Metadata"
    assert "requestObject" not in evs[0]
    assert not audit_log.writes(mark, verbs=("get", "list", "watch")), "reads should not be logged"
