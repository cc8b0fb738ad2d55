"""The CPU engines under a real kubelet (e2e/up --real-nodes): llama.cpp's llama-server, our ONNX Runtime server and our
PyTorch runner serve a tiny model the test makes, from the images of e2e/build-images, in a namespace that enforces
Pod Security restricted. The weights come through the real fetch init container (the operator image) from the local
S3 server (into an emptyDir) and the local Hub (into a cache volume: a claim bound to a hostPath volume), both
listening on this host's address on the pods' bridge. Each backend must be Ready, answer a completion through its
Service's ClusterIP (from this host: kube-proxy's nftables rules) and through its DNS name from a pod (CoreDNS), with
the greedy tokens of the same engine run directly on the same model.

Skipped, saying why, when the cluster has no real node (e2e/up without --real-nodes); in CI (CI=true) a run that asked
for real nodes (E2E_REAL_NODES > 0) fails instead.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from ib_testkit.cluster import Operator, apply, get_json, ib, kubectl, wait_phase
from ib_testkit.real_nodes import (
    OPERATOR_IMAGE,
    TINY_RESOURCES,
    TinyModels,
    direct,
    files_under,
    gateway,
    host_volume,
    real_hardware,
    real_nodes,
    restricted_namespace,
    run_pod,
    tiny_models,
)
from ib_testkit.stores import HubRepo, HubServer, S3Server, put_objects

PROMPT = "the quick brown fox"
MAX_TOKENS = 8
HUB_REPO = "ib-e2e/tiny-llama"


@pytest.fixture(scope="module")
def node() -> dict[str, Any]:
    nodes = real_nodes()
    if not nodes:
        why = "no Ready real node (e2e/up --real-nodes, or E2E_REAL_NODES=1 e2e/run-tests)"
        if os.environ.get("CI") and int(os.environ.get("E2E_REAL_NODES", "0") or 0) > 0:
            pytest.fail(why)
        pytest.skip(why)
    return nodes[0]


@pytest.fixture(scope="module")
def models() -> TinyModels:
    return tiny_models()


@pytest.fixture(scope="module")
def stores(node: dict[str, Any], models: TinyModels) -> Iterator[tuple[S3Server, HubServer]]:
    """The local S3 and Hub on the bridge address: the GGUF file and the ONNX directory in S3, the safetensors
    checkpoint as a Hub repository."""
    gw = gateway(node)
    s3 = S3Server(host=gw).start()
    put_objects(s3.endpoint, "models", [("tiny/model-f32.gguf", models.gguf.read_bytes()),
                                        *((f"tiny-onnx/{k}", v) for k, v in files_under(models.onnx))])  # fmt: skip
    hub = HubServer({HUB_REPO: HubRepo(dict(files_under(models.hf)))}, host=gw).start()
    yield s3, hub
    hub.stop()
    s3.stop()


@pytest.fixture
def rns(stores: tuple[S3Server, HubServer]) -> Iterator[str]:
    """A namespace enforcing Pod Security restricted, with the stores' credentials as Secrets."""
    s3, hub = stores
    name = restricted_namespace(f"ib-real-{uuid.uuid4().hex[:8]}")
    kubectl("create", "secret", "generic", "s3", "-n", name, "--from-literal=AWS_ACCESS_KEY_ID=test",
            "--from-literal=AWS_SECRET_ACCESS_KEY=test", f"--from-literal=AWS_ENDPOINT_URL={s3.endpoint}",
            "--from-literal=AWS_REGION=us-east-1")  # fmt: skip
    kubectl("create", "secret", "generic", "hub", "-n", name, "--from-literal=HF_TOKEN=x",
            f"--from-literal=HF_ENDPOINT={hub.endpoint}")  # fmt: skip
    yield name
    kubectl("delete", "ib", "--all", "-n", name, "--wait=true", "--timeout=60s", check=False)
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def _backend(name: str, model: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "serving.inferencebackend.io/v1alpha1", "kind": "InferenceBackend",
            "metadata": {"name": name},
            "spec": {"model": model, "hardware": real_hardware(),
                     "resources": TINY_RESOURCES, **spec}}  # fmt: skip


def _cache_claim(namespace: str) -> str:
    """A claim bound to a hostPath volume (world-writable: the fetch step writes as 65532)."""
    path = host_volume(namespace)
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{namespace}-cache"},
          "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                   "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(path)},
                   "claimRef": {"namespace": namespace, "name": "weights"}}}  # fmt: skip
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "weights", "namespace": namespace},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": f"{namespace}-cache",
                    "resources": {"requests": {"storage": "2Gi"}}}}  # fmt: skip
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [pv, pvc]}))
    return "weights"


def _cases(namespace: str, models: TinyModels) -> list[dict[str, Any]]:
    facts = models.facts()
    s3 = {"credentialsSecret": "s3", **facts}
    cache = {"claim": _cache_claim(namespace)}
    return [
        _backend(
            "llama",
            {"uri": "s3://models/tiny/model-f32.gguf", "format": "gguf", "quantization": "f32", **s3},
            backend="llamacpp",
        ),
        _backend("onnx", {"uri": "s3://models/tiny-onnx/", "format": "onnx", **s3}, backend="onnxruntime"),
        _backend(
            "torch",
            {"uri": f"hf://{HUB_REPO}", "format": "safetensors", "credentialsSecret": "hub", **facts, "cache": cache},
            backend="pytorch",
        ),
    ]


def _complete(url: str, model: str) -> dict[str, Any]:
    body = {"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0}
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_cpu_engines_serve_on_a_real_node(operator: Operator, rns: str, models: TinyModels, wait_until: Any) -> None:
    docs = _cases(rns, models)
    for doc in docs:
        doc["metadata"]["namespace"] = rns
        apply(doc)
    texts: dict[str, str] = {}
    for doc in docs:
        name = doc["metadata"]["name"]
        obj = wait_phase(wait_until, rns, name, "Ready", timeout=600)
        assert obj["status"]["ready"] == "1/1"
        pod = get_json("pods", "-n", rns, "-l", f"app.kubernetes.io/instance={name}")["items"][0]
        assert pod["spec"]["nodeName"] == real_nodes()[0]["metadata"]["name"]
        assert all(s["ready"] for s in pod["status"]["containerStatuses"])
        svc = get_json("service", name, "-n", rns)
        out = _complete(f"http://{svc['spec']['clusterIP']}:8000", name)
        texts[name] = out["choices"][0]["text"]
        assert out["usage"]["completion_tokens"] == MAX_TOKENS, out
    # The same completions through the Services' DNS names, from a pod (restricted, the operator image's Python).
    code = (
        "import json, sys, urllib.request\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        f"    body = json.dumps({{'model': name, 'prompt': {PROMPT!r}, 'max_tokens': {MAX_TOKENS},"
        " 'temperature': 0})\n"
        f"    req = urllib.request.Request(f'http://{{name}}.{rns}.svc.cluster.local:8000/v1/completions',"
        " body.encode(), {'Content-Type': 'application/json'})\n"
        "    out[name] = json.load(urllib.request.urlopen(req, timeout=60))['choices'][0]['text']\n"
        "print(json.dumps(out))\n"
    )
    phase, log = run_pod(rns, "dns-probe", OPERATOR_IMAGE, ["python", "-c", code, *texts])
    assert phase == "Succeeded", log
    assert json.loads(log.strip().splitlines()[-1]) == texts
    # Greedy tokens equal the same engine's, run directly on this host with the args the pod got.
    local = {"llama": models.gguf, "onnx": models.onnx, "torch": models.hf}
    for name, text in texts.items():
        container = get_json("deployment", name, "-n", rns)["spec"]["template"]["spec"]["containers"][0]
        with direct(container, local[name]) as url:
            assert _complete(url, name)["choices"][0]["text"] == text, name
    for name in texts:
        assert "Ready" in kubectl("describe", "ib", name, "-n", rns)
        assert ib(rns, name)["status"]["phase"] == "Ready"
