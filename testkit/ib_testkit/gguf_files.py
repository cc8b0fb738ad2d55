"""GGUF files written byte by byte (ggml docs/gguf.md, version 3), for the inspection's bounds: a realistic
Llama-3-8B-Instruct Q4_K_M header (bench/inspect_gguf.py times it; gguf-py's reader reads it back in
tests/test_inspect_bounds.py) and hostile ones that lie about their counts and lengths.

A written file holds the header only, then grows (sparse: no disk used) to the size its tensor table implies, so the
data offsets are in range as in the real 4.9 GB file.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
F32, Q4_K, Q6_K = 0, 12, 14
"""ggml types (ggml.h enum ggml_type)."""
_BLOCK = {F32: (1, 4), Q4_K: (256, 144), Q6_K: (256, 210)}
_FMT = {
    UINT8: "B",
    INT8: "b",
    UINT16: "H",
    INT16: "h",
    UINT32: "I",
    INT32: "i",
    FLOAT32: "f",
    BOOL: "?",
    UINT64: "Q",
    INT64: "q",
    FLOAT64: "d",
}


def string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def value(kind: int, v: Any) -> bytes:
    """A value of ``kind``; an array is (element kind, elements)."""
    if kind == STRING:
        return string(v)
    if kind == ARRAY:
        elem, items = v
        body = struct.pack("<IQ", elem, len(items))
        if elem in _FMT:
            return body + struct.pack("<" + _FMT[elem] * len(items), *items)
        return body + b"".join(value(elem, i) for i in items)
    return struct.pack("<" + _FMT[kind], v)


def kv(key: str, kind: int, v: Any) -> bytes:
    return string(key) + struct.pack("<I", kind) + value(kind, v)


def tensor_info(name: str, shape: Sequence[int], kind: int, offset: int) -> bytes:
    return (
        string(name)
        + struct.pack("<I", len(shape))
        + struct.pack(f"<{len(shape)}Q", *shape)
        + struct.pack("<IQ", kind, offset)
    )


def write(
    path: Path, pairs: Sequence[bytes], tensors: Sequence[tuple[str, Sequence[int], int]], alignment: int = 32
) -> Path:
    """A GGUF v3 file of ``pairs`` (kv() outputs) and ``tensors`` (name, shape, ggml type), grown to full size."""
    infos, offset = [], 0
    for name, shape, kind in tensors:
        infos.append(tensor_info(name, shape, kind, offset))
        block, size = _BLOCK[kind]
        n = 1
        for d in shape:
            n *= d
        offset += -(-(n // block * size) // alignment) * alignment
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(pairs)) + b"".join(pairs) + b"".join(infos)
    data_start = -(-len(head) // alignment) * alignment
    with path.open("wb") as f:
        f.write(head)
        f.truncate(data_start + offset)
    return path


_BYTE_CHARS = [chr(c) for c in range(ord("!"), ord("~") + 1)] + [chr(c) for c in range(0x100, 0x144)]


def llama3_vocabulary(n_tokens: int = 128256, n_merges: int = 280147, seed: int = 3) -> tuple[list[str], list[str]]:
    """Token strings and merges shaped like Llama 3's (GPT-2 byte-level alphabet, 'Ġ' word starts, 6.4 characters
    per token on average; merges "a b"); deterministic, all tokens distinct."""
    rng = random.Random(seed)
    tokens = []
    for i in range(n_tokens - 256):
        word = "".join(rng.choice(_BYTE_CHARS) for _ in range(rng.randint(2, 9)))
        tokens.append(("\u0120" if i % 2 else "") + word + str(i))
    tokens += [f"<|reserved_special_token_{i}|>" for i in range(256)]
    merges = [f"{tokens[rng.randrange(n_tokens)]} {tokens[rng.randrange(n_tokens)]}"[:24] for _ in range(n_merges)]
    return tokens, merges


CHAT_TEMPLATE = (
    "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n"
    * 60  # Llama 3.1's template is about 4 KB
)


def llama3_8b_q4_k_m(
    path: Path, n_tokens: int = 128256, n_merges: int = 280147, n_embd: int = 4096, n_ff: int = 14336, n_layer: int = 32
) -> Path:
    """The header of Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf as llama.cpp's converter writes it: its metadata keys
    (general.*, llama.*, tokenizer.ggml.* with the 128,256 tokens, their types and 280,147 merges, the chat
    template, quantize.imatrix.*) and its 292 tensors (Q4_K, Q6_K for attn_v, ffn_down and output, F32 norms).
    ``n_embd``, ``n_ff``, ``n_layer``: smaller shapes (multiples of 256) for a file of a few MB."""
    tokens, merges = llama3_vocabulary(n_tokens, n_merges)
    pairs = [
        kv("general.architecture", STRING, "llama"),
        kv("general.type", STRING, "model"),
        kv("general.name", STRING, "Meta Llama 3.1 8B Instruct"),
        kv("general.finetune", STRING, "Instruct"),
        kv("general.basename", STRING, "Meta-Llama-3.1"),
        kv("general.size_label", STRING, "8B"),
        kv("general.license", STRING, "llama3.1"),
        kv("general.tags", ARRAY, (STRING, ["facebook", "meta", "pytorch", "llama", "llama-3", "text-generation"])),
        kv("general.languages", ARRAY, (STRING, ["en", "de", "fr", "it", "pt", "hi", "es", "th"])),
        kv("llama.block_count", UINT32, n_layer),
        kv("llama.context_length", UINT32, 131072),
        kv("llama.embedding_length", UINT32, n_embd),
        kv("llama.feed_forward_length", UINT32, n_ff),
        kv("llama.attention.head_count", UINT32, 32),
        kv("llama.attention.head_count_kv", UINT32, 8),
        kv("llama.rope.freq_base", FLOAT32, 500000.0),
        kv("llama.attention.layer_norm_rms_epsilon", FLOAT32, 1e-5),
        kv("general.file_type", UINT32, 15),
        kv("llama.vocab_size", UINT32, n_tokens),
        kv("llama.rope.dimension_count", UINT32, 128),
        kv("tokenizer.ggml.model", STRING, "gpt2"),
        kv("tokenizer.ggml.pre", STRING, "llama-bpe"),
        kv("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
        kv("tokenizer.ggml.token_type", ARRAY, (INT32, [1] * (n_tokens - 256) + [3] * 256)),
        kv("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
        kv("tokenizer.ggml.bos_token_id", UINT32, 128000),
        kv("tokenizer.ggml.eos_token_id", UINT32, 128009),
        kv("tokenizer.chat_template", STRING, CHAT_TEMPLATE),
        kv("general.quantization_version", UINT32, 2),
        kv("quantize.imatrix.file", STRING, "/models_out/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B.imatrix"),
        kv("quantize.imatrix.dataset", STRING, "/training_dir/calibration_datav3.txt"),
        kv("quantize.imatrix.entries_count", INT32, 224),
        kv("quantize.imatrix.chunks_count", INT32, 125),
    ]
    kv_width = n_embd // 4
    tensors: list[tuple[str, Sequence[int], int]] = [
        ("rope_freqs.weight", (64,), F32),
        ("token_embd.weight", (n_embd, n_tokens), Q4_K),
    ]
    for i in range(n_layer):
        tensors += [
            (f"blk.{i}.attn_norm.weight", (n_embd,), F32),
            (f"blk.{i}.attn_q.weight", (n_embd, n_embd), Q4_K),
            (f"blk.{i}.attn_k.weight", (n_embd, kv_width), Q4_K),
            (f"blk.{i}.attn_v.weight", (n_embd, kv_width), Q6_K),
            (f"blk.{i}.attn_output.weight", (n_embd, n_embd), Q4_K),
            (f"blk.{i}.ffn_norm.weight", (n_embd,), F32),
            (f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), Q4_K),
            (f"blk.{i}.ffn_up.weight", (n_embd, n_ff), Q4_K),
            (f"blk.{i}.ffn_down.weight", (n_ff, n_embd), Q6_K),
        ]
    tensors += [("output_norm.weight", (n_embd,), F32), ("output.weight", (n_embd, n_tokens), Q6_K)]
    return write(path, pairs, tensors)


LLAMA3_8B_PARAMETERS = (
    64 + 4096 * 128256 * 2 + 4096 + 32 * (2 * 4096 + 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
)
"""The tensor table's element count (8,030,261,312: Llama-3.1-8B's 8,030,261,248 plus rope_freqs' 64)."""
