"""The header of a .safetensors file, read with the standard library (the weights are never read).

Layout (the safetensors format, github.com/huggingface/safetensors README "Format"): 8 bytes little-endian unsigned
N, then N bytes of UTF-8 JSON mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
into the byte buffer that follows the header), plus an optional "__metadata__" string map. A header whose sizes do
not add up (offsets past the end of the file, a byte count that is not shape x dtype size) is refused as corrupt.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

from inference_backend.modelinfo.errors import InspectError, parse_json
from inference_backend.modelinfo.tensors import Tensor

# safetensors dtype -> (our dtype name, bytes per element; 0 for sub-byte types that are not size-checked)
DTYPES: dict[str, tuple[str, float]] = {
    "F64": ("float64", 8),
    "F32": ("float32", 4),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "F8_E4M3": ("fp8", 1),
    "F8_E5M2": ("fp8", 1),
    "F8_E8M0": ("fp8", 1),
    "I64": ("int64", 8),
    "I32": ("int32", 4),
    "I16": ("int16", 2),
    "I8": ("int8", 1),
    "U64": ("uint64", 8),
    "U32": ("uint32", 4),
    "U16": ("uint16", 2),
    "U8": ("uint8", 1),
    "BOOL": ("bool", 1),
    "F4": ("int4", 0),
    "F6_E2M3": ("fp8", 0),
    "F6_E3M2": ("fp8", 0),
}
MAX_HEADER = 100 * 2**20  # the reference implementation refuses headers over 100 MB
MAX_HEADER_ITEMS = 2_000_000
"""JSON values in one header (about 7 per tensor: a shard of 5,000 tensors has 35,000): 300,000 tensors at most, and
reading a 100 MB header allocates well under 1 GiB (it passed 1.28 GiB)."""
MAX_DIMS = 16


def read_header(path: Path) -> list[Tensor]:
    """The tensors a .safetensors file declares; InspectError naming the file when the header is corrupt."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InspectError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER or 8 + length > size:
                shown = f"{length} header bytes" if length <= size else "a header longer than the file"
                raise InspectError(
                    f"{path}: corrupt safetensors header (declares {shown}, file has {size} bytes; "
                    f"at most {MAX_HEADER} read)"
                )
            raw = f.read(length)
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    try:
        header = parse_json(raw, f"{path}: corrupt safetensors header", MAX_HEADER_ITEMS)
    except InspectError as exc:
        raise InspectError(str(exc).replace("not valid JSON", "not JSON")) from exc
    if not isinstance(header, dict):
        raise InspectError(f"{path}: corrupt safetensors header (not a JSON object)")
    data_size = size - 8 - length
    tensors = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors.append(_tensor(path, name, entry, data_size))
    return tensors


def _tensor(path: Path, name: str, entry: object, data_size: int) -> Tensor:
    bad = InspectError(f"{path}: corrupt safetensors header entry {name!r}")
    if not isinstance(entry, dict):
        raise bad
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not (isinstance(dtype, str) and isinstance(shape, list) and isinstance(offsets, list) and len(offsets) == 2):
        raise bad
    if len(shape) > MAX_DIMS or not all(isinstance(d, int) and 0 <= d < 2**63 for d in [*shape, *offsets]):
        raise bad
    begin, end = offsets
    if dtype not in DTYPES:
        raise InspectError(f"{path}: tensor {name!r} has dtype {dtype!r}, not a safetensors dtype")
    ours, width = DTYPES[dtype]
    if not 0 <= begin <= end <= data_size:
        raise InspectError(
            f"{path}: tensor {name!r} lies at bytes {begin}..{end}, past the file's {data_size} "
            "data bytes (truncated or corrupt)"
        )
    if width and end - begin != math.prod(shape) * width:
        raise InspectError(f"{path}: tensor {name!r} declares shape {shape} of {dtype} but {end - begin} bytes")
    return Tensor(name, tuple(shape), ours)
