"""The real nodes of the local cluster (``e2e/up --real-nodes``): a kubelet with containerd on this machine, whose pods
run the images of e2e/build-images. What the e2e tests and hack/demo share to use them:

    nodes = real_nodes()                      # Ready nodes labelled REAL_NODE_LABEL=true (none: e2e/up without them)
    gw = gateway(nodes[0])                    # this host's address on the pods' bridge (local stores listen there)
    models = tiny_models()                    # one random tiny Llama as safetensors, ONNX and GGUF (cached)
    spec["hardware"] = real_hardware()        # CPU, on the real nodes only (KWOK's tainted nodes are not candidates)
    out = run_pod(ns, "probe", OPERATOR_IMAGE, ["python", "-c", "..."])   # a one-off pod, Pod Security restricted

Pods reach this host's bridge address, each other and Services (ClusterIP, and names through CoreDNS), nothing else;
this host reaches pods and ClusterIPs (kube-proxy's nftables rules)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ib_testkit import ROOT, free_port, stop_process
from ib_testkit.cluster import get_json, kubectl

REAL_NODE_LABEL = "inference-backend.dev/e2e-real-node"
"""The label e2e/up's kubelets register their nodes with (value "true"), and their taint's key."""
REAL_NODE_TOLERATION = {"key": REAL_NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
"""The real nodes are tainted (NoSchedule): KWOK tests' selections never see them; what runs there tolerates it."""
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
"""Namespace labels: the API server's PodSecurity admission enforces the restricted profile there."""
OPERATOR_IMAGE = "ghcr.io/inference-backend/operator:0.1.0"
"""The operator image (Python, `inference-backend fetch`) of e2e/build-images: what a probe pod runs."""
TINY = "tiny"
"""bench/bench_model.py's preset of the tiny models (2 layers, hidden 64, vocabulary 320, context 512, float32)."""
TINY_FACTS: dict[str, Any] = {
    "architecture": "LlamaForCausalLM",
    "parameters": "0.12M",
    "dtype": "float32",
    "contextLength": 512,
}
"""spec.model fields of the TINY preset (115,008 parameters: 2 layers of hidden 64, 4 heads, 2 KV heads of 16, an
MLP of 128, untied embeddings of 320 x 64)."""


TINY_RESOURCES: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
"""spec.resources for a tiny model on a real node: a CPU placement takes 90% of the node's cores, and a runner with
dynamic batching all of its memory for its KV cache (the selection's plan); a tiny model needs neither, and this way
the three CPU engines fit one node of this 2-core machine together."""


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def real_nodes() -> list[dict[str, Any]]:
    """The Ready real nodes of the cluster of $KUBECONFIG, by name."""
    items = get_json("nodes", "-l", f"{REAL_NODE_LABEL}=true")["items"]
    return sorted((n for n in items if _ready(n)), key=lambda n: n["metadata"]["name"])


def real_node_or_skip() -> dict[str, Any]:
    """The first Ready real node. Without one the test skips, saying why, unless the run asked for real nodes
    (E2E_REAL_NODES > 0, as make test and .ci/run do): then their absence is a failure, never a quiet skip."""
    nodes = real_nodes()
    if nodes:
        return nodes[0]
    why = "no Ready real node (e2e/up --real-nodes, or E2E_REAL_NODES=1 e2e/run-tests)"
    if int(os.environ.get("E2E_REAL_NODES", "0") or 0) > 0:
        pytest.fail(f"E2E_REAL_NODES={os.environ['E2E_REAL_NODES']} but {why}")
    pytest.skip(why)


def gateway(node: dict[str, Any]) -> str:
    """The node's InternalIP: this host's address on the pods' bridge."""
    addresses = node["status"].get("addresses") or []
    return str(next(a["address"] for a in addresses if a["type"] == "InternalIP"))


def bridge_network(node: dict[str, Any]) -> ipaddress.IPv4Network:
    """The pods' subnet: the network of this host's bridge holding the node's InternalIP (``ip -j addr``), where the
    CNI bridge plugin gives the node's pods their IPs."""
    gw = gateway(node)
    links = json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=True).stdout)
    for link in links:
        for a in link.get("addr_info", []):
            if a.get("local") == gw:
                return ipaddress.IPv4Network(f"{gw}/{a['prefixlen']}", strict=False)
    raise AssertionError(f"no interface of this host holds {gw}, the InternalIP of {node['metadata']['name']}")


def real_hardware(**extra: Any) -> dict[str, Any]:
    """spec.hardware for a backend on the real nodes: CPU, only the nodes with REAL_NODE_LABEL, their taint
    tolerated."""
    return {
        "accelerator": "cpu",
        "nodeSelector": {REAL_NODE_LABEL: "true"},
        "tolerations": [REAL_NODE_TOLERATION],
        **extra,
    }


def real_backend(name: str, model: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """An InferenceBackend ``name`` serving ``model`` on the real nodes (real_hardware, TINY_RESOURCES), with the other
    spec fields given; its namespace is the caller's to set."""
    return {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": name},
        "spec": {"model": model, "hardware": real_hardware(), "resources": TINY_RESOURCES, **spec},
    }


def restricted_namespace(name: str) -> str:
    """Create namespace ``name`` with Pod Security restricted enforced (RESTRICTED); returns the name."""
    doc = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {**RESTRICTED, "inference-backend.dev/e2e": "true"}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(doc))
    return name


@dataclass(frozen=True)
class TinyModels:
    """One random-weight tiny Llama (bench/bench_model.py's TINY preset) in the three formats of the CPU engines."""

    hf: Path
    """config.json, model.safetensors, tokenizer files: the PyTorch runner's."""
    onnx: Path
    """The ONNX Runtime server's directory (our exporter's model.onnx, config, tokenizer)."""
    gguf: Path
    """llama.cpp's convert_hf_to_gguf.py of ``hf`` (f32): llama-server's."""

    def facts(self) -> dict[str, Any]:
        """spec.model fields that describe it (TINY_FACTS)."""
        return dict(TINY_FACTS)


def runners_python() -> Path:
    """The runners venv's python (hack/runners-venv creates it once; it prints its path last)."""
    out = subprocess.run([str(ROOT / "hack/runners-venv")], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"hack/runners-venv failed: {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1]) / "bin" / "python"


def tiny_models(out: Path | None = None) -> TinyModels:
    """Make (or reuse: bench_model keeps complete outputs) the tiny models under ``out`` (default
    $IB_CACHE/e2e-models/tiny), with torch, transformers and onnx of the runners venv and llama.cpp's converter from
    hack/build-llama-server's source tree."""
    cache = Path(os.environ.get("IB_CACHE", Path.home() / ".cache/inference-backend"))
    out = out or cache / "e2e-models" / TINY
    code = (
        "import sys; from pathlib import Path; from bench.bench_model import PRESETS, make_safetensors, export_onnx, "
        "convert_gguf; m = PRESETS[sys.argv[2]]; out = Path(sys.argv[1]); hf = make_safetensors(m, out / 'hf'); "
        "export_onnx(hf, out / 'onnx'); convert_gguf(hf, out / 'model-f32.gguf', m.dtype)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "operator"), str(ROOT / "testkit")])}
    res = subprocess.run(
        [str(runners_python()), "-c", code, str(out), TINY],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if res.returncode != 0:
        raise RuntimeError(f"making the tiny models failed:\n{(res.stdout + res.stderr)[-4000:]}")
    return TinyModels(hf=out / "hf", onnx=out / "onnx", gguf=out / "model-f32.gguf")


def host_volume(name: str) -> Path:
    """A directory for a hostPath volume of the real nodes' pods, writable by any uid (the fetch step runs as 65532,
    the runners as 10001): under /tmp/ib-e2e-volumes, outside $E2E_DIR and $HOME, whose modes (0700) a pod's user
    cannot traverse. Emptied if it exists."""
    base = Path("/tmp/ib-e2e-volumes")
    base.mkdir(exist_ok=True)
    base.chmod(0o755)
    path = base / name
    if path.exists():
        subprocess.run(["rm", "-rf", str(path)], check=True)
    path.mkdir()
    path.chmod(0o777)
    return path


def files_under(root: Path) -> list[tuple[str, bytes]]:
    """(relative path, content) of every file under ``root`` but bench_model's markers: what a store serves."""
    return [
        (str(p.relative_to(root)), p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "ib_bench_model.json"
    ]


def restricted_pod(name: str, image: str, command: list[str], **spec: Any) -> dict[str, Any]:
    """A one-off pod on a real node that Pod Security restricted admits (non-root, no privilege escalation, no
    capabilities, RuntimeDefault seccomp), never restarted."""
    container = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {REAL_NODE_LABEL: "true"},
            "tolerations": [REAL_NODE_TOLERATION],
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            **spec,
        },
    }


def run_pod(namespace: str, name: str, image: str, command: list[str], timeout: float = 180) -> tuple[str, str]:
    """Run ``command`` in a restricted_pod and wait for it to end: (phase, its log). The pod is deleted after."""
    kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(restricted_pod(name, image, command)))
    try:
        deadline, phase = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            phase = kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.status.phase}", check=False).strip()
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(1)
        else:
            describe = kubectl("describe", "pod", name, "-n", namespace, check=False)
            raise AssertionError(f"pod {namespace}/{name} still {phase or 'absent'} after {timeout:.0f}s:\n{describe}")
        return phase, kubectl("logs", name, "-n", namespace, check=False)
    finally:
        kubectl("delete", "pod", name, "-n", namespace, "--wait=false", "--ignore-not-found", check=False)


def completion(url: str, model: str, prompt: str, max_tokens: int, timeout: float = 60) -> dict[str, Any]:
    """A greedy /v1/completions request to the OpenAI-compatible server at ``url``: its JSON answer."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{url}/v1/completions answered {e.code}: {e.read()[:500]!r}") from e


def _replace_value(args: list[str], flags: tuple[str, ...], value: str) -> list[str]:
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a in flags:
            out[i + 1] = value
    return out


@contextlib.contextmanager
def direct(container: dict[str, Any], model: Path) -> Iterator[str]:
    """The engine of a rendered container run directly on this host, with the container's own args (the model path,
    host and port replaced by local ones): llama-server from hack/build-llama-server, our runners in the runners
    venv. Yields its base URL; stops it after."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    port = free_port()
    args = _replace_value(_replace_value(args, ("--host",), "127.0.0.1"), ("--port",), str(port))
    if command and command[0].endswith("llama-server"):
        from ib_testkit.llama_server import start_llama_server

        with start_llama_server(args, {}, model=model, port=port) as srv:
            yield srv.base_url
        return
    # the command is one of the product's console scripts (ib-pytorch-runner, ib-onnxruntime-server): the runners
    # venv has them, and this clone's operator/ goes first on its PYTHONPATH
    script = runners_python().parent / command[0]
    argv = [str(script), *command[1:], *_replace_value(args, ("--model",), str(model))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT / "testkit")])}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 300
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"{' '.join(argv)} not healthy:\n{log.read().decode(errors='replace')[-3000:]}")
                with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/health") as r:
                    if r.status == 200:
                        break
                time.sleep(0.5)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(proc, timeout=30)
