"""An ONNX model: the graph's initializers (parameters, dtype) and its KV-cache inputs (layers, KV heads, head dim).

The graph is parsed with the ``onnx`` package without its external data (only shapes are needed). Parameters are
the element counts of the floating-point and 8/4-bit initializers (integer shape constants are not weights); an
exporter may fold tensors into Constant nodes or share identical ones (all-ones norm weights), so the count can be
a little under the source model's, and the source says so. A directory may hold config.json and tokenizer.json beside
model.onnx (our runner's exporter writes both): they give the architecture and the tokenizer, as for Hugging Face.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from inference_backend.modelinfo import tensors as tz
from inference_backend.modelinfo.errors import InspectError, import_extra
from inference_backend.modelinfo.facts import Facts

# onnx.TensorProto.DataType -> the Model's dtype names (only weight-carrying types are counted)
_DTYPES = {
    1: "float32",
    10: "float16",
    16: "bfloat16",
    11: "float64",
    3: "int8",
    2: "int8",
    17: "fp8",
    18: "fp8",
    19: "fp8",
    20: "fp8",
    21: "int4",
    22: "int4",
}
# KV-cache inputs [batch, kv_heads, past, head_dim]: ours (past_key_0) and onnxruntime-genai's (past_key_values.0.key)
_PAST_KEY = re.compile(r"^past_key_(\d+)$|^past_key_values\.(\d+)\.key$")


MAX_ONNX_BYTES = 2**31 - 1
"""A model.onnx is parsed whole (protobuf has no streaming reader): at most protobuf's own 2 GiB limit, checked
before reading (the weights of a larger model are in external data files, which are never read)."""


def _load(path: Path) -> Any:
    onnx = import_extra("onnx", path, "ONNX")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if size > MAX_ONNX_BYTES:
        raise InspectError(f"{path}: {size} bytes, past protobuf's 2 GiB limit (keep the weights in external data)")
    try:
        return onnx.load(str(path), load_external_data=False)
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except Exception as exc:  # protobuf DecodeError and friends on a corrupt file
        raise InspectError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc


def inspect_onnx(path: Path, facts: Facts) -> None:
    """Parameters and dtype from ``path``'s initializers, attention shape from its KV inputs where facts lack it."""
    model = _load(path)
    graph = model.graph
    if not graph.initializer and not graph.node:
        raise InspectError(f"{path}: not a readable ONNX model (empty graph)")
    facts.set("format", "onnx", f"{path.name} (ONNX graph)")
    weights = [
        tz.Tensor(init.name, tuple(int(d) for d in init.dims), _DTYPES[init.data_type])
        for init in graph.initializer
        if init.data_type in _DTYPES
    ]
    where = f"{path.name} initializers ({len(weights)} weight tensors; an exporter may fold or share some)"
    facts.set("parameters", tz.parameters_text(tz.count_parameters(weights)), where)
    dtype = tz.weight_dtype(weights)
    if dtype in ("float32", "float16", "bfloat16", "fp8", "int8", "int4"):
        facts.set("dtype", dtype, where + ": the dtype holding the most weights")
    _kv_inputs(graph, path, facts)


def _kv_inputs(graph: Any, path: Path, facts: Facts) -> None:
    layers, shapes = 0, set()
    for inp in graph.input:
        match = _PAST_KEY.match(inp.name)
        if not match:
            continue
        layers += 1
        dims = [d.dim_value if d.HasField("dim_value") else None for d in inp.type.tensor_type.shape.dim]
        if len(dims) == 4:
            shapes.add((dims[1], dims[3]))
    if not layers:
        return
    where = f"{path.name} KV-cache inputs"
    if "layers" not in facts.values:
        facts.set("layers", layers, f"{where} ({layers} past-key inputs)")
    if len(shapes) == 1:
        kv_heads, head_dim = shapes.pop()
        if "kvHeads" not in facts.values and kv_heads:
            facts.set("kvHeads", kv_heads, f"{where} dimension 1")
        if "headDim" not in facts.values and head_dim:
            facts.set("headDim", head_dim, f"{where} dimension 3")
