"""spec.model.cache: the API refuses a bad cache naming spec.model.cache.*, the renderer puts the fetch step's
download into the cache volume (a directory per URI) and mounts it read-only into the engine, and refuses what a
cache cannot do. The download side (a second run into the same directory downloads nothing) is tests/test_fetch.py
against moto's server."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit.factories import node
from inference_backend.api import InferenceBackend
from inference_backend.cli import main
from inference_backend.engines.artifacts import cache_key
from pydantic import ValidationError

L4_NODE = node("l4", "l4", cpu="8", memory="32Gi")
MODEL = {
    "uri": "s3://models/qwen/",
    "parameters": "494M",
    "dtype": "bfloat16",
    "format": "safetensors",
    "contextLength": 4096,
}
BASE: dict[str, Any] = {
    "apiVersion": "serving.inferencebackend.io/v1alpha1",
    "kind": "InferenceBackend",
    "metadata": {"name": "cached", "namespace": "default"},
    "spec": {"backend": "pytorch", "model": MODEL},
}


def _ib(cache: Any, **model: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["spec"]["model"] |= model | {"cache": cache}
    return doc


@pytest.mark.parametrize(
    ("cache", "loc", "message"),
    [
        ({}, "spec.model.cache", "set one of pvc, storageClass and hostPath"),
        ({"pvc": "a", "hostPath": "/x"}, "spec.model.cache", "set one of pvc, storageClass and hostPath"),
        ({"hostPath": "/x", "size": "1Gi"}, "spec.model.cache", "size applies to model.cache.pvc"),
        ({"pvc": "Not_A_Name"}, "spec.model.cache.pvc", "pattern"),
        ({"hostPath": "relative/dir"}, "spec.model.cache.hostPath", "pattern"),
        ({"hostPath": "/var/../etc"}, "spec.model.cache.hostPath", "pattern"),
        ({"hostPath": "/"}, "spec.model.cache.hostPath", "pattern"),
        ({"pvc": "a", "size": "lots"}, "spec.model.cache.size", "quantity"),
        ({"pvc": "a", "claimName": "a"}, "spec.model.cache.claimName", "Extra inputs"),
    ],
)
def test_bad_cache_is_refused_naming_the_field(cache: Any, loc: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        InferenceBackend.model_validate(_ib(cache))
    errors = info.value.errors()
    assert any(".".join(map(str, e["loc"])).startswith(loc) and message in e["msg"] for e in errors), errors


@pytest.mark.parametrize(
    "cache",
    [
        {"pvc": "model-cache"},
        {"pvc": "c", "size": "100Gi"},
        {"hostPath": "/var/lib/models"},
        {"hostPath": "/mnt/..models/.x/"},
    ],
)
def test_good_cache_is_admitted(cache: Any) -> None:
    InferenceBackend.model_validate(_ib(cache))


def _render(tmp_path: Path, doc: Any, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    (tmp_path / "ib.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"kind": "List", "items": [L4_NODE]}))
    rc = main(["render", "-f", str(tmp_path / "ib.yaml"), "--nodes", str(tmp_path / "nodes.yaml")])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(
    ("cache", "model", "field", "message"),
    [
        ({"pvc": "c", "size": "1Gi"}, {}, "spec.model.cache.size", "cannot hold the weights"),
        ({"pvc": "c"}, {"uri": "pvc://weights/qwen"}, "spec.model.cache", "already on a volume"),
        (
            {"hostPath": "/var/lib/inference-backend"},
            {"uri": "oci://registry.example/qwen:1"},
            "spec.model.cache",
            "already on a volume",
        ),
        ({"hostPath": "/proc"}, {}, "spec.model.cache.hostPath", "not under a node path the operator allows"),
        ({"hostPath": "/var/lib/inference-backend-x"}, {}, "spec.model.cache.hostPath", "not under a node path"),
    ],
)
def test_render_refuses_what_a_cache_cannot_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cache: Any, model: Any, field: str, message: str
) -> None:
    rc, _, err = _render(tmp_path, _ib(cache, **model), capsys)
    assert rc == 2, err
    assert field in err and message in err and "Traceback" not in err


def test_gguf_repository_without_a_file_cannot_be_cached(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _ib({"pvc": "c"}, uri="hf://org/model-GGUF", format="gguf", quantization="q4_k_m")
    doc["spec"]["backend"] = "llamacpp"
    rc, _, err = _render(tmp_path, doc, capsys)
    assert rc == 2 and "spec.model.cache" in err and "name the GGUF file" in err, err


def _pod(out: str) -> dict[str, Any]:
    deploy = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    return dict(deploy["spec"]["template"]["spec"])


def test_fetch_writes_into_the_cache_and_the_engine_mounts_it_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = _render(tmp_path, _ib({"pvc": "model-cache"}), capsys)
    assert rc == 0, err
    pod = _pod(out)
    key = cache_key("s3://models/qwen/", "default")
    init = pod["initContainers"][0]
    assert init["command"] == ["inference-backend", "fetch", "s3://models/qwen/", f"/weights-cache/{key}"]
    assert {"name": "weights-cache", "mountPath": "/weights-cache"} in init["volumeMounts"]
    engine = pod["containers"][0]
    assert {"name": "weights-cache", "mountPath": "/models", "subPath": key, "readOnly": True} in engine["volumeMounts"]
    assert {"name": "weights-cache", "persistentVolumeClaim": {"claimName": "model-cache"}} in pod["volumes"]
    assert not any("emptyDir" in v and v["name"] == "model-weights" for v in pod["volumes"])
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch" and "fsGroup" in pod["securityContext"]


def test_the_cache_key_holds_the_namespace_and_the_revision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The hostPath cache was keyed by URI only: a backend in one namespace could plant weights that another
    namespace's backend then served."""
    keys = {}
    for ns in ("team-a", "team-b"):
        doc = _ib({"hostPath": "/var/lib/inference-backend/models"})
        doc["metadata"]["namespace"] = ns
        rc, out, err = _render(tmp_path, doc, capsys)
        assert rc == 0, err
        keys[ns] = _pod(out)["initContainers"][0]["command"][3]
    assert keys["team-a"] != keys["team-b"] and "team-a" in keys["team-a"]
    assert cache_key("hf://o/r@v1", "a") != cache_key("hf://o/r@v2", "a") != cache_key("hf://o/r", "a")
    assert cache_key("s3://b/m", "a") != cache_key("s3://b/m", "b")


def test_cache_keys_are_distinct_and_valid_subpaths() -> None:
    uris = ["s3://b/m/", "s3://b/m", "hf://Org/Repo", "hf://org/repo", "gs://b/" + "x" * 500, "https://h/a.gguf?x=1"]
    keys = [cache_key(u) for u in uris]
    assert len(set(keys)) == len(keys)
    for k in keys:
        assert len(k) <= 100 and "/" not in k and not k.startswith(".") and k == k.lower()


DRAFTED = """
apiVersion: serving.inferencebackend.io/v1alpha1
kind: InferenceBackend
metadata: {name: drafted, namespace: default}
spec:
  backend: pytorch
  model: {modelRef: gpt-1b, cache: {hostPath: /var/lib/inference-backend/models}, credentialsSecret: s3-models}
  hardware: {accelerator: cpu}
  speculativeDecoding: {draftModelRef: gpt-125m, numSpeculativeTokens: 4}
---
apiVersion: serving.inferencebackend.io/v1alpha1
kind: Model
metadata: {name: gpt-1b, namespace: default}
spec: {uri: 's3://research-models/gpt-1b/', format: safetensors, architecture: GPT2LMHeadModel, parameters: 1.2B,
       dtype: bfloat16, contextLength: 2048, tokenizer: {family: gpt2, vocabSize: 50257}}
---
apiVersion: serving.inferencebackend.io/v1alpha1
kind: Model
metadata: {name: gpt-125m, namespace: default}
spec: {uri: 's3://research-models/gpt-125m/', format: safetensors, architecture: GPT2LMHeadModel, parameters: 125M,
       dtype: bfloat16, contextLength: 2048, tokenizer: {family: gpt2, vocabSize: 50257}}
"""


def test_a_draft_shares_the_targets_cache_in_its_own_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ib.yaml").write_text(DRAFTED)
    cpu = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "cpu"},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"kind": "List", "items": [cpu]}))
    rc = main(["render", "-f", str(tmp_path / "ib.yaml"), "--nodes", str(tmp_path / "nodes.yaml")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    pod = _pod(out.out)
    dests = {i["name"]: i["command"][3] for i in pod["initContainers"]}
    model, draft = (
        cache_key("s3://research-models/gpt-1b/", "default"),
        cache_key("s3://research-models/gpt-125m/", "default"),
    )
    assert dests == {"fetch-model": f"/weights-cache/{model}", "fetch-draft": f"/weights-cache/{draft}"}
    assert [v["name"] for v in pod["volumes"]].count("weights-cache") == 1
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/models"]["readOnly"] and mounts["/draft-models"]["readOnly"]
    assert mounts["/draft-models"]["subPath"] == cache_key("s3://research-models/gpt-125m/", "default")
    assert "fsGroupChangePolicy" not in pod["securityContext"]  # hostPath: no ownership change by the kubelet
