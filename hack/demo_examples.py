"""Print the demo's manifests: every example of docs/examples/ in one namespace, plus what they need.

For the local KWOK cluster (--kwok) each InferenceBackend also tolerates the fake nodes' taint.
With --real-models DIR (a real node, e2e/up --real-nodes) the CPU examples, one per CPU engine (REAL), run there
instead: the same spec on CPU, with the tiny model of DIR (ib_testkit.real_nodes.tiny_models) from a claim on it.
Usage: python hack/demo_examples.py NAMESPACE [--kwok] [--real-models DIR] | kubectl apply --server-side -f -
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from ib_testkit.real_nodes import TINY_FACTS, TINY_RESOURCES, real_hardware

EXAMPLES = Path(__file__).resolve().parents[1] / "docs/examples"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
REAL: dict[str, tuple[str, str]] = {
    "llamacpp-cpu-gguf.yaml": ("model-f32.gguf", "gguf"),
    "onnxruntime-phi-3.yaml": ("onnx", "onnx"),
    "pytorch-research.yaml": ("hf", "safetensors"),
}
"""The examples served on the real node (one per CPU engine): the tiny model's file or directory, and its format."""


def support(namespace: str) -> list[dict[str, Any]]:
    """Secrets the examples reference (placeholder tokens) and the claim of the pvc:// example."""

    def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": data,
        }

    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        secret("hf-token", {"HF_TOKEN": "replace-me"}),
        secret("s3-models", {"AWS_ACCESS_KEY_ID": "replace-me", "AWS_SECRET_ACCESS_KEY": "replace-me"}),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{namespace}-research-models"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "hostPath": {"path": "/srv/models"},
                "claimRef": {"namespace": namespace, "name": "research-models"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "research-models", "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": f"{namespace}-research-models",
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
    ]


def on_real_node(doc: dict[str, Any], file: str, claim: str) -> dict[str, Any]:
    """The example on the real node: its engine, batching and caching as written, on CPU, with the tiny model from
    the claim. What a tiny model cannot take goes: the draft (none that small is registered) and a block-quantized
    KV cache (q8_0 blocks of 32 do not divide the tiny model's head size of 16). TINY_RESOURCES, so that the three fit
    one node."""
    path, fmt = REAL[file]
    spec = doc["spec"]
    served = {"servedName": spec["model"]["servedName"]} if spec["model"].get("servedName") else {}
    quant = {"quantization": "f32"} if fmt == "gguf" else {}
    spec["model"] = {"uri": f"pvc://{claim}/{path}", "format": fmt, **TINY_FACTS, **quant, **served}
    spec.pop("speculativeDecoding", None)
    spec.pop("kvCache", None)
    spec["hardware"] = real_hardware()
    spec["resources"] = TINY_RESOURCES
    return doc


def models_claim(namespace: str, models: str) -> list[dict[str, Any]]:
    """A claim bound to a read-only hostPath volume at ``models`` (the real node is this machine)."""
    pv = f"{namespace}-demo-models"
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                  "hostPath": {"path": models}, "claimRef": {"namespace": namespace, "name": "demo-models"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "demo-models", "namespace": namespace},
         "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": pv,
                  "resources": {"requests": {"storage": "1Gi"}}}},
    ]  # fmt: skip


def examples(namespace: str, kwok: bool, real_models: str | None = None) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            doc["metadata"]["namespace"] = namespace
            if doc["kind"] == "InferenceBackend" and real_models and path.name in REAL:
                doc = on_real_node(doc, path.name, "demo-models")
            elif kwok and doc["kind"] == "InferenceBackend":
                doc["spec"].setdefault("hardware", {}).setdefault("tolerations", []).append(KWOK_TOLERATION)
            docs.append(doc)
    return docs


if __name__ == "__main__":
    ns = sys.argv[1] if len(sys.argv) > 1 else "demo"
    real = sys.argv[sys.argv.index("--real-models") + 1] if "--real-models" in sys.argv else None
    docs = support(ns) + (models_claim(ns, real) if real else []) + examples(ns, "--kwok" in sys.argv, real)
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
