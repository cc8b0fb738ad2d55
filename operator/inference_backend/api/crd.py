"""Generate the CustomResourceDefinitions in ``crds/`` from the pydantic models.

Pydantic emits JSON Schema (draft 2020-12); Kubernetes wants a structural OpenAPI v3.0 schema. This module inlines
``$ref``s, folds ``Optional`` (``anyOf`` with null) into the plain type, turns ``int | str`` into
``x-kubernetes-int-or-string``, free-form maps into ``x-kubernetes-preserve-unknown-fields`` and numeric
``exclusiveMinimum`` into the OpenAPI 3.0 boolean form. The engine-dependent parts (the rules made from the engine
cards, the engines' names in the descriptions) are handed in by ``inference_backend.crdgen``, whose
``python -m inference_backend.crdgen --write crds/`` rewrites the files; a unit test fails when they differ.
"""

from __future__ import annotations

from typing import Any

from inference_backend.api.inferencebackend import InferenceBackendSpec, InferenceBackendStatus
from inference_backend.api.model import ModelSpec
from inference_backend.names import MAX_NAME
from inference_backend.vocabulary import GROUP, PART_OF, PART_OF_LABEL, VERSION

NAME_RULE = {
    "rule": f"self.metadata.name.size() <= {MAX_NAME}",
    "message": f"metadata.name: at most {MAX_NAME} characters (it names the Deployment, whose ReplicaSets append "
    "11 characters to it)",
}
"""On the InferenceBackend's root: CEL may read metadata.name there (and only there)."""

SCALE = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}
"""The scale subresource: `kubectl scale ib` sets spec.replicas; an HPA or KEDA reads the replicas and the pods'
selector from the status the operator writes."""

_KEEP = {
    "type",
    "description",
    "default",
    "enum",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "items",
    "properties",
    "required",
    "additionalProperties",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "x-kubernetes-validations",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
}


_BOUND_NAMES = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        target = dict(defs[node["$ref"].split("/")[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return {**target, **extra}  # the field's own description and default win over the class's
    return node


def to_openapi(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Convert one pydantic JSON-schema node to a structural OpenAPI v3.0 node."""
    node = _resolve(node, defs)
    if "anyOf" in node:
        branches = [_resolve(b, defs) for b in node["anyOf"] if b.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        types = sorted(b.get("type", "") for b in branches)
        if types == ["integer", "string"]:
            node = {**rest, "x-kubernetes-int-or-string": True}
        elif len(branches) == 1:
            node = {**branches[0], **{k: v for k, v in rest.items() if k != "default" or v is not None}}
            if "anyOf" in node:  # Optional[int | str] (an optional Quantity): the inner union once more
                return to_openapi(node, defs)
        else:  # pragma: no cover - the models avoid other unions
            raise ValueError(f"cannot express union {node['anyOf']} in a structural schema")
    # pydantic writes the bounds of an Annotated type inside Optional under their Python names (ge, le, ...).
    node = {_BOUND_NAMES.get(k, k): v for k, v in node.items()}
    if "const" in node:
        node = {**node, "enum": [node.pop("const")]}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP or (key == "default" and value is None):
            continue
        if key == "properties":
            out[key] = {name: to_openapi(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = to_openapi(value, defs)
        elif key == "additionalProperties":
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is not False:
                out[key] = to_openapi(value, defs)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound], out[key] = value, True
        else:
            out[key] = value
    if "description" in out:
        out["description"] = " ".join(out["description"].split())
    if out.get("type") == "array" and "default" not in out and "items" in out:
        out.setdefault("x-kubernetes-list-type", "atomic")
    return out


def schema_of(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return to_openapi(raw, raw.get("$defs", {}))


def _conditions_as_map(status: dict[str, Any]) -> None:
    conditions = status["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]


def _crd(
    kind: str,
    plural: str,
    short: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    columns: list[dict[str, Any]],
    description: str,
    root_rules: list[dict[str, str]] | None = None,
    scale: dict[str, str] | None = None,
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "API version of the object."},
            "kind": {"type": "string", "description": "Kind of the object."},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    if root_rules:
        schema["x-kubernetes-validations"] = root_rules
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {PART_OF_LABEL: PART_OF},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": ["inference-backend"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}, **({"scale": scale} if scale else {})},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def _column(name: str, path: str, kind: str = "string", priority: int = 0, description: str = "") -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        col["priority"] = priority
    if description:
        col["description"] = description
    return col


def inference_backend_crd(rules: list[dict[str, str]], engines: str, backend: str) -> dict[str, Any]:
    """``rules``: CEL rules on the spec ({"rule", "message"}); ``engines``: the engines in prose ("vLLM, ... or
    PyTorch"); ``backend``: the description of spec.backend."""
    spec = schema_of(InferenceBackendSpec)
    spec["x-kubernetes-validations"] = [*spec.get("x-kubernetes-validations", []), *rules]
    spec["properties"]["backend"]["description"] = backend
    status = schema_of(InferenceBackendStatus)
    _conditions_as_map(status)
    columns = [
        _column("Backend", ".status.backend", description="The engine chosen"),
        _column("Phase", ".status.phase", description="Pending, Deploying, Ready, Degraded or Failed"),
        _column("Ready", ".status.ready", description="readyReplicas/replicas"),
        _column("Endpoint", ".status.endpoint", description="In-cluster URL"),
        _column("Age", ".metadata.creationTimestamp", "date"),
        _column("GPU", ".status.decision.placement.gpuProduct", priority=1, description="GPU product"),
        _column("TP", ".status.decision.placement.tensorParallelSize", "integer", 1, "Tensor-parallel size"),
        _column(
            "Nodes",
            ".status.decision.placement.nodes",
            "integer",
            1,
            "Nodes per replica (more than 1: a LeaderWorkerSet, pipeline parallel across the nodes)",
        ),
    ]
    return _crd(
        "InferenceBackend",
        "inferencebackends",
        "ib",
        spec,
        status,
        columns,
        f"InferenceBackend serves one model with the engine the operator selects ({engines}) and says why in "
        "status.decision.",
        [NAME_RULE],
        SCALE,
    )


def model_crd() -> dict[str, Any]:
    columns = [
        _column("Format", ".spec.format"),
        _column("Parameters", ".spec.parameters"),
        _column("Architecture", ".spec.architecture"),
        _column("Tokenizer", ".spec.tokenizer.family"),
        _column("Age", ".metadata.creationTimestamp", "date"),
    ]
    status = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "description": "Unused for now.",
    }
    return _crd(
        "Model",
        "models",
        "mdl",
        schema_of(ModelSpec),
        status,
        columns,
        "Model is an entry of the model registry: what a model is, so the operator can size it, pick an "
        "engine for it and check a draft model against it.",
    )
