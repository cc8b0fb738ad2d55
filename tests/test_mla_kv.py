"""Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2): the KV cache one token stores is one compressed latent
per layer, kv_lora_rank + qk_rope_head_dim elements (DeepSeek-V2, arXiv 2405.04434 section 2.1), held whole by every
tensor-parallel rank; data-parallel attention keeps a request's latent in its own group only.

The configuration is DeepSeek-V3's config.json (deepseek-ai/DeepSeek-V3 on the Hugging Face hub), the keys that size
the attention, as published: 61 layers, 128 heads, kv_lora_rank 512, qk_rope_head_dim 64, hidden_size 7168."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inference_backend.api import InferenceBackendSpec
from inference_backend.api.model import ModelSpec
from inference_backend.architectures import find, nearest_shape
from inference_backend.decision import ResolvedModel
from inference_backend.memory import KV_DTYPE_BYTES, kv_bytes_per_token, kv_heads_per_replica
from inference_backend.modelinfo.facts import Facts
from inference_backend.modelinfo.hf import read_config
from inference_backend.selection.model import resolve_model
from inference_backend.selection.options import kv_per_token

from bench.perf_model import case, load_rows

DEEPSEEK_V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "max_position_embeddings": 163840,
    "vocab_size": 129280,
    "torch_dtype": "bfloat16",
}
LAYERS, LATENT = 61, 512 + 64


def _inspected(tmp_path: Path) -> Facts:
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    facts = Facts(str(tmp_path))
    read_config(tmp_path, facts)
    return facts


def test_inspect_reads_the_latent_width_from_config_json(tmp_path: Path) -> None:
    facts = _inspected(tmp_path)
    assert facts.values["kvLatentDim"] == 576
    assert facts.sources["kvLatentDim"] == "config.json kv_lora_rank + qk_rope_head_dim"
    assert facts.values["layers"] == LAYERS


def test_a_plain_gqa_config_has_no_latent(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 32, "num_attention_heads": 32}))
    facts = Facts(str(tmp_path))
    read_config(tmp_path, facts)
    assert "kvLatentDim" not in facts.values


@pytest.mark.parametrize("kv_dtype", ["float16", "fp8"])
def test_kv_bytes_per_token_is_layers_x_latent_x_dtype(kv_dtype: str) -> None:
    assert kv_bytes_per_token(LAYERS, 1, 0, KV_DTYPE_BYTES[kv_dtype], LATENT) == LAYERS * 576 * KV_DTYPE_BYTES[kv_dtype]
    # against the grouped-query formula the config's 128 KV heads of width 7168/128 would give: 25x less
    gqa = kv_bytes_per_token(LAYERS, 128, 56, 2.0)
    assert gqa / kv_bytes_per_token(LAYERS, 1, 0, 2.0, LATENT) == pytest.approx(2 * 128 * 56 / 576)


def _resolved(tmp_path: Path) -> ResolvedModel:
    """A Model registered from the inspected config.json, resolved as the selection resolves it."""
    facts = _inspected(tmp_path)
    registered = ModelSpec.model_validate(
        {**facts.values, "uri": "hf://deepseek-ai/DeepSeek-V3", "parameters": "685B", "dtype": "fp8"}
    )
    spec = InferenceBackendSpec.model_validate({"model": {"modelRef": "v3"}})
    return resolve_model(spec.model, {"v3": registered})[0]


def test_a_registered_model_carries_the_latent_into_kv_per_token(tmp_path: Path) -> None:
    model = _resolved(tmp_path)
    assert model.kv_latent == 576
    one = LAYERS * 576 * 2  # bytes, 16-bit KV
    assert kv_per_token("vllm", model, "fp8", "auto", tp=1) == one
    # tensor parallelism does not split the latent: each of the 8 ranks holds it whole
    assert kv_per_token("vllm", model, "fp8", "auto", tp=8) == 8 * one
    assert kv_per_token("sglang", model, "fp8", "auto", tp=8) == 8 * one
    # llama.cpp splits a replica by layers: one copy
    assert kv_per_token("llamacpp", model, "fp8", "auto", tp=8) == one


def test_the_architecture_table_names_deepseek_and_kimi() -> None:
    for uri, params in (
        ("hf://deepseek-ai/DeepSeek-V3", 671e9),
        ("hf://deepseek-ai/DeepSeek-R1", 671e9),
        ("hf://deepseek-ai/DeepSeek-V3-0324", 685e9),
    ):
        row, why = find(uri, int(params), "DeepseekV3ForCausalLM")
        assert row is not None and row.name == "DeepSeek-V3", (uri, why)
        assert (row.layers, row.kv_latent) == (LAYERS, 576)
    kimi, _ = find("hf://moonshotai/Kimi-K2-Instruct", int(1.03e12), None)
    assert kimi is not None and (kimi.layers, kimi.attention_heads, kimi.kv_latent) == (61, 64, 576)
    distill, _ = find("hf://deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", int(7.6e9), None)
    assert distill is None or not distill.kv_latent  # a dense Qwen: never sized by the latent
    # an MLA row never stands in for an unknown model of its size
    assert not nearest_shape(int(685e9)).kv_latent


def test_uri_named_model_without_facts_gets_the_latent() -> None:
    spec = InferenceBackendSpec.model_validate(
        {"model": {"uri": "hf://deepseek-ai/DeepSeek-R1", "parameters": "671B", "dtype": "fp8"}}
    )
    model, reasons = resolve_model(spec.model, {})
    assert model.kv_latent == 576 and model.layers == LAYERS
    assert any("multi-head latent attention of 576" in r for r in reasons)


def test_tp_replicates_the_latent_and_dp_attention_does_not() -> None:
    assert kv_heads_per_replica(128, 8, 576) == 8
    assert kv_heads_per_replica(128, 8 // 8, 576) == 1  # DP attention over 8 groups: one TP rank per group
    assert kv_heads_per_replica(8, 8) == 8 and kv_heads_per_replica(8, 4) == 8  # GQA unchanged


def test_calibration_rows_use_the_mla_shape() -> None:
    """The harness's DeepSeek-R1 rows: 8 copies of the latent under TP8, one where SGLang runs DP attention."""
    rows = {r["id"]: r for r in load_rows() if "DeepSeek-R1" in r["model"]}
    vllm = case(rows["dstackr1-vllm-h200x8-deepseek-r1-c16"])
    assert vllm is not None and vllm.model.kv_latent == 576
    assert vllm.replica.kv_token == 8 * LAYERS * 576 * 2
    sglang = case(rows["dstackr1-sglang-h200x8-deepseek-r1-c16"])
    assert sglang is not None and sglang.replica.attention_dp == 8
    assert sglang.replica.kv_token == LAYERS * 576 * 2
