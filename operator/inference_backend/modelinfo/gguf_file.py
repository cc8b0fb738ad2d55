"""A GGUF file's header: metadata keys and the tensor table, read by gguf_header.py (bounded, streaming; gguf-py
gives the ggml type sizes and llama.cpp's file type names).

Keys (llama.cpp gguf-py constants.py Keys): general.architecture (ARCH), general.file_type (a LlamaFileType),
ARCH.block_count, ARCH.context_length, ARCH.embedding_length, ARCH.attention.head_count, .head_count_kv,
.key_length, ARCH.expert_count, ARCH.expert_used_count, tokenizer.ggml.model / .pre / .tokens. Tensor element
counts are the logical ones whatever the quantization, so the parameter count is exact. Routed experts are the
``*_exps`` tensors (ffn_gate_exps, ffn_up_exps, ffn_down_exps: one dimension per expert).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inference_backend.api.common import GGUF_QUANTIZATIONS
from inference_backend.modelinfo import tensors as tz
from inference_backend.modelinfo.errors import InspectError, import_extra
from inference_backend.modelinfo.facts import Facts
from inference_backend.modelinfo.gguf_header import GGUFError, Header, read_header
from inference_backend.modelinfo.vocab import vocab_hash

# LlamaFileType names -> the Model's dtype, for the unquantized file types
_FILE_DTYPES = {"ALL_F32": "float32", "MOSTLY_F16": "float16", "MOSTLY_BF16": "bfloat16"}
_FILE_QUANT = {"ALL_F32": "f32", "MOSTLY_F16": "f16", "MOSTLY_BF16": "bf16"}


def _reader(path: Path) -> Header:
    gguf = import_extra("gguf", path, "GGUF")
    try:
        return read_header(path, {int(k): v for k, v in gguf.GGML_QUANT_SIZES.items()})
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except GGUFError as exc:
        text = str(exc)
        if text.startswith("magic"):
            raise InspectError(f"{path}: not a GGUF file ({text})") from exc
        raise InspectError(f"{path}: corrupt GGUF header ({text})") from exc


def _value(reader: Header, key: str) -> Any:
    return reader.fields.get(key)


def _count(value: Any) -> int | None:
    """A positive count; a per-layer list whose entries all agree gives that entry."""
    if isinstance(value, list):
        values = {v for v in value if isinstance(v, int) and v > 0}
        return values.pop() if len(values) == 1 else None
    return int(value) if isinstance(value, int) and value > 0 else None


def _quantization(reader: Header, path: Path, facts: Facts) -> None:
    import gguf

    raw = _value(reader, "general.file_type")
    if raw is None:
        raise InspectError(f"{path}: no general.file_type in the GGUF header: set quantization in the Model by hand")
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise InspectError(f"{path}: general.file_type {raw!r:.40} is not an integer")
    try:
        name = gguf.LlamaFileType(int(raw)).name
    except ValueError as exc:
        raise InspectError(f"{path}: general.file_type {raw} is not a llama.cpp file type") from exc
    quant = _FILE_QUANT.get(name) or name.removeprefix("MOSTLY_").lower()
    if quant not in GGUF_QUANTIZATIONS:
        raise InspectError(
            f"{path}: GGUF file type {name} is not a quantization the Model API knows "
            f"({', '.join(sorted(GGUF_QUANTIZATIONS))})"
        )
    facts.set("quantization", quant, f"general.file_type {int(raw)} ({name})")
    if name in _FILE_DTYPES:
        facts.set("dtype", _FILE_DTYPES[name], f"general.file_type {int(raw)} ({name})")


def inspect_gguf(path: Path) -> Facts:
    reader = _reader(path)
    facts = Facts(str(path))
    try:
        _read(reader, path, facts)
    except InspectError as exc:
        text = str(exc)
        raise InspectError(text if text.startswith(str(path)) else f"{path}: {text}") from exc
    return facts


def _read(reader: Header, path: Path, facts: Facts) -> None:
    facts.set("format", "gguf", "GGUF magic")
    arch = _value(reader, "general.architecture")
    if not isinstance(arch, str):
        raise InspectError(f"{path}: no general.architecture in the GGUF header")
    facts.notes.append(
        f"general.architecture {arch} (a llama.cpp architecture, not a Hugging Face class: architecture left out)"
    )
    _quantization(reader, path, facts)
    for name, key in (
        ("layers", "block_count"),
        ("attentionHeads", "attention.head_count"),
        ("kvHeads", "attention.head_count_kv"),
        ("headDim", "attention.key_length"),
        ("contextLength", "context_length"),
        ("experts", "expert_count"),
        ("activeExpertsPerToken", "expert_used_count"),
    ):
        facts.set(name, _count(_value(reader, f"{arch}.{key}")), f"{arch}.{key}")
    heads, embd = facts.values.get("attentionHeads"), _count(_value(reader, f"{arch}.embedding_length"))
    facts.set("hiddenSize", embd, f"{arch}.embedding_length")
    if "kvHeads" not in facts.values and heads:
        facts.set("kvHeads", heads, f"no {arch}.attention.head_count_kv: multi-head attention (= heads)")
    if "headDim" not in facts.values and heads and embd and embd % heads == 0:
        facts.set("headDim", embd // heads, f"{arch}.embedding_length / attention.head_count")
    if facts.values.get("experts") in (None, 0, 1):
        facts.values.pop("experts", None)
        facts.values.pop("activeExpertsPerToken", None)
    table = [tz.Tensor(t.name, t.shape, str(t.type)) for t in reader.tensors]
    total = sum(t.n_elements for t in reader.tensors)
    where = f"GGUF tensor table ({len(table)} tensors)"
    facts.set("parameters", tz.parameters_text(total), where)
    experts, active = facts.values.get("experts"), facts.values.get("activeExpertsPerToken")
    if experts and active:
        routed = tz.routed_expert_parameters(table, experts)
        if routed:
            count = tz.active_parameters(total, routed, experts, active, str(path))
            facts.set(
                "activeParameters",
                tz.parameters_text(count),
                f"{where}: dense + {active}/{experts} of {tz.parameters_text(routed)} in *_exps",
            )
    tokens = _value(reader, "tokenizer.ggml.tokens")
    if isinstance(tokens, list) and tokens:
        pre, model = _value(reader, "tokenizer.ggml.pre"), _value(reader, "tokenizer.ggml.model")
        family = pre if isinstance(pre, str) and pre not in ("", "default") else model
        tok = {"family": str(family or "unknown"), "vocabSize": len(tokens), "vocabHash": vocab_hash(tokens)}
        facts.set("tokenizer", tok, "tokenizer.ggml.tokens (family: tokenizer.ggml.pre, else tokenizer.ggml.model)")
    else:
        facts.notes.append("no tokenizer.ggml.tokens: tokenizer facts left out")
