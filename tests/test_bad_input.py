"""Bad input: pydantic refuses what the apiserver refuses (strict types, int64 bounds, patterns), the sizing
arithmetic never sees zero or overflow, and the CLI answers exit 2 naming the field for garbage specs and node lists.

What the apiserver itself says of these objects is checked in e2e/test_admission.py (server-side dry-run)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from inference_backend.api import InferenceBackend
from inference_backend.api.common import INT64_MAX
from inference_backend.cli import main
from inference_backend.quantity import parse_parameters, parse_quantity
from pydantic import ValidationError

BASE: dict[str, Any] = {
    "apiVersion": "serving.inferencebackend.io/v1alpha1",
    "kind": "InferenceBackend",
    "metadata": {"name": "qwen2.5-7b-instruct", "namespace": "default"},
    "spec": {"model": {"uri": "hf://Qwen/Qwen2.5-7B-Instruct", "parameters": "7.6B"}},
}
L4_NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "l4",
        "labels": {
            "nvidia.com/gpu.product": "NVIDIA-L4",
            "nvidia.com/gpu.memory": "23034",
            "nvidia.com/cuda.compute.major": "8",
            "nvidia.com/cuda.compute.minor": "9",
        },
    },
    "status": {
        "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}


def _with(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = doc["spec"]
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return doc


REFUSED = [
    ("replicas", "3"),
    ("replicas", True),
    ("replicas", 2.5),
    ("replicas", 1001),
    ("prefixCache.enabled", "yes"),
    ("prefixCache.enabled", 1),
    ("model.parameters", "0B"),
    ("model.parameters", "0.0K"),
    ("model.parameters", "1" * 400 + "B"),
    ("model.parameters", "08B"),
    ("model.contextLength", INT64_MAX + 1),
    ("model.contextLength", 10**400),
    ("model.contextLength", "4096"),
    ("kvCache.cpuOffloadGiB", float("inf")),
    ("kvCache.cpuOffloadGiB", "1"),
    ("kvCache.memoryFraction", float("nan")),
    ("objectives.ttftMillis", 2**64),
    ("resources", {"requests": {"cpu": "-1"}}),
    ("resources", {"requests": {"memory": "1e400"}}),
    ("resources", {"limits": {"nvidia.com/gpu": "9Ei"}}),
    ("resources", {"limits": {"kubernetes.io/x": 1}}),
    ("resources", {"limits": {"cpu": True}}),
    ("resources", {"limits": {"cpu": 0.5}}),
    ("hardware.nodeSelector", {"bad key": "v"}),
    ("hardware.nodeSelector", {"a": "bad value"}),
    ("hardware.tolerations", [{"operator": "Exists", "value": "x"}]),
    ("hardware.tolerations", [{"key": "k", "tolerationSeconds": 3}]),
    ("hardware.tolerations", [{"value": "v"}]),
    ("engine.image", " vllm/vllm-openai"),
    ("engine.env", [{"name": "A=B"}]),
    ("engine.env", [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
    ("engine.env", [{"name": "A", "valueFrom": {}}]),
    ("engine.env", [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}]),
    ("engine.extraArgs", ["x"] * 129),
    ("hardware.gpuProducts", ["x" * 64]),
]


@pytest.mark.parametrize(("path", "value"), REFUSED)
def test_refused_with_the_field_named(path: str, value: Any) -> None:
    with pytest.raises(ValidationError) as info:
        InferenceBackend.model_validate(_with(path, value))
    assert any(
        path.split(".")[0] in ".".join(map(str, e["loc"])).lower() or path.split(".")[0] in str(e["loc"])
        for e in info.value.errors()
    ), info.value


ADMITTED = [
    ("replicas", 3.0),
    ("model.contextLength", INT64_MAX),
    ("model.parameters", "0.5B"),
    ("model.parameters", "0.001K"),
    ("model.parameters", "9999.9999T"),
    ("kvCache.memoryFraction", 1),
    ("resources", {"requests": {"cpu": "500m", "memory": "32Gi", "nvidia.com/gpu": 1}}),
    ("hardware.nodeSelector", {"example.com/pool": "a.b_c-1"}),
    ("hardware.tolerations", [{"operator": "Exists"}, {"key": "k", "effect": "NoExecute", "tolerationSeconds": -1}]),
    (
        "engine.env",
        [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app/x']"}}},
            {"name": "K", "valueFrom": {"secretKeyRef": {"name": "s.1", "key": ".k"}}},
        ],
    ),
    ("engine.image", "registry.example.com:5000/vllm/vllm-openai:v0.8@sha256:" + "a" * 64),
]


@pytest.mark.parametrize(("path", "value"), ADMITTED)
def test_admitted(path: str, value: Any) -> None:
    InferenceBackend.model_validate(_with(path, value))


def test_parameters_and_quantities_never_zero_or_overflow() -> None:
    assert parse_parameters("0.001K") == 1
    assert parse_parameters("9999.9999T") == 9_999_999_900_000_000
    for bad in ("0B", "0.0001K", "1" * 400 + "B"):
        with pytest.raises(ValueError):
            parse_parameters(bad)
    for bad in ("1e400", float("inf"), float("nan"), True, None, [1], "1e-400"):
        with pytest.raises(ValueError):
            parse_quantity(bad)


def _cli(
    tmp_path: Path, ib: Any, nodes: Any, capsys: pytest.CaptureFixture[str], cmd: str = "select"
) -> tuple[int, str]:
    (tmp_path / "ib.yaml").write_text(yaml.safe_dump(ib) if not isinstance(ib, str) else ib)
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump(nodes) if not isinstance(nodes, str) else nodes)
    rc = main([cmd, "-f", str(tmp_path / "ib.yaml"), "--nodes", str(tmp_path / "nodes.yaml")])
    return rc, capsys.readouterr().err


GARBAGE_NODES = [
    ("true", "not a mapping"),
    ("kind: List\nitems: [true]", "items[0]"),
    ("kind: List\nitems: [{kind: Node, metadata: []}]", "metadata"),
    ("kind: Node\nmetadata: {name: n, labels: {a: [1]}}", "metadata.labels.a"),
    ("kind: Node\nmetadata: {name: n, labels: {a: null}}", "metadata.labels.a"),
    ("kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: 1.0e+400}}", "status.allocatable.cpu"),
    ("kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {memory: '1e400'}}", "status.allocatable.memory"),
    ("kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {nvidia.com/gpu: true}}", "nvidia.com/gpu"),
    ("kind: Node\nmetadata: {name: n}\nspec: {taints: [1]}", "spec.taints[0]"),
    ("kind: Node\nmetadata: {name: n}\nspec: {unschedulable: 'yes'}", "spec.unschedulable"),
    ("kind: Node\nmetadata: {name: n}\nstatus: {conditions: [[1]]}", "status.conditions[0]"),
    ("kind: Node\nmetadata: null", "metadata"),
]


@pytest.mark.parametrize(("nodes", "field"), GARBAGE_NODES)
@pytest.mark.parametrize("cmd", ["select", "render"])
def test_garbage_node_lists_exit_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nodes: str, field: str, cmd: str
) -> None:
    rc, err = _cli(tmp_path, BASE, nodes, capsys, cmd)
    assert rc == 2, err
    assert field in err and "Traceback" not in err


@pytest.mark.parametrize(("path", "value"), REFUSED[:12])
def test_garbage_specs_exit_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, value: Any
) -> None:
    if isinstance(value, float) and value != value:  # YAML cannot carry the NaN of this case the same way
        return
    rc, err = _cli(tmp_path, _with(path, value), {"kind": "List", "items": [L4_NODE]}, capsys)
    assert rc == 2, err
    assert path.split(".")[-1] in err


def test_huge_admitted_values_do_not_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ib = _with("model.contextLength", INT64_MAX)
    ib["spec"]["kvCache"] = {"cpuOffloadGiB": 1048576}
    ib["spec"]["model"]["parameters"] = "9999.9999T"
    for cmd in ("select", "render"):
        rc, err = _cli(tmp_path, ib, {"kind": "List", "items": [L4_NODE]}, capsys, cmd)
        assert rc == 3, err


@pytest.mark.parametrize("field", ["promptTokens", "outputTokens"])
def test_token_counts_beyond_int64_are_refused_as_the_apiserver_does(field: str) -> None:
    """The CRD gives them int64 bounds (the apiserver refuses a larger integer as not an integer); pydantic agrees.
    Found by e2e/test_admission.py's generated specs."""
    with pytest.raises(ValidationError) as info:
        spec = {"model": {"uri": "hf://o/m", "parameters": "1B"}, "objectives": {field: 2**70}}
        InferenceBackend.model_validate({"metadata": {"name": "x"}, "spec": spec})
    assert field in str(info.value)
    root = Path(__file__).resolve().parents[1]
    crd = yaml.safe_load((root / "crds/serving.inferencebackend.io_inferencebackends.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["objectives"]["properties"][field]["maximum"] == INT64_MAX
