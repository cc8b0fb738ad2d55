"""The CRDs in crds/ are generated from the pydantic models and must stay equal to the generator's output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from inference_backend.crdgen import inference_backend_crd, model_crd, render_all
from inference_backend.engines import NAMES

ROOT = Path(__file__).resolve().parents[1]


def test_crds_directory_equals_generator_output() -> None:
    files = render_all()
    for folder in (ROOT / "crds", ROOT / "charts/inference-backend/crds"):
        for name, text in files.items():
            path = folder / name
            assert path.exists(), f"{path} missing: run `make crds`"
            assert path.read_text() == text, f"{path} is stale: run `make crds`"
    assert sorted(p.name for p in (ROOT / "crds").glob("*.yaml")) == sorted(files)


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, sub in (schema.get("properties") or {}).items():
        out += _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out += _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _walk(schema["additionalProperties"], f"{path}{{}}")
    return out


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_every_field_has_a_description_and_a_type() -> None:
    for crd in (inference_backend_crd(), model_crd()):
        for path, node in _walk(_schema(crd)):
            if path in (".metadata",) or path.endswith("{}") or (path.endswith("[]") and node["type"] != "object"):
                continue
            assert node.get("description"), f"{crd['spec']['names']['kind']}{path} has no description"
            assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
            assert "anyOf" not in node and "$ref" not in node, f"{path} is not structural"


def test_defaults_enums_and_bounds() -> None:
    spec = _schema(inference_backend_crd())["properties"]["spec"]["properties"]
    assert spec["backend"]["default"] == "auto"
    assert spec["backend"]["enum"] == ["auto", *NAMES]
    assert spec["prefixCache"]["default"] == {} and spec["prefixCache"]["properties"]["enabled"]["default"] is True
    frac = spec["kvCache"]["properties"]["memoryFraction"]
    assert frac == {**frac, "minimum": 0, "exclusiveMinimum": True, "maximum": 1, "default": 0.9}
    nst = spec["speculativeDecoding"]["properties"]["numSpeculativeTokens"]
    assert (nst["minimum"], nst["maximum"]) == (1, 16)
    assert "cpuOffloadGiB" in spec["kvCache"]["properties"]
    assert spec["resources"]["properties"]["limits"]["additionalProperties"]["x-kubernetes-int-or-string"]


def test_cel_rules() -> None:
    spec = _schema(inference_backend_crd())["properties"]["spec"]
    rules = [r["rule"] for r in spec["properties"]["model"]["x-kubernetes-validations"]]
    assert "has(self.modelRef) || has(self.uri)" in rules
    sd = spec["properties"]["speculativeDecoding"]["x-kubernetes-validations"]
    assert sd[0]["rule"] == "self.method != 'draft' || has(self.draftModelRef)"
    # the spec's own rule (an adapter's name differs from servedName), then from the cards: the KV cache types,
    # GPU-only engines, two autoscaling signals some engines lack, scale to zero, the engines' int32 flags, engines
    # without LoRA
    fields = [r["message"].split(" ")[0] for r in spec["x-kubernetes-validations"]]
    assert fields == [
        "adapters:",
        "kvCache.dtype",
        "backend",
        "autoscaling.metric",
        "autoscaling.metric",
        "autoscaling.minReplicas",
        "batching.maxBatchTokens",
        "adapters:",
    ]
    adapters = spec["properties"]["adapters"]
    assert adapters["x-kubernetes-list-type"] == "map" and adapters["x-kubernetes-list-map-keys"] == ["name"]
    auto = [r["rule"] for r in spec["properties"]["autoscaling"]["x-kubernetes-validations"]]
    assert "self.minReplicas <= self.maxReplicas" in auto


def test_names_columns_and_status_subresource() -> None:
    ib = inference_backend_crd()
    version = ib["spec"]["versions"][0]
    assert ib["spec"]["names"]["shortNames"] == ["ib"]
    assert model_crd()["spec"]["names"]["shortNames"] == ["mdl"]
    scale = {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert version["subresources"] == {"status": {}, "scale": scale}
    names = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert names == ["Backend", "Phase", "Ready", "Endpoint", "Age"]
    status = _schema(ib)["properties"]["status"]["properties"]
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert {"phase", "backend", "decision", "endpoint", "replicas", "readyReplicas", "observedGeneration"} <= set(
        status
    )


def test_crd_yaml_is_loadable() -> None:
    for text in render_all().values():
        doc = yaml.safe_load(text)
        assert doc["kind"] == "CustomResourceDefinition"
