"""Resolve the model to serve: merge the registered Model with inline facts, infer what is plain, apply defaults."""

from __future__ import annotations

import re
from collections.abc import Mapping

from inference_backend.api.inferencebackend import ModelSource
from inference_backend.api.model import ModelSpec
from inference_backend.architectures import find, nearest_shape
from inference_backend.decision import InvalidSpec, ResolvedModel, WeightsCache
from inference_backend.quantity import parse_parameters

_SUFFIX_FORMATS = (
    (".gguf", "gguf"),
    (".onnx", "onnx"),
    (".pt", "pytorch"),
    (".pth", "pytorch"),
    (".bin", "pytorch"),
    (".safetensors", "safetensors"),
)
_GGUF_QUANT_IN_NAME = re.compile(r"(?i)[._-](q8_0|q6_k|q5_k_m|q5_k_s|q5_0|q4_k_m|q4_k_s|q4_0|q3_k_m|q2_k|f16|bf16)\b")
DEFAULT_CONTEXT = 4096
_MERGED = ("uri", "format", "architecture", "parameters", "dtype", "quantization", "context_length")


def infer_format(uri: str) -> tuple[str | None, str]:
    """The weight format a URI implies, and the reason; None when it cannot be told."""
    path = uri.split("?", 1)[0].rstrip("/").lower()
    for suffix, fmt in _SUFFIX_FORMATS:
        if path.endswith(suffix):
            return fmt, f"format {fmt} inferred from the uri suffix {suffix}"
    if path.startswith("hf://"):
        return (
            "safetensors",
            "format safetensors assumed for a Hugging Face repository (hf://) without a file suffix",
        )
    return None, ""


def resolve_model(
    source: ModelSource, registry: Mapping[str, ModelSpec], field: str = "spec.model"
) -> tuple[ResolvedModel, list[str]]:
    """Merge ``source`` with its registered Model (inline facts win) and fill in what can be inferred.

    Raises InvalidSpec naming the field when the model cannot be sized or served as written.
    """
    reasons: list[str] = []
    facts: dict[str, object] = {}
    registered: ModelSpec | None = None
    if source.model_ref is not None:
        registered = registry.get(source.model_ref)
        if registered is None:
            raise InvalidSpec(f"{field}.modelRef", f"Model {source.model_ref!r} not found in the namespace")
        facts.update({k: getattr(registered, k) for k in _MERGED})
        reasons.append(f"model {source.model_ref}: facts from the registered Model")
    overridden = [k for k in _MERGED if getattr(source, k) is not None and registered is not None]
    facts.update({k: getattr(source, k) for k in _MERGED if getattr(source, k) is not None})
    if overridden:
        reasons.append("inline facts override the registered Model: " + ", ".join(sorted(overridden)))
    uri = facts.get("uri")
    fmt = facts.get("format")
    if fmt is None:
        if not isinstance(uri, str):
            raise InvalidSpec(f"{field}.uri", "needed (or a modelRef whose Model has one)")
        fmt, why = infer_format(uri)
        if fmt is None:
            raise InvalidSpec(f"{field}.format", f"cannot infer the format from uri {uri!r}; set it")
        reasons.append(why)
    params_text = facts.get("parameters")
    if not isinstance(params_text, str):
        raise InvalidSpec(f"{field}.parameters", "needed to size the model (e.g. 8B), inline or in its Model")
    parameters = parse_parameters(params_text)
    quant = facts.get("quantization")
    if fmt == "gguf" and quant in (None, "none"):
        match = _GGUF_QUANT_IN_NAME.search(uri or "") if isinstance(uri, str) else None
        if match:
            quant = match.group(1).lower()
            reasons.append(f"quantization {quant} inferred from the GGUF file name")
        else:
            quant = "f16"
            reasons.append("quantization not given for GGUF: sizing as f16 (the largest common GGUF type)")
    dtype = facts.get("dtype")
    if dtype is None:
        dtype = {"gguf": "float16", "onnx": "float32", "pytorch": "float32"}.get(str(fmt), "bfloat16")
        reasons.append(f"dtype not given: assuming {dtype} for {fmt}")
    shape, shape_source, shape_reasons = _shape(
        registered, uri if isinstance(uri, str) else None, parameters, params_text, facts.get("architecture")
    )
    reasons.extend(shape_reasons)
    layers, kv_heads, head_dim, heads, latent = shape
    context = facts.get("context_length")
    if not isinstance(context, int):
        context = DEFAULT_CONTEXT
        reasons.append(f"contextLength not given: serving and sizing for {DEFAULT_CONTEXT} tokens")
    resolved = ResolvedModel(
        uri=uri if isinstance(uri, str) else None,
        format=str(fmt),
        parameters=parameters,
        dtype=str(dtype),
        quantization=str(quant or "none"),
        context_length=context,
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        shape_source=shape_source,
        attention_heads=heads,
        kv_latent=latent,
        architecture=str(facts["architecture"]) if facts.get("architecture") else None,
        served_name=source.served_name,
        credentials_secret=source.credentials_secret,
        tokenizer=registered.tokenizer if registered else None,
        model_ref=source.model_ref,
        active_parameters=_active_parameters(registered, parameters, field),
        cache=_cache(source),
    )
    return resolved, reasons


_SHAPE_FIELDS = (
    ("layers", "layers"),
    ("kv_heads", "kvHeads"),
    ("head_dim", "headDim"),
    ("attention_heads", "attentionHeads"),
)


def _shape(
    registered: ModelSpec | None, uri: str | None, parameters: int, params_text: str, architecture: object
) -> tuple[tuple[int, int, int, int, int], str, list[str]]:
    """(layers, KV heads, head dim, attention heads, MLA latent), where they came from, and the reasons.

    Precedence per fact: the registered Model's field, then the architecture-table row the uri names
    (architectures.find), then the row nearest in parameter count (a stand-in, said so; never a multi-head latent
    attention row). The latent (kvLatentDim) is 0 unless the Model or the named row gives one."""
    given = {f: getattr(registered, f) if registered else None for f, _ in _SHAPE_FIELDS}
    latent = int(registered.kv_latent_dim or 0) if registered else 0
    row, why = find(uri, parameters, architecture if isinstance(architecture, str) else None)
    latent = latent or (row.kv_latent if row is not None else 0)
    if all(isinstance(v, int) for v in given.values()):
        known = (
            int(given["layers"] or 0),
            int(given["kv_heads"] or 0),
            int(given["head_dim"] or 0),
            int(given["attention_heads"] or 0),
            latent,
        )
        return known, "Model facts (layers, kvHeads, headDim, attentionHeads)", []
    reasons: list[str] = []
    if why:
        reasons.append(f"architecture table: {why}; not used")
    if row is not None:
        source = f"the architecture table ({row.name}, named by the uri; config.json of {row.repo})"
    else:
        row = nearest_shape(parameters)
        source = f"the built-in shape of {row.name} (nearest size to {params_text}; a stand-in, not this model)"
    filled: dict[str, int] = {f: v if isinstance(v, int) else int(getattr(row, f)) for f, v in given.items()}
    missing = [api for f, api in _SHAPE_FIELDS if given[f] is None]
    mla = f", multi-head latent attention of {latent} elements per token and layer" if latent else ""
    reasons.append(
        f"{', '.join(missing)} from {source}: {filled['layers']} layers, {filled['attention_heads']} "
        f"attention heads, {filled['kv_heads']} KV heads, head dim {filled['head_dim']}{mla}"
    )
    shape = (filled["layers"], filled["kv_heads"], filled["head_dim"], filled["attention_heads"], latent)
    return shape, source, reasons


def _active_parameters(registered: ModelSpec | None, parameters: int, field: str) -> int | None:
    """A registered MoE Model's active parameters (at most its total), or None."""
    if registered is None or registered.active_parameters is None:
        return None
    active = parse_parameters(registered.active_parameters)
    if active > parameters:
        raise InvalidSpec(
            f"{field}.modelRef",
            f"the Model's activeParameters {registered.active_parameters} exceed "
            f"the parameters served ({parameters / 1e9:.2f}B)",
        )
    return active


def resolve_draft(name: str, registry: Mapping[str, ModelSpec]) -> ResolvedModel:
    """The draft model of speculative decoding: always a registered Model."""
    return resolve_model(ModelSource(model_ref=name), registry, "spec.speculativeDecoding.draftModelRef")[0]


def draft_incompatibility(target: ResolvedModel, draft: ResolvedModel) -> str | None:
    """Why ``draft`` cannot draft for ``target`` (tokenizer, vocabulary, architecture, size), or None."""
    if target.tokenizer is None:
        return (
            "the target has no tokenizer facts to check the draft against "
            "(serve a registered Model via spec.model.modelRef with spec.tokenizer)"
        )
    if draft.tokenizer is None:
        return f"draft {draft.model_ref} has no tokenizer facts (Model spec.tokenizer)"
    if target.tokenizer.vocab_hash and draft.tokenizer.vocab_hash:  # both read from the artifacts: the vocabularies
        if draft.tokenizer.vocab_hash != target.tokenizer.vocab_hash:
            return "the draft's vocabulary (vocabHash) differs from the target's"
    elif draft.tokenizer.family != target.tokenizer.family:
        return f"tokenizer {draft.tokenizer.family} of the draft differs from the target's {target.tokenizer.family}"
    if draft.tokenizer.vocab_size != target.tokenizer.vocab_size:
        return (
            f"vocabulary size {draft.tokenizer.vocab_size} of the draft differs from the target's "
            f"{target.tokenizer.vocab_size}"
        )
    if draft.architecture and target.architecture and draft.architecture != target.architecture:
        return f"architecture {draft.architecture} of the draft differs from the target's {target.architecture}"
    if draft.parameters >= target.parameters:
        return "the draft is not smaller than the target, so it cannot speed it up"
    return None


def _cache(source: ModelSource) -> WeightsCache | None:
    cache = source.cache
    if cache is None:
        return None
    return WeightsCache(claim=cache.pvc, host_path=cache.host_path, size=cache.size, storage_class=cache.storage_class)
