"""Print the demo's manifests: every example of docs/examples/ in one namespace, plus what they need.

For the local KWOK cluster (--kwok) each InferenceBackend also tolerates the fake nodes' taint.
Usage: python hack/demo_examples.py NAMESPACE [--kwok] | kubectl apply --server-side -f -
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

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


def examples(namespace: str, kwok: bool) -> list[dict[str, Any]]:
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            doc["metadata"]["namespace"] = namespace
            if kwok and doc["kind"] == "InferenceBackend":
                doc["spec"].setdefault("hardware", {}).setdefault("tolerations", []).append(KWOK_TOLERATION)
            docs.append(doc)
    return docs


if __name__ == "__main__":
    ns = sys.argv[1] if len(sys.argv) > 1 else "demo"
    sys.stdout.write(yaml.safe_dump_all(support(ns) + examples(ns, "--kwok" in sys.argv), sort_keys=False))
