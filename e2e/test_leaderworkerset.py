"""The real LeaderWorkerSet controller (sigs.k8s.io/lws, built and started by e2e/build-binaries and e2e/up) on KWOK
GPU nodes: its CRD, its admission webhooks reached by URL on 127.0.0.1, the leader and worker pods it creates through
StatefulSets and the garbage collection of all of it; then the operator's 405B backend rendered as a LeaderWorkerSet
and run by that controller.

A pool of 8xH100 nodes (e2e/nodes/pools/gpu-h100x8-pool.yaml) is added for this module and deleted after it, so that
the other modules keep the default node sets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from ib_testkit.cluster import KWOK_TOLERATION, NODE_SETS, Operator, apply, example, get_json, kubectl, wait_phase

POOL = NODE_SETS / "pools" / "gpu-h100x8-pool.yaml"
LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # sigs.k8s.io/lws v0.7.0 api/leaderworkerset/v1 SetNameLabelKey
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module", autouse=True)
def lws_controller() -> None:
    """Skips the module, naming why, when the cluster runs no LeaderWorkerSet controller (e2e/up with E2E_LWS=0)."""
    res = kubectl("get", "crd", LWS_CRD, "-o", "name", check=False)  # stdout, then stderr
    if not res.startswith(f"customresourcedefinition.apiextensions.k8s.io/{LWS_CRD}"):
        pytest.skip(f"no {LWS_CRD} CRD: e2e/up runs the LeaderWorkerSet controller unless E2E_LWS=0")


@pytest.fixture(scope="module")
def h100_pool(wait_until: Any) -> Iterator[list[str]]:
    """Three more 8xH100 KWOK nodes (four with gpu-h100x8), Ready; deleted after the module."""
    kubectl("apply", "-f", str(POOL))
    names = [n.removeprefix("node/") for n in kubectl("get", "-f", str(POOL), "-o", "name").split()]
    assert len(names) >= 2, names
    kubectl("wait", "--for=condition=Ready", "--timeout=120s", *[f"node/{n}" for n in names])
    yield names
    kubectl("delete", "-f", str(POOL), "--wait=false", check=False)


def _pod_spec(role: str, gpus: int) -> dict[str, Any]:
    return {
        "tolerations": [KWOK_TOLERATION],
        "nodeSelector": {"inference-backend.dev/node-class": "h100x8"},
        "containers": [
            {
                "name": role,
                "image": "registry.example/ib-e2e/engine:1",
                "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus), "cpu": "1"}},
            }
        ],
    }


def leader_worker_set(name: str, namespace: str, size: int = 2, gpus: int = 8, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": {"metadata": {"labels": {"role": "leader"}}, "spec": _pod_spec("leader", gpus)},
                "workerTemplate": {"metadata": {"labels": {"role": "worker"}}, "spec": _pod_spec("worker", gpus)},
                **extra,
            },
        },
    }


def _pods(namespace: str, name: str) -> list[dict[str, Any]]:
    return get_json("pods", "-n", namespace, "-l", f"{NAME_LABEL}={name}")["items"]  # type: ignore[no-any-return]


def _ready(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def test_leaderworkerset_on_gpu_nodes(namespace: str, h100_pool: list[str], wait_until: Any) -> None:
    """A LeaderWorkerSet of size 2 with 8 GPUs per pod: the controller creates the leader StatefulSet, the leader pod,
    the worker StatefulSet and the worker pod; the scheduler places them on two distinct H100 nodes; KWOK makes them
    Ready and the LeaderWorkerSet reports its group ready. Deleting it garbage-collects everything."""
    t0 = time.monotonic()
    apply(leader_worker_set("llama", namespace))

    # The mutating webhook (reached by URL) filled in the defaults that only it sets (the CRD schema has none for
    # these: pkg/webhooks/leaderworkerset_webhook.go Default).
    spec = get_json("leaderworkerset", "llama", "-n", namespace)["spec"]
    assert spec["rolloutStrategy"]["type"] == "RollingUpdate", spec
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"]["maxUnavailable"] == 1, spec
    assert spec["networkConfig"]["subdomainPolicy"] == "Shared", spec

    def both_ready() -> list[dict[str, Any]] | None:
        pods = _pods(namespace, "llama")
        return pods if len(pods) == 2 and all(_ready(p) for p in pods) else None

    pods = wait_until("leader and worker pods Ready", both_ready, timeout=120)
    t_ready = time.monotonic() - t0
    by_role = {p["metadata"]["labels"]["role"]: p for p in pods}
    assert set(by_role) == {"leader", "worker"}, [p["metadata"]["name"] for p in pods]
    leader, worker = by_role["leader"], by_role["worker"]
    assert leader["metadata"]["name"] == "llama-0" and worker["metadata"]["name"] == "llama-0-1"
    assert leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "1"
    # The pod webhook ran on both: the group key label and the LWS_* environment it injects.
    for p in pods:
        assert p["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/group-key"), p["metadata"]["labels"]
        env = _env(p)
        assert env.get("LWS_GROUP_SIZE") == "2", env
        assert env.get("LWS_LEADER_ADDRESS", "").startswith(f"llama-0.llama.{namespace}"), env
    assert _env(worker)["LWS_WORKER_INDEX"] == "1"

    nodes = [p["spec"]["nodeName"] for p in pods]
    assert len(set(nodes)) == 2, f"leader and worker share a node: {nodes}"
    for n in nodes:
        node = get_json("node", n)
        assert node["metadata"]["labels"]["inference-backend.dev/node-class"] == "h100x8"
        assert node["status"]["allocatable"][GPU] == "8"

    # Owned objects: the leader StatefulSet (owned by the LeaderWorkerSet), the worker StatefulSet (owned by the
    # leader pod), the headless Service.
    sts = {s["metadata"]["name"]: s for s in get_json("statefulsets", "-n", namespace)["items"]}
    assert set(sts) == {"llama", "llama-0"}, sorted(sts)
    assert sts["llama"]["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"
    assert sts["llama-0"]["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    svc = get_json("service", "llama", "-n", namespace)
    assert svc["spec"]["clusterIP"] == "None"

    def lws_available() -> dict[str, Any] | None:
        st = get_json("leaderworkerset", "llama", "-n", namespace).get("status") or {}
        conds = {c["type"]: c["status"] for c in st.get("conditions") or []}
        return st if st.get("readyReplicas") == 1 and conds.get("Available") == "True" else None

    wait_until("LeaderWorkerSet Available with 1 ready group", lws_available, timeout=60)

    t1 = time.monotonic()
    kubectl("delete", "leaderworkerset", "llama", "-n", namespace, "--wait=false")

    def all_gone() -> bool:
        left = _pods(namespace, "llama") + get_json("statefulsets", "-n", namespace)["items"]
        left += [s for s in get_json("services", "-n", namespace)["items"] if s["metadata"]["name"] == "llama"]
        return not left and not get_json("leaderworkersets", "-n", namespace)["items"]

    wait_until("the LeaderWorkerSet's StatefulSets, pods and Service garbage-collected", all_gone, timeout=120)
    print(f"\nLeaderWorkerSet: pods Ready on {nodes} in {t_ready:.1f}s; deleted in {time.monotonic() - t1:.1f}s")


def test_validating_webhook_rejects(namespace: str) -> None:
    """The validating webhook answers: a subGroupSize larger than the group is refused by the controller's own
    check (pkg/webhooks/leaderworkerset_webhook.go), which the CRD schema cannot express."""
    doc = leader_worker_set("bad", namespace, subGroupPolicy={"subGroupSize": 3})
    out = apply(doc, check=False)
    assert "subGroupSize cannot be larger than size" in out, out
    assert "vleaderworkerset.kb.io" in out, out
    assert not get_json("leaderworkersets", "-n", namespace)["items"]


# ---------------------------------------------------------------- the operator's multi-node backend on the controller
# A bf16 405B model (about 756 GiB of weights) does not fit one 8xH100 node: the operator plans two nodes (tensor
# parallel 8 inside each, pipeline parallel 2 across) and renders a LeaderWorkerSet of size 2. Its weights come from a
# ReadOnlyMany claim (pvc://, bound by the `ns` fixture): downloaded into each pod's emptyDir they would request more
# ephemeral storage than these nodes have.
BIG = "multinode/vllm-llama-3-1-405b.yaml"


def _owner(obj: dict[str, Any]) -> tuple[str, str]:
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]
    assert len(refs) == 1, obj["metadata"]
    return refs[0]["kind"], refs[0]["name"]


def test_405b_backend_runs_on_the_leaderworkerset_controller(
    operator: Operator, ns: str, h100_pool: list[str], wait_until: Any
) -> None:
    """The operator's LeaderWorkerSet is run by the real controller: leader and worker pods on distinct H100 nodes, the
    backend Ready from the LeaderWorkerSet's status; deleting the backend garbage-collects the whole chain of
    ownerReferences (backend -> LeaderWorkerSet -> leader StatefulSet -> leader pod -> worker StatefulSet -> worker
    pod, and the Services)."""
    doc = example(BIG, ns)
    doc["spec"]["model"].update(uri="pvc://research-models/Llama-3.1-405B-Instruct", format="safetensors")
    doc["spec"]["model"].pop("credentialsSecret", None)
    name = doc["metadata"]["name"]
    t0 = time.monotonic()
    apply(doc)
    obj = wait_phase(wait_until, ns, name, "Ready", timeout=180)
    t_ready = time.monotonic() - t0
    placement = obj["status"]["decision"]["placement"]
    assert placement["nodes"] == 2 and placement["gpusPerNode"] == 8, placement

    (lws,) = get_json("leaderworkersets", "-n", ns)["items"]
    lws_name = lws["metadata"]["name"]
    assert _owner(lws) == ("InferenceBackend", name)
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert (lws.get("status") or {}).get("readyReplicas") == 1, lws.get("status")
    assert not get_json("deployments", "-n", ns)["items"], "a multi-node replica has no Deployment"

    pods = {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]: p for p in _pods(ns, lws_name)}
    assert set(pods) == {"0", "1"}, sorted(pods)
    leader, worker = pods["0"], pods["1"]
    assert all(_ready(p) for p in pods.values())
    nodes = [p["spec"]["nodeName"] for p in (leader, worker)]
    assert len(set(nodes)) == 2, f"leader and worker share a node: {nodes}"
    for p in (leader, worker):
        assert p["spec"]["containers"][0]["resources"]["limits"][GPU] == "8"
        node = get_json("node", p["spec"]["nodeName"])
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert _env(p)["LWS_LEADER_ADDRESS"] == f"{lws_name}-0.{lws_name}.{ns}"  # injected by the pod webhook

    # The chain that garbage collection follows, as the controller and the StatefulSet controller built it.
    sts = {s["metadata"]["name"]: s for s in get_json("statefulsets", "-n", ns)["items"]}
    assert set(sts) == {lws_name, f"{lws_name}-0"}, sorted(sts)
    assert _owner(sts[lws_name]) == ("LeaderWorkerSet", lws_name)
    assert _owner(leader) == ("StatefulSet", lws_name)
    assert _owner(sts[f"{lws_name}-0"]) == ("Pod", leader["metadata"]["name"])
    assert _owner(worker) == ("StatefulSet", f"{lws_name}-0")
    services = {s["metadata"]["name"]: s for s in get_json("services", "-n", ns)["items"]}
    assert _owner(services[name]) == ("InferenceBackend", name)
    assert _owner(services[lws_name]) == ("LeaderWorkerSet", lws_name)
    assert operator.alive()

    t1 = time.monotonic()
    kubectl("delete", "ib", name, "-n", ns, "--wait=false")

    def all_gone() -> bool:
        left = kubectl("get", "inferencebackends,leaderworkersets,statefulsets,pods,services", "-n", ns, "-o", "name")
        return not left.strip()

    wait_until("the backend, its LeaderWorkerSet, StatefulSets, pods and Services deleted", all_gone, timeout=120)
    print(f"\n405B backend: Ready in {t_ready:.1f}s on {nodes}; all deleted {time.monotonic() - t1:.1f}s after")
