"""Attention shapes of well-known open models, as data with sources, and the lookup from a model's name.

Every row is copied from the model's ``config.json`` on its Hugging Face repository (``num_hidden_layers``,
``num_attention_heads``, ``num_key_value_heads``, ``head_dim`` or ``hidden_size / num_attention_heads``,
``max_position_embeddings``, ``num_local_experts`` or ``n_routed_experts``, and for multi-head latent attention
``kv_lora_rank + qk_rope_head_dim``: DeepSeek-V2/V3/R1, Kimi K2); parameter counts are the repositories'
safetensors totals (the "Model size" the hub shows), active parameters of MoE models from their model cards. The
source of each row is the repository named in ``repo``.

Lookup (``find``): a model's uri is split into canonical tokens (lower case, split on ``/ - _`` and a weight-file
suffix dropped), and a row matches when every token of one of its name forms is among them, so
``hf://meta-llama/Llama-3.1-8B-Instruct``, ``.../Meta-Llama-3.1-8B-Instruct-AWQ`` and a GGUF file
``Llama-3.1-8B-Instruct-Q4_K_M.gguf`` all find Llama-3.1-8B, never Llama-3.1-70B ("8b" is a token, not a
substring). A row is not used when the model's architecture class or parameter count (beyond 25%) contradicts it.
Otherwise the row nearest in parameter count stands in, and the reasons say so. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ArchShape:
    """Attention shape of a known model, for KV sizing and tensor-parallel checks when a Model gives none."""

    name: str
    parameters: int
    layers: int
    kv_heads: int
    head_dim: int
    context: int
    attention_heads: int = 0
    architecture: str = ""
    """Hugging Face architecture class (config.json ``architectures[0]``)."""
    forms: tuple[str, ...] = ()
    """Name forms, each a space-separated token set every spelling of the model carries."""
    repo: str = ""
    """The Hugging Face repository whose config.json the row is copied from (the row's source)."""
    experts: int = 0
    active_parameters: int = 0
    kv_latent: int = 0
    """Multi-head latent attention: kv_lora_rank + qk_rope_head_dim, the elements one token's compressed KV holds
    per layer (0: keys and values of ``kv_heads`` heads)."""


_LLAMA, _QWEN2, _MISTRAL = "LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"
_MIXTRAL, _PHI3, _GEMMA2 = "MixtralForCausalLM", "Phi3ForCausalLM", "Gemma2ForCausalLM"
_DSV2, _DSV3 = "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"


def _row(
    name: str,
    params: float,
    layers: int,
    heads: int,
    kv: int,
    head_dim: int,
    ctx: int,
    arch: str,
    forms: tuple[str, ...],
    repo: str,
    experts: int = 0,
    active: float = 0,
    latent: int = 0,
) -> ArchShape:
    return ArchShape(
        name, int(params), layers, kv, head_dim, ctx, heads, arch, forms, repo, experts, int(active), latent
    )


# fmt: off
ARCH_TABLE: tuple[ArchShape, ...] = (
    _row("Qwen2.5-0.5B", 494e6, 24, 14, 2, 64, 32768, _QWEN2, ("qwen2.5 0.5b",), "Qwen/Qwen2.5-0.5B-Instruct"),
    _row("Llama-3.2-1B", 1.236e9, 16, 32, 8, 64, 131072, _LLAMA, ("llama 3.2 1b",), "meta-llama/Llama-3.2-1B"),
    _row("Qwen2.5-1.5B", 1.544e9, 28, 12, 2, 128, 32768, _QWEN2, ("qwen2.5 1.5b",), "Qwen/Qwen2.5-1.5B-Instruct"),
    _row("Gemma-2-2B", 2.614e9, 26, 8, 4, 256, 8192, _GEMMA2, ("gemma 2 2b",), "google/gemma-2-2b"),
    _row("Qwen2.5-3B", 3.086e9, 36, 16, 2, 128, 32768, _QWEN2, ("qwen2.5 3b",), "Qwen/Qwen2.5-3B-Instruct"),
    _row("Llama-3.2-3B", 3.213e9, 28, 24, 8, 128, 131072, _LLAMA, ("llama 3.2 3b",), "meta-llama/Llama-3.2-3B"),
    _row("Phi-3-mini", 3.821e9, 32, 32, 32, 96, 4096, _PHI3, ("phi 3 mini",), "microsoft/Phi-3-mini-4k-instruct"),
    _row("Llama-2-7B", 6.738e9, 32, 32, 32, 128, 4096, _LLAMA, ("llama 2 7b",), "meta-llama/Llama-2-7b-hf"),
    _row("Mistral-7B", 7.248e9, 32, 32, 8, 128, 32768, _MISTRAL, ("mistral 7b",), "mistralai/Mistral-7B-v0.3"),
    _row("Qwen2.5-7B", 7.616e9, 28, 28, 4, 128, 32768, _QWEN2, ("qwen2.5 7b",), "Qwen/Qwen2.5-7B-Instruct"),
    _row("Llama-3.1-8B", 8.030e9, 32, 32, 8, 128, 131072, _LLAMA, ("llama 3.1 8b", "llama 3 8b"),
         "meta-llama/Llama-3.1-8B"),
    _row("Gemma-2-9B", 9.242e9, 42, 16, 8, 256, 8192, _GEMMA2, ("gemma 2 9b",), "google/gemma-2-9b"),
    _row("Llama-2-13B", 13.016e9, 40, 40, 40, 128, 4096, _LLAMA, ("llama 2 13b",), "meta-llama/Llama-2-13b-hf"),
    _row("Phi-3-medium", 13.96e9, 40, 40, 10, 128, 4096, _PHI3, ("phi 3 medium",),
         "microsoft/Phi-3-medium-4k-instruct"),
    _row("Qwen2.5-14B", 14.770e9, 48, 40, 8, 128, 32768, _QWEN2, ("qwen2.5 14b",), "Qwen/Qwen2.5-14B-Instruct"),
    _row("Gemma-2-27B", 27.227e9, 46, 32, 16, 128, 8192, _GEMMA2, ("gemma 2 27b",), "google/gemma-2-27b"),
    _row("Qwen2.5-32B", 32.764e9, 64, 40, 8, 128, 32768, _QWEN2, ("qwen2.5 32b",), "Qwen/Qwen2.5-32B-Instruct"),
    _row("Mixtral-8x7B", 46.703e9, 32, 32, 8, 128, 32768, _MIXTRAL, ("mixtral 8x7b",),
         "mistralai/Mixtral-8x7B-v0.1", experts=8, active=12.9e9),
    _row("Llama-2-70B", 68.977e9, 80, 64, 8, 128, 4096, _LLAMA, ("llama 2 70b",), "meta-llama/Llama-2-70b-hf"),
    _row("Llama-3.1-70B", 70.554e9, 80, 64, 8, 128, 131072, _LLAMA, ("llama 3.1 70b", "llama 3.3 70b", "llama 3 70b"),
         "meta-llama/Llama-3.1-70B"),
    _row("Qwen2.5-72B", 72.706e9, 80, 64, 8, 128, 32768, _QWEN2, ("qwen2.5 72b",), "Qwen/Qwen2.5-72B-Instruct"),
    _row("Mixtral-8x22B", 140.621e9, 56, 48, 8, 128, 65536, _MIXTRAL, ("mixtral 8x22b",),
         "mistralai/Mixtral-8x22B-v0.1", experts=8, active=39.1e9),
    _row("Llama-3.1-405B", 405.853e9, 126, 128, 8, 128, 131072, _LLAMA, ("llama 3.1 405b",),
         "meta-llama/Llama-3.1-405B"),
    _row("DeepSeek-V2", 236e9, 60, 128, 128, 40, 163840, _DSV2, ("deepseek v2",),
         "deepseek-ai/DeepSeek-V2", experts=160, active=21e9, latent=512 + 64),
    _row("DeepSeek-V3", 685e9, 61, 128, 128, 56, 163840, _DSV3, ("deepseek v3", "deepseek r1"),
         "deepseek-ai/DeepSeek-V3", experts=256, active=37e9, latent=512 + 64),
    _row("Kimi-K2", 1.03e12, 61, 64, 64, 112, 131072, _DSV3, ("kimi k2",),
         "moonshotai/Kimi-K2-Instruct", experts=384, active=32e9, latent=512 + 64),
)
# fmt: on

_SPLIT = re.compile(r"[/_\-\s]+")
_SUFFIX = re.compile(r"\.(gguf|safetensors|onnx|bin|pt|pth)$")


def name_tokens(uri: str) -> frozenset[str]:
    """Canonical tokens of a model's uri or name: ``hf://meta-llama/Meta-Llama-3.1-8B-Instruct`` ->
    {meta, llama, 3.1, 8b, instruct}. The scheme is dropped; dots stay inside tokens (``qwen2.5``, ``3.1``)."""
    path = uri.split("://", 1)[-1].split("?", 1)[0].lower()
    path = _SUFFIX.sub("", path.rstrip("/"))
    return frozenset(t for t in _SPLIT.split(path) if t)


def _form_tokens(form: str) -> frozenset[str]:
    return frozenset(form.split())


def nearest_shape(parameters: int) -> ArchShape:
    """The row nearest by parameter ratio; ties go to the smaller model (first in the table). Multi-head latent
    attention rows never stand in for another model: their KV is a twentieth of a grouped-query model's, and a
    stand-in must not under-size the cache."""
    rows = [r for r in ARCH_TABLE if not r.kv_latent]
    return min(rows, key=lambda s: abs(math.log(parameters / s.parameters)))


def find(uri: str | None, parameters: int, architecture: str | None) -> tuple[ArchShape | None, str]:
    """The row the model's name identifies, and why another was not used ("" when none was named)."""
    if not uri:
        return None, ""
    toks = name_tokens(uri)
    best: tuple[int, ArchShape] | None = None
    for row in ARCH_TABLE:
        size = max((len(f) for f in map(_form_tokens, row.forms) if f <= toks), default=0)
        if size and (best is None or size > best[0]):
            best = (size, row)
    if best is None:
        return None, ""
    row = best[1]
    if architecture and row.architecture and architecture != row.architecture:
        return None, f"the name suggests {row.name}, but architecture {architecture} is not {row.architecture}"
    if abs(math.log(parameters / row.parameters)) > math.log(1.25):
        return None, (
            f"the name suggests {row.name} ({row.parameters / 1e9:.2f}B), but parameters "
            f"{parameters / 1e9:.2f}B differ by more than 25%"
        )
    return row, ""
