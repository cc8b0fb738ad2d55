"""Model facts read from the artifact itself: ``inference-backend model inspect PATH`` prints a ``Model``.

PATH is a Hugging Face directory (config.json, tokenizer.json, safetensors shards or their index), a GGUF file (or a
directory holding one), an ONNX model (model.onnx, or a directory with it, config.json and tokenizer.json beside it)
or a single .safetensors file. Only headers are read, never the weights. See docs/model-inspect.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from inference_backend.api.model import Model
from inference_backend.modelinfo.errors import InspectError, confined
from inference_backend.modelinfo.facts import FIELDS, Facts
from inference_backend.modelinfo.gguf_file import inspect_gguf
from inference_backend.modelinfo.hf import inspect_hf, read_config, read_tokenizer
from inference_backend.modelinfo.onnx_file import inspect_onnx
from inference_backend.modelinfo.safetensors_header import read_header

__all__ = ["InspectError", "Inspection", "inspect_path"]

_HF_CACHE = re.compile(r"(?:^|/)models--([^/]+?)--([^/]+)/snapshots/[^/]+(?:/(.+))?$")


class Inspection:
    """What was read from one artifact: the Model, and the source of each of its facts."""

    def __init__(self, model: Model, facts: Facts) -> None:
        self.model = model
        self.facts = facts

    def to_yaml(self) -> str:
        lines = [
            f"# Model read from {self.facts.path} by `inference-backend model inspect`; where each fact came from:"
        ]
        lines += [f"#   {name}: {self.facts.sources[name]}" for name in FIELDS if name in self.facts.sources]
        lines += [f"# note: {note}" for note in self.facts.notes]
        return "\n".join(lines) + "\n" + yaml.safe_dump(self.wire(), sort_keys=False)

    def wire(self) -> dict[str, Any]:
        """The Model as YAML/JSON, its spec in reading order (what it is, its size, its shape)."""
        doc = self.model.wire()
        spec = doc["spec"]
        doc["spec"] = {k: spec[k] for k in ("uri", *FIELDS) if k in spec} | spec
        return doc


def _detect(path: Path) -> Facts:
    if not path.exists():
        raise InspectError(f"{path}: no such file or directory")
    if path.is_dir():
        return _directory(path)
    suffix = path.suffix.lower()
    if suffix == ".gguf" or _magic(path) == b"GGUF":
        return inspect_gguf(path)
    if suffix == ".onnx":
        facts = Facts(str(path))
        inspect_onnx(path, facts)
        return facts
    if suffix == ".safetensors":
        return _single_safetensors(path)
    raise InspectError(
        f"{path}: unknown model format (expected a .gguf, .onnx or .safetensors file, or a model directory)"
    )


def _magic(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(4)
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _directory(path: Path) -> Facts:
    onnx_files = sorted(path.glob("*.onnx"))
    if len(onnx_files) > 1:
        raise InspectError(f"{path}: several ONNX models ({', '.join(f.name for f in onnx_files)}): name one")
    if onnx_files:
        facts = Facts(str(path))
        config = read_config(path, facts) if (path / "config.json").is_file() else {}
        inspect_onnx(confined(path, onnx_files[0]), facts)
        read_tokenizer(path, config, facts)
        return facts
    if (path / "config.json").is_file():
        return inspect_hf(path)
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return inspect_gguf(confined(path, ggufs[0]))
    if ggufs:
        raise InspectError(f"{path}: several GGUF files ({', '.join(f.name for f in ggufs)}): name one")
    raise InspectError(f"{path}: unknown model format: no config.json, *.onnx or *.gguf in the directory")


def _single_safetensors(path: Path) -> Facts:
    from inference_backend.modelinfo import tensors as tz

    facts = Facts(str(path))
    tensors = read_header(path)
    where = f"safetensors header ({len(tensors)} tensors)"
    facts.set("format", "safetensors", path.name)
    facts.set("parameters", tz.parameters_text(tz.count_parameters(tensors)), where)
    dtype = tz.weight_dtype(tensors)
    if dtype in ("float32", "float16", "bfloat16", "fp8", "int8", "int4"):
        facts.set("dtype", dtype, where + ": the dtype holding the most weights")
    facts.notes.append("a single .safetensors file has no config.json: architecture facts left out")
    return facts


def _hf_cache(path: Path) -> tuple[str, str, str | None] | None:
    """(org, name, file inside the snapshot) for a path in a Hugging Face hub cache, else None."""
    match = _HF_CACHE.search(path.absolute().as_posix())  # a snapshot may be a symlink: not resolved
    return (match.group(1), match.group(2), match.group(3)) if match else None


def default_uri(path: Path) -> str:
    cached = _hf_cache(path)
    if cached is None:
        raise InspectError(
            f"{path}: cannot tell where the weights are served from: pass --uri (hf://org/name, "
            "s3://bucket/path, gs://bucket/path, pvc://claim/path, https://host/file)"
        )
    org, name, inner = cached
    return f"hf://{org}/{name}" + (f"/{inner}" if inner else "")


def default_name(path: Path) -> str:
    cached = _hf_cache(path)
    base = cached[1] if cached else (path.absolute().name if path.is_dir() else path.stem)
    name = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")[:63].strip("-")
    if not name:
        raise InspectError(f"{path}: cannot make a Model name from {base!r}: pass --name")
    return name


def inspect_path(
    path: str | Path, uri: str | None = None, name: str | None = None, namespace: str | None = None
) -> Inspection:
    """Read the artifact at ``path`` into a Model. Raises InspectError naming the file on any problem."""
    path = Path(path)
    try:
        facts = _detect(path)
    except (RecursionError, MemoryError, OverflowError) as exc:  # bounds should come first; never a traceback
        raise InspectError(f"{path}: cannot be read within bounds ({type(exc).__name__})") from exc
    spec: dict[str, Any] = {"uri": uri or default_uri(path)}
    spec.update({k: facts.values[k] for k in FIELDS if k in facts.values})
    metadata: dict[str, Any] = {"name": name or default_name(path)}
    if namespace:
        metadata["namespace"] = namespace
    try:
        model = Model.model_validate({"metadata": metadata, "spec": spec})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise InspectError(f"{path}: the facts read do not make a valid Model ({where}: {err['msg']})") from exc
    return Inspection(model, facts)
