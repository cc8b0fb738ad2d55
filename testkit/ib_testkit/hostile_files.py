"""Hostile model artifacts for `model inspect`: files that lie about their sizes, counts and depths, name paths
outside their directory, or are simply huge. Each builder writes one under a directory and returns the path to
inspect. tests/test_inspect_bounds.py runs every one under resource limits (it must exit 2 naming the file);
bench/fuzz_files.py mutates the valid ones.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

from ib_testkit import gguf_files as g


def _dir(root: Path, name: str, config: object | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return d


def _gguf(root: Path, name: str, body: bytes) -> Path:
    p = root / f"{name}.gguf"
    p.write_bytes(body)
    return p


def _gguf_head(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


_ARCH = g.kv("general.architecture", g.STRING, "llama") + g.kv("general.file_type", g.UINT32, 1)


def _safetensors(root: Path, name: str, header: bytes, length: int | None = None, data: bytes = b"") -> Path:
    p = root / f"{name}.safetensors"
    p.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)
    return p


def _index(root: Path, name: str, weight_map: object) -> Path:
    d = _dir(root, name, {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2})
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return d


def _link(d: Path, name: str, target: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).symlink_to(target)
    return d


def _sparse(path: Path, size: int, head: bytes = b"") -> Path:
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def _tokenizer(root: Path, name: str, text: str | bytes) -> Path:
    d = _dir(root, name, {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "model_type": "llama"})
    (d / "tokenizer.json").write_bytes(text.encode() if isinstance(text, str) else text)
    return d


DEEP = 10_000
HOSTILE: dict[str, Callable[[Path], Path]] = {
    # GGUF (the issue's: a 160-byte file whose array claims 2^60 elements looped forever)
    "gguf-array-2^60": lambda r: _gguf(
        r, "a", _gguf_head(0, 1) + g.string("k") + struct.pack("<IIQ", 9, 4, 2**60) + bytes(120)
    ),
    "gguf-string-2^62": lambda r: _gguf(r, "s", _gguf_head(0, 1) + g.string("k") + struct.pack("<IQ", 8, 2**62)),
    "gguf-kv-count-2^63": lambda r: _gguf(r, "kv", _gguf_head(0, 2**63) + bytes(64)),
    "gguf-tensor-count-2^40": lambda r: _gguf(r, "tc", _gguf_head(2**40, 0) + bytes(64)),
    "gguf-key-2^40": lambda r: _gguf(r, "key", _gguf_head(0, 1) + struct.pack("<Q", 2**40) + bytes(64)),
    "gguf-string-array-2^40": lambda r: _gguf(
        r, "sa", _gguf_head(0, 1) + g.string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2**40) + bytes(64)
    ),
    "gguf-nested-arrays": lambda r: _gguf(
        r,
        "n",
        _gguf_head(0, 1)
        + g.string("k")
        + struct.pack("<I", 9)
        + struct.pack("<IQ", 9, 1) * 4
        + struct.pack("<IQ", 4, 0),
    ),
    "gguf-unknown-value-type": lambda r: _gguf(
        r, "vt", _gguf_head(0, 1) + g.string("k") + struct.pack("<I", 99) + bytes(16)
    ),
    "gguf-key-not-utf8": lambda r: _gguf(r, "u", _gguf_head(0, 1) + g.string(b"\xff\xfe") + struct.pack("<II", 4, 1)),
    "gguf-version-1": lambda r: _gguf(r, "v1", _gguf_head(0, 0, 1) + bytes(8)),
    "gguf-5-dims": lambda r: _gguf(
        r,
        "d5",
        _gguf_head(1, 2)
        + _ARCH
        + g.string("t")
        + struct.pack("<I", 5)
        + struct.pack("<5Q", 1, 1, 1, 1, 1)
        + struct.pack("<IQ", 0, 0)
        + bytes(64),
    ),
    "gguf-unknown-tensor-type": lambda r: _gguf(
        r, "tt", _gguf_head(1, 2) + _ARCH + g.tensor_info("t", (4,), 999, 0) + bytes(64)
    ),
    "gguf-data-past-end": lambda r: _gguf(
        r, "pe", _gguf_head(1, 2) + _ARCH + g.tensor_info("t", (2**40,), 0, 0) + bytes(64)
    ),
    "gguf-file-type-string": lambda r: _gguf(
        r,
        "ft",
        _gguf_head(0, 2)
        + g.kv("general.architecture", g.STRING, "x")
        + g.kv("general.file_type", g.STRING, "q4")
        + bytes(32),
    ),
    "gguf-alignment-3": lambda r: _gguf(r, "al", _gguf_head(0, 1) + g.kv("general.alignment", g.UINT32, 3) + bytes(32)),
    # safetensors (the issue's: a 100 MB header passed 1.28 GiB, one nested 10,000 deep raised a traceback)
    "safetensors-length-2^63": lambda r: _safetensors(r, "l", b"{}", 2**63),
    "safetensors-length-past-end": lambda r: _safetensors(r, "pe", b"{}", 10**6),
    "safetensors-100MB-header": lambda r: _safetensors(r, "big", b'{"a":[' + b"[]," * 33_000_000 + b"[]]}"),
    "safetensors-deep": lambda r: _safetensors(r, "deep", b'{"a":' + b"[" * DEEP + b"]" * DEEP + b"}"),
    "safetensors-5000-digit-shape": lambda r: _safetensors(
        r, "digits", b'{"t":{"dtype":"F32","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,4]}}', data=bytes(4)
    ),
    "safetensors-100-dims": lambda r: _safetensors(
        r,
        "dims",
        json.dumps({"t": {"dtype": "F32", "shape": [1] * 100, "data_offsets": [0, 4]}}).encode(),
        data=bytes(4),
    ),
    "safetensors-not-utf8": lambda r: _safetensors(r, "u", b'{"\xff":1}'),
    # config.json (the issue's: nested 10,000 deep, a 5,000-digit integer, quant_method a list: tracebacks)
    "config-deep": lambda r: _dir(r, "config-deep", '{"a":' + "[" * DEEP + "]" * DEEP + "}"),
    "config-5000-digits": lambda r: _dir(r, "config-digits", '{"num_hidden_layers": ' + "9" * 5000 + "}"),
    "config-quant-method-list": lambda r: _dir(r, "config-qm", {"quantization_config": {"quant_method": ["gptq"]}}),
    "config-quant-method-dict": lambda r: _dir(r, "config-qmd", {"quantization_config": {"quant_method": {"a": 1}}}),
    "config-20MB": lambda r: (_sparse(_dir(r, "config-big") / "config.json", 20 * 2**20, b'{"a": "'), r / "config-big")[
        1
    ],
    "config-not-object": lambda r: _dir(r, "config-list", "[1, 2]"),
    # the index (the issue's: ../outside.safetensors or an absolute path was read and counted)
    "index-parent": lambda r: _index(r, "index-parent", {"a": "../outside.safetensors"}),
    "index-absolute": lambda r: _index(r, "index-abs", {"a": "/proc/self/environ"}),
    "index-nested-parent": lambda r: _index(r, "index-np", {"a": "sub/../../outside.safetensors"}),
    "index-nul": lambda r: _index(r, "index-nul", {"a": "a\x00.safetensors"}),
    "index-not-string": lambda r: _index(r, "index-ns", {"a": ["x.safetensors"]}),
    "shard-link-to-environ": lambda r: _link(
        _dir(r, "link-env", {"num_hidden_layers": 2}), "model.safetensors", Path("/proc/self/environ")
    ),
    "config-link-outside": lambda r: _link(r / "link-config", "config.json", r / "outside.safetensors"),
    "index-200000-shards": lambda r: _index(r, "index-many", {str(i): f"s{i}.safetensors" for i in range(200_000)}),
    # tokenizer.json (the issue's: 200 MB took 3.3 GiB)
    "tokenizer-200MB": lambda r: _tokenizer(
        r, "tok-big", b'{"model":{"vocab":[' + b'["a",0],' * 25_000_000 + b'["a",0]]}}'
    ),
    "tokenizer-deep": lambda r: _tokenizer(r, "tok-deep", '{"model":{"vocab":' + "[" * DEEP + "]" * DEEP + "}}"),
    "tokenizer-5M-values": lambda r: _tokenizer(r, "tok-many", '{"model":{"vocab":[' + "0," * 5_000_000 + "0]}}"),
    # ONNX
    "onnx-past-2GiB": lambda r: _sparse(r / "huge.onnx", 2**31 + 10, b"\x08\x07"),
    "onnx-garbage": lambda r: (r / "garbage.onnx", (r / "garbage.onnx").write_bytes(b"\x0a\xff\xff\xff\xff\x0f"))[0],
}
"""Each must exit 2, naming the file, within the limits."""


def outside(root: Path) -> Path:
    """The file the index cases point at (it must never be read): a valid shard of 2 parameters."""
    p = root / "outside.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    p.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    return p
