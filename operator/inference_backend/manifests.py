"""Reading user manifests (YAML files of InferenceBackends, Models and Nodes) with errors that name the field."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inference_backend.api import InferenceBackend, Model
from inference_backend.api.common import MAX_MAP, LabelMap, Quantity
from inference_backend.api.model import ModelSpec

T = TypeVar("T", bound=BaseModel)


class ManifestError(ValueError):
    """Invalid input: the message names the file, the object and the field."""


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def explain(exc: ValidationError, prefix: str = "") -> str:
    """One line per error: ``spec.kvCache.memoryFraction: Input should be less than or equal to 1``."""
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        path = _field_path(loc)
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{prefix}{path}: {msg}" if path else f"{prefix}{msg}")
    return "\n".join(lines)


class _Lenient(BaseModel):
    """The shape of a v1 Node as far as facts.py reads it: types checked strictly, other fields allowed."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class _NodeMeta(_Lenient):
    name: str = Field(min_length=1, max_length=253)
    labels: LabelMap | None = None


class _Taint(_Lenient):
    key: str = Field(max_length=317)
    value: str | None = Field(default=None, max_length=63)
    effect: str = Field(max_length=64)


class _NodeSpec(_Lenient):
    unschedulable: bool | None = None
    taints: list[_Taint] | None = None


class _NodeCondition(_Lenient):
    type: str
    status: str


class _NodeStatus(_Lenient):
    allocatable: dict[str, Quantity] | None = Field(default=None, max_length=MAX_MAP)
    capacity: dict[str, Quantity] | None = Field(default=None, max_length=MAX_MAP)
    conditions: list[_NodeCondition] | None = None


class NodeShape(_Lenient):
    """A v1 Node of a node list: what the apiserver guarantees of the Nodes it serves (metadata.name, string labels,
    quantities in allocatable and capacity, taints and conditions as mappings), checked before facts.py reads it."""

    metadata: _NodeMeta
    spec: _NodeSpec | None = None
    status: _NodeStatus | None = None


def documents(path: str | Path) -> Iterator[dict[str, Any]]:
    """Every object of a YAML file: several documents and ``kind: List`` items are flattened."""
    text = sys.stdin.read() if str(path) == "-" else Path(path).read_text()
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}") from exc
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ManifestError(f"{path}: a document is not a mapping")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            for i, item in enumerate(doc["items"]):
                if not isinstance(item, dict):
                    raise ManifestError(f"{path}: items[{i}]: not a mapping")
                yield item
        else:
            yield doc


def _name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata")
    name = meta.get("name", "?") if isinstance(meta, dict) else "?"
    return name if isinstance(name, str) else repr(name)


def _parse(cls: type[T], doc: dict[str, Any], path: str | Path) -> T:
    name = _name(doc)
    try:
        return cls.model_validate(doc)
    except ValidationError as exc:
        raise ManifestError(explain(exc, f"{path}: {doc.get('kind')} {name}: ")) from exc


def load(path: str | Path) -> tuple[list[InferenceBackend], list[Model], list[dict[str, Any]]]:
    """InferenceBackends, Models and Nodes (with the ResourceSlices of DRA drivers) found in a file; other kinds are
    an error."""
    ibs: list[InferenceBackend] = []
    models: list[Model] = []
    nodes: list[dict[str, Any]] = []
    for doc in documents(path):
        kind = doc.get("kind")
        if kind == "InferenceBackend":
            ibs.append(_parse(InferenceBackend, doc, path))
        elif kind == "Model":
            models.append(_parse(Model, doc, path))
        elif kind == "Node":
            _parse(NodeShape, doc, path)
            nodes.append(doc)
        elif kind == "ResourceSlice" and isinstance(doc.get("spec"), dict):
            nodes.append(doc)  # the devices of DRA drivers (facts/dra.py): `kubectl get nodes,resourceslices -o yaml`
        else:
            raise ManifestError(
                f"{path}: unexpected kind {kind!r} (expected InferenceBackend, Model, Node or ResourceSlice)"
            )
    return ibs, models, nodes


def registry(models: list[Model], namespace: str) -> dict[str, ModelSpec]:
    """The Models of one namespace by name (objects without a namespace count as ``default``)."""
    return {m.metadata.name: m.spec for m in models if (m.metadata.namespace or "default") == namespace}
