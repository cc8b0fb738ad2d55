"""The demo's manifests (hack/demo_examples.py, ib_testkit.demo_node): with a real node, the three CPU examples move
to it with the tiny model, each still choosing its engine, and are rendered by the operator's own selection and
render with the model from the read-only claim (no fetch step, so no operator image on the node); the other examples
stay on KWOK's nodes as they were."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from ib_testkit import ROOT
from ib_testkit.demo_node import CPU_EXAMPLES, MODEL_CLAIM, on_real_node
from ib_testkit.factories import cluster, node
from ib_testkit.real_nodes import REAL_NODE_LABEL, REAL_NODE_TOLERATION, TINY_RESOURCES
from inference_backend.api import InferenceBackend
from inference_backend.render import render
from inference_backend.selection import select

REAL_NODE = node(
    "real-cpu-0",
    cpu="2",
    memory="23Gi",
    labels={REAL_NODE_LABEL: "true"},
    taints=[{"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}],
)
"""A node as e2e/up's kubelet registers it on this 2-core machine: labelled and tainted."""
ENGINES = {"llama-edge": "llamacpp", "phi3-onnx": "onnxruntime", "research-gpt": "pytorch"}


def _demo_docs(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "hack/demo_examples.py", "demo", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return list(yaml.safe_load_all(out.stdout))


def _backends(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "InferenceBackend"}


def test_the_cpu_examples_move_to_the_real_node(tmp_path: Path) -> None:
    kwok = _backends(_demo_docs("--kwok"))
    docs = _demo_docs("--kwok", "--real-node", str(tmp_path))
    real = _backends(docs)
    assert set(real) == set(kwok) and set(CPU_EXAMPLES) == set(ENGINES)
    for name, doc in real.items():
        if name not in CPU_EXAMPLES:
            assert doc == kwok[name]
            continue
        spec = doc["spec"]
        assert spec["hardware"]["nodeSelector"] == {REAL_NODE_LABEL: "true"}
        assert spec["hardware"]["tolerations"] == [REAL_NODE_TOLERATION]
        assert spec["resources"] == TINY_RESOURCES and spec["model"]["uri"].startswith(f"pvc://{MODEL_CLAIM}/")
        kept = {k: v for k, v in kwok[name]["spec"].items() if k not in ("model", "hardware", "speculativeDecoding")}
        assert {k: spec[k] for k in kept if k != "kvCache"} == {k: v for k, v in kept.items() if k != "kvCache"}
    claim = next(d for d in docs if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == MODEL_CLAIM)
    pv = next(d for d in docs if d["kind"] == "PersistentVolume" and d["spec"]["claimRef"]["name"] == MODEL_CLAIM)
    assert claim["spec"]["volumeName"] == pv["metadata"]["name"] and pv["spec"]["hostPath"]["path"] == str(tmp_path)


def test_each_cpu_example_picks_its_engine_on_the_real_node() -> None:
    for path in sorted((ROOT / "docs/examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            moved = on_real_node({**doc, "metadata": {**doc["metadata"], "namespace": "demo"}})
            if moved is None:
                continue
            ib = InferenceBackend.model_validate(moved)
            decision = select(ib.spec, cluster(REAL_NODE), {})
            assert decision.backend == ENGINES[doc["metadata"]["name"]], (path.name, decision)
            deployment = next(o for o in render(ib, decision) if o["kind"] == "Deployment")
            pod = deployment["spec"]["template"]["spec"]
            assert not pod.get("initContainers"), path.name  # pvc://: mounted, no fetch step
            claims = [v["persistentVolumeClaim"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
            assert claims == [{"claimName": MODEL_CLAIM, "readOnly": True}], claims
