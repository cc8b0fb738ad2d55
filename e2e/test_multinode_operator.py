"""The operator's multi-node path on the real control plane: a 405B-class InferenceBackend on 8x H100 KWOK nodes
becomes a LeaderWorkerSet (rendered by the operator, admitted by LWS's webhooks, run by the real LWS v0.7.0
controller) whose leader and worker pods land on distinct nodes; Ready rolls up the LeaderWorkerSet's status,
`kubectl describe ib` shows the multi-node plan, and deleting the backend removes everything. Without the LWS CRD
(e2e/up with E2E_LWS=0) the same backend says which CRD is missing, and a one-node backend still works.

The weights come from a ReadOnlyMany claim (pvc://): a 405B model downloaded into each pod's emptyDir would request
about 833 GiB of ephemeral storage per node, more than these nodes (450 GiB) have.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from ib_testkit.cluster import NODE_SETS, Operator, apply, example, get_json, ib, kubectl, wait_phase

POOL = NODE_SETS / "pools" / "gpu-h100x8-pool.yaml"
LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
EXAMPLE = "multinode/vllm-llama-3-1-405b.yaml"
WEIGHTS = "pvc://research-models/Llama-3.1-405B-Instruct"


def _has_lws() -> bool:
    """Whether the LWS CRD is installed (the names of the CRDs there are; a NotFound message names it too)."""
    return f"customresourcedefinition.apiextensions.k8s.io/{LWS_CRD}" in kubectl("get", "crd", "-o", "name").split()


@pytest.fixture(scope="module")
def h100_pool(wait_until: Any) -> Iterator[list[str]]:
    """Three more 8x H100 KWOK nodes (four with e2e/nodes/gpu-h100x8.yaml), Ready; deleted after the module."""
    kubectl("apply", "-f", str(POOL))
    names = [n.removeprefix("node/") for n in kubectl("get", "-f", str(POOL), "-o", "name").split()]
    kubectl("wait", "--for=condition=Ready", "--timeout=120s", *[f"node/{n}" for n in names])
    yield names
    kubectl("delete", "-f", str(POOL), "--wait=false", check=False)


def _big(ns: str) -> dict[str, Any]:
    doc = example(EXAMPLE, ns)
    doc["spec"]["model"]["uri"] = WEIGHTS
    doc["spec"]["model"]["format"] = "safetensors"
    doc["spec"]["model"].pop("credentialsSecret", None)
    return doc


def _pods(ns: str) -> list[dict[str, Any]]:
    return get_json("pods", "-n", ns, "-l", "app.kubernetes.io/instance=llama-405b")["items"]  # type: ignore[no-any-return]


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )


def test_405b_backend_runs_as_a_leaderworkerset_on_distinct_nodes(
    operator: Operator, ns: str, h100_pool: list[str], wait_until: Any
) -> None:
    if not _has_lws():
        pytest.skip(f"no {LWS_CRD} CRD: e2e/up runs the LeaderWorkerSet controller unless E2E_LWS=0")
    apply(_big(ns))
    obj = wait_phase(wait_until, ns, "llama-405b", "Ready", timeout=180)
    placement = obj["status"]["decision"]["placement"]
    assert (placement["nodes"], placement["gpusPerNode"], placement["pipelineParallelSize"]) == (2, 8, 2)
    assert obj["status"]["ready"] == "1/1"

    lws = get_json("leaderworkerset", "llama-405b-lws", "-n", ns)
    assert lws["metadata"]["ownerReferences"][0]["name"] == "llama-405b"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert get_json("deployment", "-n", ns)["items"] == [], "no Deployment for a multi-node replica"

    pods = _pods(ns)
    assert len(pods) == 2 and all(_ready(p) for p in pods), [p["metadata"]["name"] for p in pods]
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2, f"the pods of one group share a node: {nodes}"
    roles = {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]: p for p in pods}
    leader, worker = roles["0"], roles["1"]
    assert leader["metadata"]["labels"]["app.kubernetes.io/component"] == "inference-server"
    assert worker["metadata"]["labels"]["app.kubernetes.io/component"] == "inference-worker"
    for pod in pods:
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "8", limits
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
        assert env["LWS_LEADER_ADDRESS"] == f"llama-405b-lws-0.llama-405b-lws.{ns}", env  # set by LWS's webhook
    # the Service routes to the leader only (the API server); the LWS controller's headless Service is its own
    endpoints = get_json("endpointslices", "-n", ns, "-l", "kubernetes.io/service-name=llama-405b")["items"]
    ips = {a for s in endpoints for e in s.get("endpoints") or [] for a in e["addresses"]}
    assert ips == {leader["status"]["podIP"]}, (ips, leader["status"].get("podIP"))
    assert get_json("service", "llama-405b-lws", "-n", ns)["spec"]["clusterIP"] == "None"

    described = kubectl("describe", "ib", "llama-405b", "-n", ns)
    for text in (
        "chosen: vllm on 2 nodes x 8x NVIDIA-H100-80GB-HBM3",
        "memory per node:",
        "NVLink",
        "pipeline parallel across nodes over the cluster network",
        "Pipeline Parallel Size:",
    ):
        assert text in described, text
    assert operator.alive()

    kubectl("delete", "ib", "llama-405b", "-n", ns)
    gone = lambda: not kubectl("get", "leaderworkerset,statefulset,pods,service", "-n", ns, "-o", "name").strip()  # noqa: E731
    wait_until("the LeaderWorkerSet, its StatefulSets, pods and Services garbage-collected", gone, timeout=120)


def _one_node(ns: str) -> dict[str, Any]:
    """The same backend with a model one 8x H100 node holds (Llama-3.1-70B: tensor parallel 4 on a Deployment)."""
    doc = _big(ns)
    doc["spec"]["model"].update(uri="pvc://research-models/Llama-3.1-70B-Instruct", parameters="70.6B")
    return doc


def _workloads(ns: str) -> set[str]:
    return set(kubectl("get", "deployment,leaderworkerset", "-n", ns, "-o", "name").split())


def test_switching_between_a_deployment_and_a_leaderworkerset(
    operator: Operator, ns: str, h100_pool: list[str], wait_until: Any
) -> None:
    """One node -> several -> one: the new kind of workload is applied beside the old one, the old one is deleted
    once the new one is available, and the backend ends Ready on the new one each time."""
    if not _has_lws():
        pytest.skip(f"no {LWS_CRD} CRD: e2e/up runs the LeaderWorkerSet controller unless E2E_LWS=0")
    apply(_one_node(ns))
    wait_phase(wait_until, ns, "llama-405b", "Ready", timeout=120)
    assert _workloads(ns) == {"deployment.apps/llama-405b"}

    apply(_big(ns))
    wait_until(
        "the Deployment replaced by the LeaderWorkerSet",
        lambda: _workloads(ns) == {"leaderworkerset.leaderworkerset.x-k8s.io/llama-405b-lws"},
        timeout=180,
    )
    obj = wait_phase(wait_until, ns, "llama-405b", "Ready", timeout=120)
    assert obj["status"]["decision"]["placement"]["nodes"] == 2
    selector = get_json("service", "llama-405b", "-n", ns)["spec"]["selector"]
    assert selector.get("leaderworkerset.sigs.k8s.io/worker-index") == "0", selector

    apply(_one_node(ns))
    wait_until(
        "the LeaderWorkerSet replaced by a Deployment",
        lambda: _workloads(ns) == {"deployment.apps/llama-405b"},
        timeout=180,
    )
    obj = wait_phase(wait_until, ns, "llama-405b", "Ready", timeout=120)
    assert obj["status"]["decision"]["placement"]["nodes"] == 1
    assert (
        "leaderworkerset.sigs.k8s.io/worker-index"
        not in get_json("service", "llama-405b", "-n", ns)["spec"]["selector"]
    )
    assert operator.alive()


def test_without_the_lws_crd_the_status_names_it(operator: Operator, ns: str, wait_until: Any) -> None:
    if _has_lws():
        pytest.skip(f"the {LWS_CRD} CRD is installed: this runs on e2e/up with E2E_LWS=0")
    apply(_big(ns))

    def says_missing() -> dict[str, Any] | None:
        st = ib(ns, "llama-405b").get("status") or {}
        cond = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
        return st if cond.get("reason") == "CRDMissing" else None

    st = wait_until("Ready condition CRDMissing", says_missing, timeout=60)
    cond = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert LWS_CRD in cond["message"] and st["phase"] == "Pending", st
    assert operator.alive()
    apply(example("vllm-llama-3-1-8b.yaml", ns))  # one node: unaffected
    wait_phase(wait_until, ns, "llama-chat", "Ready")
