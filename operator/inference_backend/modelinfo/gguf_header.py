"""A GGUF file's header, parsed with the standard library: every count and length checked against the bytes left
in the file before anything is allocated, arrays nobody reads skipped without being built.

Layout (ggml docs/gguf.md, versions 2 and 3; llama.cpp gguf-py gguf_reader.py reads the same): ``GGUF``, a uint32
version, uint64 tensor and key-value counts; each key-value pair is a string key, a uint32 value type and the value
(scalars little-endian; a string is a uint64 length and UTF-8 bytes; an array is a uint32 element type, a uint64
count and the elements); each tensor info is a string name, a uint32 dimension count (at most 4), uint64
dimensions, a uint32 ggml type and a uint64 offset into the data section, which starts at the next multiple of
``general.alignment`` (default 32) after the tensor infos.

gguf-py's GGUFReader builds a numpy view per array element (a Llama-3 header: 17 s and 668 MiB); this reads the
file through a memory map, keeps the scalars, the short integer arrays (per-layer counts) and the token list, and
steps over the rest (the 280,147 merges of a Llama-3 vocabulary: their lengths only). A count or length that the
file cannot hold, a string longer than ``MAX_STRING``, arrays nested deeper than ``MAX_DEPTH``, more than 4
dimensions, an unknown value or tensor type, or tensor data past the end of the file raise GGUFError with the
offset.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_HEADER_BYTES = 256 * 2**20
"""Only this much of the file is mapped: the header (metadata and tensor table) must lie within it (a Llama-3 header
is 7 MiB, a million-token vocabulary about 20 MiB); the tensor data beyond is never read."""
MAX_STRING = 64 * 2**20
"""Longest string value (chat templates are tens of KiB)."""
MAX_KEY = 65535
"""Longest key (docs/gguf.md: keys are at most 65535 bytes)."""
MAX_DEPTH = 2
"""Arrays of arrays at most this deep (llama.cpp writes none deeper than one)."""
MAX_DIMS = 4
"""GGML_MAX_DIMS."""
KEEP_ARRAYS = frozenset({"tokenizer.ggml.tokens"})
"""Arrays kept whatever their length; other arrays are kept only when short integer lists (per-layer counts)."""
KEEP_INT_ARRAY = 65536

# value type -> (struct format, size) of the scalar types (docs/gguf.md gguf_metadata_value_type)
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9
_INTS = frozenset({0, 1, 2, 3, 4, 5, 10, 11})


class GGUFError(ValueError):
    """The header is not a GGUF header this reader can trust: the message says what and at which offset."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    """As GGUF stores it: the fastest-varying dimension first."""
    type: int
    """The ggml type (ggml.h enum ggml_type)."""
    offset: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Header:
    version: int
    fields: Mapping[str, Any]
    """Key -> value (int, float, bool, str, or a list of them); arrays that were skipped are absent."""
    skipped: Mapping[str, int]
    """Arrays stepped over: key -> element count."""
    tensors: tuple[TensorInfo, ...]
    data_start: int


class _Cursor:
    def __init__(self, buf: mmap.mmap | bytes, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GGUFError(
                f"{what} at offset {self.pos} needs {n} bytes, {self.size - self.pos} left in the file "
                f"(or its first {MAX_HEADER_BYTES} bytes, where the header must lie)"
            )

    def scalar(self, kind: int, what: str) -> Any:
        fmt, size = _SCALARS[kind]
        self.need(size, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def u32(self, what: str) -> int:
        return int(self.scalar(4, what))

    def u64(self, what: str) -> int:
        return int(self.scalar(10, what))

    def string(self, what: str, limit: int = MAX_STRING, keep: bool = True) -> str:
        n = self.u64(f"{what} length")
        if n > limit:
            raise GGUFError(f"{what} at offset {self.pos - 8} is {n} bytes long, more than the {limit} allowed")
        self.need(n, what)
        start, self.pos = self.pos, self.pos + n
        if not keep:
            return ""
        try:
            return self.buf[start : self.pos].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(f"{what} at offset {start} is not UTF-8 ({exc.reason})") from exc


_U64 = struct.Struct("<Q")


def _strings(cur: _Cursor, count: int, key: str, keep: bool) -> list[str]:
    """``count`` strings from the cursor (the hot loop of a vocabulary: 128,256 tokens, 280,147 merges), kept or
    stepped over; each length checked before its bytes are touched."""
    buf, size, pos, unpack = cur.buf, cur.size, cur.pos, _U64.unpack_from
    out: list[str] = []
    append = out.append
    try:
        for _ in range(count):
            if pos + 8 > size:
                raise GGUFError(f"{key}: a string at offset {pos} runs past the end of the file")
            (n,) = unpack(buf, pos)
            pos += 8
            if n > MAX_STRING or pos + n > size:
                raise GGUFError(f"{key}: a string of {n} bytes at offset {pos - 8} does not fit in the file")
            if keep:
                append(buf[pos : pos + n].decode("utf-8"))
            pos += n
    except UnicodeDecodeError as exc:
        raise GGUFError(f"{key}: a string at offset {pos} is not UTF-8 ({exc.reason})") from exc
    cur.pos = pos
    return out


def _value(cur: _Cursor, kind: int, key: str, depth: int = 0) -> tuple[Any, int | None]:
    """(value, None), or (None, element count) for an array stepped over."""
    if kind in _SCALARS:
        return cur.scalar(kind, key), None
    if kind == _STRING:
        return cur.string(key), None
    if kind != _ARRAY:
        raise GGUFError(f"{key}: unknown value type {kind} at offset {cur.pos - 4}")
    if depth >= MAX_DEPTH:
        raise GGUFError(f"{key}: arrays nested deeper than {MAX_DEPTH}")
    elem = cur.u32(f"{key} element type")
    count = cur.u64(f"{key} element count")
    smallest = _SCALARS[elem][1] if elem in _SCALARS else 8 if elem == _STRING else 12 if elem == _ARRAY else 0
    if not smallest:
        raise GGUFError(f"{key}: unknown array element type {elem} at offset {cur.pos - 12}")
    cur.need(count * smallest, f"{key}: {count} elements of type {elem}")  # before any of them is read
    keep = key in KEEP_ARRAYS or (elem in _INTS and count <= KEEP_INT_ARRAY)
    if elem in _SCALARS:
        size = _SCALARS[elem][1]
        if not keep:
            cur.pos += count * size
            return None, count
        fmt = "<" + _SCALARS[elem][0][1] * count
        values = list(struct.unpack_from(fmt, cur.buf, cur.pos))
        cur.pos += count * size
        return values, None
    if elem == _STRING:
        strings = _strings(cur, count, key, keep)
        return (strings, None) if keep else (None, count)
    for _ in range(count):  # arrays of arrays (each element an array value): stepped over
        _value(cur, _ARRAY, key, depth + 1)
    return None, count


def read_header(path: Path, block_sizes: Mapping[int, tuple[int, int]]) -> Header:
    """The header of the GGUF file at ``path``; ``block_sizes``: ggml type -> (elements per block, bytes per block)
    (gguf-py's GGML_QUANT_SIZES), for the data-section bounds. Raises GGUFError, or OSError."""
    with path.open("rb") as f:
        size = path.stat().st_size
        magic = f.read(4)
        if magic != b"GGUF":
            raise GGUFError(f"magic {magic!r}, expected b'GGUF'")
        if size < 24:
            raise GGUFError(f"{size} bytes: shorter than a GGUF header (24)")
        window = min(size, MAX_HEADER_BYTES)
        with mmap.mmap(f.fileno(), window, access=mmap.ACCESS_READ) as buf:
            return _parse(_Cursor(buf, window), block_sizes, size)


def _parse(cur: _Cursor, block_sizes: Mapping[int, tuple[int, int]], file_size: int) -> Header:
    cur.need(4, "magic")
    magic = bytes(cur.buf[0:4])
    if magic != b"GGUF":
        raise GGUFError(f"magic {magic!r}, expected b'GGUF'")
    cur.pos = 4
    version = cur.u32("version")
    if version not in (2, 3):
        raise GGUFError(f"version {version}: only GGUF versions 2 and 3 are read")
    n_tensors, n_kv = cur.u64("tensor count"), cur.u64("key-value count")
    left = cur.size - cur.pos
    if n_kv * 13 > left or n_tensors * 24 > left:  # the smallest pair / tensor info
        raise GGUFError(f"{n_kv} key-value pairs and {n_tensors} tensors cannot fit in the {left} bytes left")
    fields: dict[str, Any] = {}
    skipped: dict[str, int] = {}
    for _ in range(n_kv):
        key = cur.string("key", MAX_KEY)
        value, count = _value(cur, cur.u32(f"{key} value type"), key)
        if count is None:
            fields[key] = value
        else:
            skipped[key] = count
    tensors = tuple(_tensor(cur) for _ in range(n_tensors))
    alignment = fields.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"general.alignment {alignment!r} is not a power of two")
    data_start = -(-cur.pos // alignment) * alignment
    for t in tensors:
        _check_data(t, data_start, file_size, alignment, block_sizes)
    return Header(version, fields, skipped, tensors, data_start)


def _tensor(cur: _Cursor) -> TensorInfo:
    name = cur.string("tensor name", MAX_KEY)
    n_dims = cur.u32(f"tensor {name} dimension count")
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(f"tensor {name}: {n_dims} dimensions (1 to {MAX_DIMS})")
    shape = tuple(cur.u64(f"tensor {name} dimension") for _ in range(n_dims))
    kind = cur.u32(f"tensor {name} type")
    offset = cur.u64(f"tensor {name} offset")
    return TensorInfo(name, shape, kind, offset)


def _check_data(
    t: TensorInfo, data_start: int, size: int, alignment: int, block_sizes: Mapping[int, tuple[int, int]]
) -> None:
    if t.type not in block_sizes:
        raise GGUFError(f"tensor {t.name}: unknown ggml type {t.type}")
    block, nbytes = block_sizes[t.type]
    if t.shape[0] % block:
        raise GGUFError(f"tensor {t.name}: first dimension {t.shape[0]} is not a multiple of its block ({block})")
    length = t.n_elements // block * nbytes
    if t.offset % alignment or data_start + t.offset + length > size:
        raise GGUFError(
            f"tensor {t.name}: {length} bytes at data offset {t.offset} lie past the end of the file "
            f"({size} bytes; truncated or corrupt)"
        )
