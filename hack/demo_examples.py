"""Print the demo's manifests: every example of docs/examples/ in one namespace, plus what they need.

For the local KWOK cluster (--kwok) each InferenceBackend also tolerates the fake nodes' taint. With a real node
(--real-node DIR: the directory of hack/demo_real_node.py models) the CPU examples serve tiny models there instead
(ib_testkit.demo_node.on_real_node), from a claim on DIR.
Usage: python hack/demo_examples.py NAMESPACE [--kwok] [--real-node DIR] | kubectl apply --server-side -f -
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from ib_testkit.demo_node import model_claim, on_real_node

EXAMPLES = Path(__file__).resolve().parents[1] / "docs/examples"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


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


def examples(namespace: str, kwok: bool, real_node: bool = False) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            doc["metadata"]["namespace"] = namespace
            real = on_real_node(doc) if real_node else None
            if real is not None:
                doc = real
            elif kwok and doc["kind"] == "InferenceBackend":
                doc["spec"].setdefault("hardware", {}).setdefault("tolerations", []).append(KWOK_TOLERATION)
            docs.append(doc)
    return docs


if __name__ == "__main__":
    args = sys.argv[1:]
    ns = args[0] if args and not args[0].startswith("--") else "demo"
    models = Path(args[args.index("--real-node") + 1]) if "--real-node" in args else None
    docs = support(ns) + (model_claim(ns, models) if models else []) + examples(ns, "--kwok" in args, bool(models))
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
