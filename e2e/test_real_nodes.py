"""The CPU engines under a real kubelet (e2e/up --real-nodes): llama.cpp's llama-server, our ONNX Runtime server and our
PyTorch runner serve a tiny model the test makes, from the images of e2e/build-images, in a namespace that enforces
Pod Security restricted. The weights come through the real fetch init container (the operator image) from the local
S3 server listening on this host's address on the pods' bridge: into an emptyDir (GGUF, ONNX) and into a cache volume
(safetensors: a claim bound to a hostPath volume); hf:// from the local Hub is e2e/test_real_hub.py's. Each backend
must be Ready, answer a completion through its Service's ClusterIP (from this host: kube-proxy's nftables rules) and
through its DNS name from a pod (CoreDNS), with the greedy tokens of the same engine run directly on the same model.
Then faults as the kubelet reports them (OOMKilled, CrashLoopBackOff, ImagePullBackOff) and a deleted pod.
Last, user text holding $(VAR) (a uri, a servedName) reaches the fetch step and the engine literally: the real
kubelet does not expand what the operator escaped (issue 31).

Skipped, saying why, when the cluster has no real node (e2e/up without --real-nodes); in CI (CI=true) a run that asked
for real nodes (E2E_REAL_NODES > 0) fails instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from ib_testkit import ROOT
from ib_testkit.cluster import Operator, apply, get_json, ib, kubectl, wait_phase
from ib_testkit.real_nodes import (
    OPERATOR_IMAGE,
    TINY_FACTS,
    TinyModels,
    completion,
    direct,
    files_under,
    host_volume,
    real_backend,
    real_nodes,
    run_pod,
    runners_python,
)
from ib_testkit.stores import S3Server, put_objects

PROMPT = "the quick brown fox"
MAX_TOKENS = 8


def _cache_claim(namespace: str) -> str:
    """A claim bound to a hostPath volume (world-writable: the fetch step writes as 65532)."""
    path = host_volume(namespace)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-cache"},
        "spec": {
            "capacity": {"storage": "2Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path)},
            "claimRef": {"namespace": namespace, "name": "weights"},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "weights", "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": f"{namespace}-cache",
            "resources": {"requests": {"storage": "2Gi"}},
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [pv, pvc]}))
    return "weights"


def _case(engine: str, namespace: str) -> dict[str, Any]:
    s3 = {"credentialsSecret": "s3", **TINY_FACTS}
    if engine == "llamacpp":
        model = {"uri": "s3://models/tiny/model-f32.gguf", "format": "gguf", "quantization": "f32", **s3}
    elif engine == "onnxruntime":
        model = {"uri": "s3://models/tiny-onnx/", "format": "onnx", **s3}
    else:  # into a cache volume
        model = {
            "uri": "s3://models/tiny-hf/",
            "format": "safetensors",
            **s3,
            "cache": {"pvc": _cache_claim(namespace)},
        }
    return real_backend(engine, model, backend=engine)


def _complete(url: str, model: str) -> dict[str, Any]:
    return completion(url, model, PROMPT, MAX_TOKENS)


ENGINES = ["llamacpp", "onnxruntime", "pytorch"]


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_serves_on_a_real_node(
    operator: Operator, rns: str, models: TinyModels, wait_until: Any, engine: str
) -> None:
    doc = _case(engine, rns)
    doc["metadata"]["namespace"] = rns
    apply(doc)
    obj = wait_phase(wait_until, rns, engine, "Ready", timeout=600)
    assert obj["status"]["ready"] == "1/1" and obj["status"]["backend"] == engine
    pod = get_json("pods", "-n", rns, "-l", f"app.kubernetes.io/instance={engine}")["items"][0]
    assert pod["spec"]["nodeName"] == real_nodes()[0]["metadata"]["name"]
    assert all(s["ready"] for s in pod["status"]["containerStatuses"])
    if pod["spec"].get("initContainers"):  # the real fetch step ran, as the operator image's user
        assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    svc = get_json("service", engine, "-n", rns)
    out = _complete(f"http://{svc['spec']['clusterIP']}:8000", engine)
    assert out["usage"]["completion_tokens"] == MAX_TOKENS, out
    text = out["choices"][0]["text"]
    # The same completion through the Service's DNS name, from a pod (restricted, the operator image's Python).
    code = (
        "import json, sys, urllib.request\n"
        f"body = json.dumps({{'model': {engine!r}, 'prompt': {PROMPT!r}, 'max_tokens': {MAX_TOKENS},"
        " 'temperature': 0}).encode()\n"
        f"url = 'http://{engine}.{rns}.svc.cluster.local:8000/v1/completions'\n"
        "req = urllib.request.Request(url, body, {'Content-Type': 'application/json'})\n"
        "print(json.dumps(json.load(urllib.request.urlopen(req, timeout=60))['choices'][0]['text']))\n"
    )
    phase, log = run_pod(rns, "dns-probe", OPERATOR_IMAGE, ["python", "-c", code])
    assert phase == "Succeeded", log
    assert json.loads(log.strip().splitlines()[-1]) == text
    # Greedy tokens equal the same engine's, run directly on this host with the args the pod got.
    local = {"llamacpp": models.gguf, "onnxruntime": models.onnx, "pytorch": models.hf}[engine]
    container = get_json("deployment", engine, "-n", rns)["spec"]["template"]["spec"]["containers"][0]
    with direct(container, local) as url:
        assert _complete(url, engine)["choices"][0]["text"] == text
    assert "Ready" in kubectl("describe", "ib", engine, "-n", rns)


def _described_within(wait_until: Any, namespace: str, name: str, texts: list[str], timeout: float = 300) -> str:
    """Polls ``kubectl describe ib`` until every text is in it."""

    def check() -> str | None:
        described = kubectl("describe", "ib", name, "-n", namespace)
        return described if all(t in described for t in texts) else None

    return wait_until(f"{namespace}/{name} described with {texts}", check, timeout=timeout)  # type: ignore[no-any-return]


def test_faults_as_a_kubelet_makes_them(operator: Operator, rns: str, wait_until: Any) -> None:
    """What a real kubelet reports reaches `kubectl describe ib`: a runner whose memory limit its own start exceeds
    (OOMKilled), one that exits at once (an unknown flag: CrashLoopBackOff with its exit code), an image that was never
    imported (ImagePullBackOff naming it: every registry is 127.0.0.1:9 on the real nodes)."""
    model = {"uri": "s3://models/tiny-onnx/", "format": "onnx", "credentialsSecret": "s3", **TINY_FACTS}
    missing = "localhost/ib-e2e/not-imported:0"
    cases = {
        "oom": real_backend(
            "oom",
            model,
            backend="onnxruntime",
            resources={"requests": {"cpu": "100m", "memory": "48Mi"}, "limits": {"memory": "48Mi"}},
        ),
        "crash": real_backend("crash", model, backend="onnxruntime", engine={"extraArgs": ["--no-such-flag"]}),
        "pull": real_backend("pull", model, backend="onnxruntime", engine={"image": missing}),
    }
    for doc in cases.values():
        doc["metadata"]["namespace"] = rns
        apply(doc)
    _described_within(wait_until, rns, "oom", ["OOMKilled", "killed for exceeding its memory"])
    _described_within(wait_until, rns, "crash", ["CrashLoopBackOff", "keeps exiting (exit code 2"])
    _described_within(wait_until, rns, "pull", ["ImagePullBackOff", f'cannot pull image "{missing}"'])
    for name in cases:
        assert ib(rns, name)["status"]["phase"] != "Ready", name


def test_a_deleted_pod_is_degraded_then_ready(operator: Operator, rns: str, wait_until: Any) -> None:
    """Two replicas serving; one pod deleted: the backend is Degraded (1/2, its Service still answering) until the
    ReplicaSet's new pod passes its readiness probe on the real node, then Ready 2/2 again."""
    model = {"uri": "s3://models/tiny-onnx/", "format": "onnx", "credentialsSecret": "s3", **TINY_FACTS}
    doc = real_backend("two", model, backend="onnxruntime", replicas=2)
    doc["metadata"]["namespace"] = rns
    apply(doc)
    wait_phase(wait_until, rns, "two", "Ready", timeout=600)
    pods = get_json("pods", "-n", rns, "-l", "app.kubernetes.io/instance=two")["items"]
    kubectl("delete", "pod", pods[0]["metadata"]["name"], "-n", rns, "--wait=false")
    degraded = wait_phase(wait_until, rns, "two", "Degraded", timeout=60)
    assert degraded["status"]["ready"] == "1/2", degraded["status"]
    svc = get_json("service", "two", "-n", rns)
    assert _complete(f"http://{svc['spec']['clusterIP']}:8000", "two")["usage"]["completion_tokens"] == MAX_TOKENS
    ready = wait_phase(wait_until, rns, "two", "Ready", timeout=300)
    assert ready["status"]["ready"] == "2/2"


def test_user_text_reaches_the_containers_unexpanded(
    operator: Operator, rns: str, store: S3Server, models: TinyModels, wait_until: Any
) -> None:
    """Issue 31 under a real kubelet: the kubelet expands ``$(VAR)`` in a container's command, args and env values
    from that container's environment, so a uri or a servedName holding ``$(NAME)`` of a variable the container has
    would leak it (the fetch init container's AWS_SECRET_ACCESS_KEY into the S3 path it requests; the engine's
    HF_TOKEN into the model name it serves). The operator renders ``$$(`` (tests/test_expansion.py): here the real
    kubelet turns that into the literal text. The fetch step requests, and finds, only the objects whose keys hold
    the literal ``$(AWS_SECRET_ACCESS_KEY)``; the engine, whose HF_TOKEN holds the secret (checked inside it), serves
    the literal name."""
    secret = f"ib-secret-{uuid.uuid4().hex[:12]}"
    kubectl(
        "create",
        "secret",
        "generic",
        "hostile",
        "-n",
        rns,
        "--from-literal=AWS_ACCESS_KEY_ID=test",
        f"--from-literal=AWS_SECRET_ACCESS_KEY={secret}",
        f"--from-literal=AWS_ENDPOINT_URL={store.endpoint}",
        "--from-literal=AWS_REGION=us-east-1",
    )
    prefix = "tiny-onnx-$(AWS_SECRET_ACCESS_KEY)"
    put_objects(store.endpoint, "models", [(f"{prefix}/{k}", v) for k, v in files_under(models.onnx)])
    served = "tiny-$(HF_TOKEN)"
    model = {
        "uri": f"s3://models/{prefix}/",
        "format": "onnx",
        "credentialsSecret": "hostile",
        "servedName": served,
        **TINY_FACTS,
    }
    from_secret = {"secretKeyRef": {"name": "hostile", "key": "AWS_SECRET_ACCESS_KEY"}}
    doc = real_backend(
        "literal", model, backend="onnxruntime", engine={"env": [{"name": "HF_TOKEN", "valueFrom": from_secret}]}
    )
    doc["metadata"]["namespace"] = rns
    apply(doc)
    wait_phase(wait_until, rns, "literal", "Ready", timeout=600)
    pod = get_json("pods", "-n", rns, "-l", "app.kubernetes.io/instance=literal")["items"][0]
    init = pod["spec"]["initContainers"][0]
    assert "AWS_SECRET_ACCESS_KEY" in {e["name"] for e in init["env"]}  # the variable was there to expand
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    gets = [r.path for r in store.object_gets("tiny-onnx-")]
    assert gets and all(prefix in p for p in gets) and not any(secret in p for p in gets), gets
    code = "import os; print(os.environ['HF_TOKEN'])"
    env = kubectl("exec", "-n", rns, pod["metadata"]["name"], "-c", "onnxruntime", "--", "python", "-c", code)
    assert env.strip() == secret  # the engine has the variable the served name names
    svc = get_json("service", "literal", "-n", rns)
    url = f"http://{svc['spec']['clusterIP']}:8000"
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as r:
        ids = [m["id"] for m in json.load(r)["data"]]
    assert served in ids and not any(secret in i for i in ids), ids
    assert _complete(url, served)["usage"]["completion_tokens"] == MAX_TOKENS


MAKE_ADAPTERS = (
    "import sys; from pathlib import Path; from ib_testkit.lora import make_adapter;"
    " base, out = map(Path, sys.argv[1:]); make_adapter(base, out / 'sql', 1, 4, ['q_proj', 'v_proj']);"
    " make_adapter(base, out / 'poems', 2, 8, ['q_proj', 'v_proj', 'o_proj'])"
)


def _adapters(models: TinyModels, out: Path) -> Path:
    """Two random PEFT adapters of the tiny model (ranks 4 and 8), made with peft in the runners venv."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT / "testkit")])}
    subprocess.run(
        [str(runners_python()), "-c", MAKE_ADAPTERS, str(models.hf), str(out)],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


def _runner_pod(namespace: str, name: str) -> tuple[str, str, int]:
    """(name, uid, the engine container's restarts) of the backend's one pod."""
    (pod,) = get_json("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={name}")["items"]
    restarts = {s["name"]: s["restartCount"] for s in pod["status"]["containerStatuses"]}
    return pod["metadata"]["name"], pod["metadata"]["uid"], restarts["pytorch"]


def _serves(wait_until: Any, namespace: str, name: str, pod: str, adapters: list[str]) -> dict[str, Any]:
    """Waits until status.adapters says ``pod`` serves exactly ``adapters`` and AdaptersLoaded is True."""

    def check() -> dict[str, Any] | None:
        obj = get_json("ib", name, "-n", namespace)
        st = obj.get("status") or {}
        cond = {c["type"]: c for c in st.get("conditions") or []}.get("AdaptersLoaded") or {}
        ok = st.get("adapters") == [{"pod": pod, "adapters": adapters}] and cond.get("status") == "True"
        return obj if ok else None

    # the kubelet refreshes a mounted ConfigMap on its pod sync (about a minute), then the sidecar fetches and loads
    return wait_until(f"{namespace}/{name} status.adapters {pod}: {adapters}", check, timeout=300)  # type: ignore[no-any-return]


def _answers(wait_until: Any, namespace: str, url: str, model: str) -> dict[str, Any]:
    """The first completion through the Service, retried while kube-proxy has not programmed it yet (connection
    refused); on a timeout the Service's EndpointSlices and the pod's status are printed."""

    def check() -> dict[str, Any] | None:
        try:
            return _complete(url, model)
        except OSError:
            return None

    try:
        return wait_until(f"{url} answers {model}", check, timeout=120)  # type: ignore[no-any-return]
    except BaseException:
        print(kubectl("get", "endpointslices,pods", "-n", namespace, "-o", "yaml", check=False))
        for pod in get_json("pods", "-n", namespace)["items"]:
            ip = pod["status"].get("podIP")
            try:
                print("through the pod's address:", _complete(f"http://{ip}:8000", model))
            except Exception as exc:
                print("through the pod's address:", ip, exc)
        raise


def _logged(namespace: str, pod: str, url: str, model: str) -> dict[str, Any]:
    """A completion (3 minutes at most); if it fails, the engine's and the sidecar's last log lines are printed."""
    try:
        return completion(url, model, PROMPT, MAX_TOKENS, timeout=180)
    except BaseException:
        for c in ("pytorch", "adapters"):
            print(f"--- {c}:", kubectl("logs", "-n", namespace, pod, "-c", c, "--tail=60", check=False))
        raise


def test_adapters_are_loaded_and_unloaded_while_the_pod_serves(
    operator: Operator,
    rns: str,
    store: S3Server,
    models: TinyModels,
    wait_until: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 34: spec.adapters on our PyTorch runner under a real kubelet. The adapters sidecar (the operator image)
    fetches each adapter the ConfigMap lists from the local S3 and loads it through the runner's
    /v1/load_lora_adapter: adding one and removing one change no pod template, so the same pod (name, uid, no
    restart) serves the new adapter with the tokens the same runner gives with it loaded at start, and no longer
    serves the removed one (404); status.adapters lists what the pod serves, read by the operator from its engine."""
    local = _adapters(models, tmp_path / "adapters")
    put_objects(
        store.endpoint, "adapters", [(f"{n}/{k}", v) for n in ("sql", "poems") for k, v in files_under(local / n)]
    )
    sql = {"name": "sql", "uri": "s3://adapters/sql/", "rank": 4}
    poems = {"name": "poems", "uri": "s3://adapters/poems/", "rank": 8}
    model = {"uri": "s3://models/tiny-hf/", "format": "safetensors", "credentialsSecret": "s3", **TINY_FACTS}
    doc = real_backend("lora", model, backend="pytorch", adapters=[sql])
    doc["metadata"]["namespace"] = rns
    apply(doc)
    wait_phase(wait_until, rns, "lora", "Ready", timeout=600)
    pod, uid, restarts = _runner_pod(rns, "lora")
    assert restarts == 0
    template = get_json("deployment", "lora", "-n", rns)["spec"]["template"]
    assert "--adapter" not in template["spec"]["containers"][0]["args"]
    _serves(wait_until, rns, "lora", pod, ["sql"])
    # the pod's own address, as the operator reads it: through the Service's ClusterIP from this host one run timed
    # out at connect (no request reached the runner, which answered on this address) while another real-node
    # cluster ran on the host; test_engine_serves_on_a_real_node covers the Service
    ip = get_json("pod", pod, "-n", rns)["status"]["podIP"]
    url = f"http://{ip}:8000"
    texts = {m: _answers(wait_until, rns, url, m)["choices"][0]["text"] for m in ("lora", "sql")}

    # added: the ConfigMap changes, the pod template does not
    doc["spec"]["adapters"] = [sql, poems]
    apply(doc)
    _serves(wait_until, rns, "lora", pod, ["poems", "sql"])
    assert _runner_pod(rns, "lora") == (pod, uid, 0)
    assert get_json("deployment", "lora", "-n", rns)["spec"]["template"] == template
    texts["poems"] = _logged(rns, pod, url, "poems")["choices"][0]["text"]
    assert len(set(texts.values())) == 3, texts  # each adapter changes the greedy tokens of the base model
    # the same runner run directly, with both adapters given at start (and the same switch): the same tokens
    container = {**template["spec"]["containers"][0]}
    container["args"] = [
        *container["args"],
        "--adapter",
        f"sql={local / 'sql'}",
        "--adapter",
        f"poems={local / 'poems'}",
    ]
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
    with direct(container, models.hf) as here:
        assert {m: _complete(here, m)["choices"][0]["text"] for m in texts} == texts

    # removed: unloaded, the other adapter and the base model unchanged
    doc["spec"]["adapters"] = [poems]
    apply(doc)
    _serves(wait_until, rns, "lora", pod, ["poems"])
    assert _runner_pod(rns, "lora") == (pod, uid, 0)
    with pytest.raises(AssertionError, match="answered 404"):
        _complete(url, "sql")
    assert _logged(rns, pod, url, "poems")["choices"][0]["text"] == texts["poems"]
    assert _logged(rns, pod, url, "lora")["choices"][0]["text"] == texts["lora"]
    assert get_json("ib", "lora", "-n", rns)["status"]["phase"] == "Ready"
