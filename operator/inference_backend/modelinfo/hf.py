"""A local Hugging Face model directory: config.json, tokenizer.json and the safetensors headers (or index).

Architecture facts come from config.json (the text model's config where there is a ``text_config``), parameter count
and dtype from the safetensors headers (every shard the index names), the vocabulary from tokenizer.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inference_backend.memory import DTYPE_BYTES
from inference_backend.modelinfo import tensors as tz
from inference_backend.modelinfo.errors import InspectError, confined, read_json
from inference_backend.modelinfo.facts import Facts, first_int
from inference_backend.modelinfo.safetensors_header import read_header
from inference_backend.modelinfo.vocab import tokenizer_json_tokens, vocab_hash

INDEX = "model.safetensors.index.json"
# config.json quantization_config.quant_method -> the Model's quantization
QUANT_METHODS = {"gptq": "gptq", "awq": "awq", "fp8": "fp8", "bitsandbytes": "bitsandbytes"}
_CONFIG_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "fp8": "fp8"}


def read_config(directory: Path, facts: Facts) -> dict[str, Any]:
    """config.json's architecture facts into ``facts``; returns the (text) config."""
    path = confined(directory, directory / "config.json")
    config = read_json(path)
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        facts.set("architecture", archs[0], "config.json architectures[0]")
    text = config.get("text_config")
    where = "config.json"
    if isinstance(text, dict):
        config, where = {**config, **text}, "config.json text_config"
    set_architecture_facts(config, where, facts)
    return config


def set_architecture_facts(config: dict[str, Any], where: str, facts: Facts) -> None:
    """Layers, heads, head dim, context and experts from a config.json-shaped mapping."""
    for name, keys in (
        ("layers", ("num_hidden_layers", "n_layer", "num_layers", "n_layers")),
        ("attentionHeads", ("num_attention_heads", "n_head", "num_heads")),
        ("kvHeads", ("num_key_value_heads", "n_head_kv", "num_kv_heads")),
        ("contextLength", ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")),
        ("experts", ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")),
        ("activeExpertsPerToken", ("num_experts_per_tok", "num_experts_per_token", "moe_topk")),
    ):
        found = first_int(config, *keys)
        if found:
            facts.set(name, found[0], f"{where} {found[1]}")
    heads = facts.values.get("attentionHeads")
    if "kvHeads" not in facts.values and heads:
        if config.get("multi_query") is True:
            facts.set("kvHeads", 1, f"{where} multi_query")
        else:
            facts.set("kvHeads", heads, f"{where}: no num_key_value_heads, so multi-head attention (= heads)")
    head_dim = first_int(config, "head_dim")
    hidden = first_int(config, "hidden_size", "n_embd", "d_model")
    if hidden:
        facts.set("hiddenSize", hidden[0], f"{where} {hidden[1]}")
    if head_dim:
        facts.set("headDim", head_dim[0], f"{where} head_dim")
    elif hidden and heads:
        if hidden[0] % heads:
            raise InspectError(f"{where}: {hidden[1]} {hidden[0]} is not a multiple of the {heads} attention heads")
        facts.set("headDim", hidden[0] // heads, f"{where} {hidden[1]} / attention heads")
    rank, rope = first_int(config, "kv_lora_rank"), first_int(config, "qk_rope_head_dim")
    if rank and rope:  # multi-head latent attention: one compressed latent per token and layer (MLA)
        facts.set("kvLatentDim", rank[0] + rope[0], f"{where} kv_lora_rank + qk_rope_head_dim")
    if facts.values.get("experts") == 1:  # a dense model that names its single FFN an expert
        facts.values.pop("experts")
        facts.values.pop("activeExpertsPerToken", None)


def _quantization(config: dict[str, Any], facts: Facts) -> tuple[str | None, int]:
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        return None, 4
    method = qc.get("quant_method")
    if not isinstance(method, str) or method not in QUANT_METHODS:
        raise InspectError(
            f"{facts.path}/config.json: quantization_config.quant_method {method!r:.60} is not one "
            f"the Model API knows ({', '.join(sorted(QUANT_METHODS))})"
        )
    bits = qc.get("bits")
    if method == "bitsandbytes":
        bits = 4 if qc.get("load_in_4bit") else 8
    if not isinstance(bits, int) or bits <= 0 or 32 % bits:
        bits = 4 if method in ("gptq", "awq") else 8
    facts.set("quantization", QUANT_METHODS[method], "config.json quantization_config.quant_method")
    return method, bits


MAX_INDEX_BYTES = 64 * 2**20
"""model.safetensors.index.json (DeepSeek-V3's, 91,000 tensors in 163 shards, is 9 MB)."""
MAX_SHARDS = 100_000


def shard_path(directory: Path, index_path: Path, name: object) -> Path:
    """The shard an index names: a plain relative path inside ``directory`` (no absolute path, no ``..``, no empty
    or ``.`` part, no backslash or NUL), else InspectError: an index naming ``../outside.safetensors`` or
    ``/proc/self/environ`` is refused, not read. (A shard that is a symbolic link inside the directory is followed:
    a Hugging Face cache snapshot links its files to ../../blobs.)"""
    parts = name.split("/") if isinstance(name, str) else []
    if not parts or any(p in ("", ".", "..") or "\\" in p or "\x00" in p for p in parts) or not isinstance(name, str):
        raise InspectError(
            f"{index_path}: weight_map names {name!r:.80}, not a file inside {directory} (a relative path without '..')"
        )
    return directory.joinpath(*parts)


def weight_files(directory: Path) -> tuple[list[Path], dict[str, Any] | None]:
    """The safetensors shards (all the index names, or every *.safetensors), and the index if there is one."""
    index_path = directory / INDEX
    if index_path.is_file():
        index = read_json(confined(directory, index_path), MAX_INDEX_BYTES)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise InspectError(f"{index_path}: no weight_map")
        names = set()
        for value in weight_map.values():
            if not isinstance(value, str):
                raise InspectError(f"{index_path}: weight_map values must be file names, found {value!r:.80}")
            names.add(value)
        if len(names) > MAX_SHARDS:
            raise InspectError(f"{index_path}: {len(names)} shards, more than the {MAX_SHARDS} read")
        return [shard_path(directory, index_path, n) for n in sorted(names)], index
    return sorted(directory.glob("*.safetensors")), None


def read_weights(directory: Path, config: dict[str, Any], facts: Facts) -> None:
    """Parameters, active parameters and dtype from the safetensors headers (or the index's total size)."""
    method, bits = _quantization(config, facts)
    files, index = weight_files(directory)
    present = [confined(directory, f) for f in files if f.is_file()]
    if index is not None and not present:
        _estimate_from_index(directory, index, config, facts)
        return
    if index is not None and len(present) < len(files):
        missing = sorted(f.name for f in files if not f.is_file())
        raise InspectError(f"{directory / INDEX}: names shards that are missing: {', '.join(missing)}")
    if not present:
        if any(directory.glob("*.bin")) or any(directory.glob("*.pt")):
            facts.set("format", "pytorch", "*.bin / *.pt weights (pickled PyTorch)")
            facts.notes.append("pickled PyTorch weights are not opened (unsafe to unpickle): parameters not counted")
        else:
            facts.notes.append("no weight files: parameters not counted")
        return
    facts.set("format", "safetensors", f"{len(present)} .safetensors file(s)")
    tensors = [t for f in present for t in read_header(f)]
    where = f"safetensors headers ({len(tensors)} tensors in {len(present)} file(s))"
    total = tz.count_parameters(tensors, method, bits)
    facts.set("parameters", tz.parameters_text(total), where)
    dtype = tz.weight_dtype([t for t in tensors if t.dtype in DTYPE_BYTES])
    if dtype is not None:
        facts.set("dtype", dtype, where + ": the dtype holding the most weights")
    _active(tensors, total, method, bits, facts, where)


def _active(tensors: list[tz.Tensor], total: int, method: str | None, bits: int, facts: Facts, where: str) -> None:
    experts, active = facts.values.get("experts"), facts.values.get("activeExpertsPerToken")
    if not experts:
        return
    if not active:
        facts.notes.append(f"{experts} experts but no experts-per-token in the config: activeParameters not computed")
        return
    routed = tz.routed_expert_parameters(tensors, experts, method, bits)
    if routed == 0:
        facts.notes.append(f"{experts} experts in the config but no expert tensors found: activeParameters not set")
        return
    count = tz.active_parameters(total, routed, experts, active, facts.path)
    facts.set(
        "activeParameters",
        tz.parameters_text(count),
        f"{where}: dense + {active}/{experts} of {tz.parameters_text(routed)} in the experts",
    )


def _estimate_from_index(directory: Path, index: dict[str, Any], config: dict[str, Any], facts: Facts) -> None:
    meta = index.get("metadata")
    total_size = meta.get("total_size") if isinstance(meta, dict) else None
    dtype = _CONFIG_DTYPES.get(str(config.get("dtype") or config.get("torch_dtype")))
    facts.set("format", "safetensors", f"{INDEX} (no shard present)")
    if dtype:
        facts.set("dtype", dtype, "config.json dtype")
    if not isinstance(total_size, int) or dtype is None or "quantization" in facts.values:
        facts.notes.append(f"no shard of {INDEX} is present: parameters not counted")
        return
    count = int(total_size / DTYPE_BYTES[dtype])
    facts.set(
        "parameters",
        tz.parameters_text(count),
        f"{INDEX} metadata.total_size {total_size} bytes / {DTYPE_BYTES[dtype]:g} ({dtype}): an estimate, "
        "the shards are not here",
    )


def read_tokenizer(directory: Path, config: dict[str, Any], facts: Facts) -> None:
    """Tokenizer family (the config's model_type), vocabulary size and hash from tokenizer.json."""
    path = directory / "tokenizer.json"
    if path.is_file():
        confined(directory, path)
    family = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    if not path.is_file():
        facts.notes.append("no tokenizer.json: tokenizer facts left out")
        return
    tokens = tokenizer_json_tokens(path)
    tokenizer: dict[str, Any] = {
        "family": family or "unknown",
        "vocabSize": len(tokens),
        "vocabHash": vocab_hash(tokens),
    }
    facts.set("tokenizer", tokenizer, "tokenizer.json (family: config.json model_type)")


def inspect_hf(directory: Path) -> Facts:
    facts = Facts(str(directory))
    config = read_config(directory, facts)
    read_weights(directory, config, facts)
    read_tokenizer(directory, config, facts)
    return facts
