"""The demo's real CPU node (hack/demo, e2e/up --real-nodes=1): the CPU examples of docs/examples/ (llama.cpp, the ONNX
Runtime server, the PyTorch runner) served there with the tiny models of ib_testkit.real_nodes, and one completion from
each through its Service.

    path = publish_models(models, "demo")     # the tiny models where the node's pods can read them (a hostPath)
    docs = model_claim("demo", path)          # a PersistentVolume on that path and its claim
    doc = on_real_node(doc)                   # an example rewritten for the real node (None: not a CPU example)
    for line in completions("demo"): print(line)

The examples keep their names, engine choice, batching and prefix cache; what only a real model has goes: the model
becomes the tiny one of the same format (pvc:// in MODEL_CLAIM), a served name naming the real model is dropped,
the GGUF draft of llama-edge (another model: a 1B Llama) and its q8_0 KV cache (llama.cpp needs a head size divisible
by q8_0's block of 32; the tiny model's is 16) are left out."""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ib_testkit.cluster import get_json
from ib_testkit.real_nodes import (
    TINY_FACTS,
    TINY_RESOURCES,
    TinyModels,
    completion,
    host_volume,
    real_hardware,
)

MODEL_CLAIM = "tiny-models"
"""The claim (ReadOnlyMany, bound to a hostPath volume) holding the tiny models in the demo's namespace."""
CPU_EXAMPLES: dict[str, dict[str, Any]] = {
    "llama-edge": {"uri": f"pvc://{MODEL_CLAIM}/model-f32.gguf", "format": "gguf", "quantization": "f32"},
    "phi3-onnx": {"uri": f"pvc://{MODEL_CLAIM}/onnx", "format": "onnx"},
    "research-gpt": {"uri": f"pvc://{MODEL_CLAIM}/hf", "format": "safetensors"},
}
"""The examples the real node serves (by name: llamacpp-cpu-gguf, onnxruntime-phi-3, pytorch-research) and their
tiny model."""
DROPPED = ("speculativeDecoding", "kvCache")
"""spec fields of the CPU examples that only their real model allows (see the module's docstring)."""
PROMPT = "the quick brown fox"
MAX_TOKENS = 8


def publish_models(models: TinyModels, namespace: str) -> Path:
    """Copies the tiny models into a world-readable host directory (the engines run as 10001 or 65534): the GGUF file,
    onnx/ and hf/ (bench_model's markers left out). Returns the directory."""
    path = host_volume(f"{namespace}-models")
    shutil.copyfile(models.gguf, path / "model-f32.gguf")
    for sub, src in (("onnx", models.onnx), ("hf", models.hf)):
        shutil.copytree(src, path / sub, ignore=shutil.ignore_patterns("ib_bench_model.json"))
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return path


def model_claim(namespace: str, path: Path) -> list[dict[str, Any]]:
    """A PersistentVolume on ``path`` (the real node is this machine) and MODEL_CLAIM bound to it, read-only."""
    pv_name = f"{namespace}-{MODEL_CLAIM}"
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": MODEL_CLAIM},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": MODEL_CLAIM, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return [pv, pvc]


def on_real_node(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The CPU example ``doc`` rewritten to serve its tiny model on the real node; None for any other document."""
    if doc.get("kind") != "InferenceBackend" or doc["metadata"]["name"] not in CPU_EXAMPLES:
        return None
    out = copy.deepcopy(doc)
    spec = out["spec"]
    spec["model"] = {**CPU_EXAMPLES[doc["metadata"]["name"]], **TINY_FACTS}
    spec["hardware"] = real_hardware()
    spec["resources"] = copy.deepcopy(TINY_RESOURCES)
    for key in DROPPED:
        spec.pop(key, None)
    return out


def _serving_pod(namespace: str, name: str) -> dict[str, Any]:
    pods = get_json("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={name}")["items"]
    ready = [p for p in pods if all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])]
    if not ready:
        raise RuntimeError(f"no ready pod of {namespace}/{name}")
    return ready[0]  # type: ignore[no-any-return]


def _served(namespace: str, name: str, timeout: float) -> tuple[str, str]:
    """(the node of a ready pod, the completion's text), tried until ``timeout``: on a cluster started again (make
    demo after make demo-down) the backends' statuses say Ready from before while the kubelet restarts their pods."""
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        try:
            node = _serving_pod(namespace, name)["spec"]["nodeName"]
            svc = get_json("service", name, "-n", namespace)
            out = completion(f"http://{svc['spec']['clusterIP']}:8000", name, PROMPT, MAX_TOKENS)
            return node, str(out["choices"][0]["text"])
        except (RuntimeError, AssertionError, OSError) as e:
            last = str(e)
        time.sleep(2)
    raise RuntimeError(f"no completion from {namespace}/{name} in {timeout:.0f} s: {last}")


def completions(namespace: str, timeout: float = 300) -> Iterator[str]:
    """For each CPU example in ``namespace``: a greedy completion through its Service's ClusterIP (kube-proxy's rules
    on this host), as one line naming the backend, its engine and the node of the pod that serves it."""
    for name in CPU_EXAMPLES:
        engine = get_json("ib", name, "-n", namespace)["status"]["backend"]
        node, text = _served(namespace, name, timeout)
        yield f"completion from {name} ({engine} on node {node}): {json.dumps(text, ensure_ascii=False)}"
