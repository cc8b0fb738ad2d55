"""hack/vllm_parse_args.py + tests/contracts/vllm.py against the real vLLM 0.33.0 (no GPU, no model)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.contracts.vllm import VllmArgsRejected, parse_vllm_args_many

pytestmark = pytest.mark.slow

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4})
RENDERED = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "--host",
    "0.0.0.0",
    "--port",
    "8000",
    "--served-model-name",
    "llama",
    "--max-num-seqs",
    "64",
    "--max-num-batched-tokens",
    "8192",
    "--max-model-len",
    "8192",
    "--enable-prefix-caching",
    "--kv-cache-dtype",
    "fp8",
    "--gpu-memory-utilization",
    "0.9",
    "--block-size",
    "16",
    "--tensor-parallel-size",
    "2",
    "--speculative-config",
    SPEC,
    "--kv-offloading-size",
    "4",
    "--dtype",
    "bfloat16",
    "--download-dir",
    "/models",
    "--trust-remote-code",
]

CASES: dict[str, list[str]] = {
    "rendered": RENDERED,
    "model_flag": ["--model", "m", "--no-enable-prefix-caching", "--quantization", "awq"],
    "swap_space": ["m", "--swap-space", "4"],
    "bad_kv_dtype": ["m", "--kv-cache-dtype", "fp9"],
    "bad_dtype": ["m", "--dtype", "float8"],
    "bad_quantization": ["m", "--quantization", "int3"],
    "bad_spec_key": ["m", "--speculative-config", '{"method": "ngram", "lookup_max": 4}'],
    "bad_spec_method": ["m", "--speculative-config", '{"method": "medusa2", "num_speculative_tokens": 2}'],
    "bad_spec_json": ["m", "--speculative-config", "{method: ngram}"],
    "auto_tool_no_parser": ["m", "--enable-auto-tool-choice"],
}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any] | VllmArgsRejected]:
    out = parse_vllm_args_many(list(CASES.values()))
    return dict(zip(CASES, out, strict=True))


def ok(results: dict[str, Any], name: str) -> dict[str, Any]:
    r = results[name]
    assert not isinstance(r, VllmArgsRejected), str(r)
    assert r["vllm_version"] == "0.33.0"
    return dict(r)


def rejected(results: dict[str, Any], name: str) -> VllmArgsRejected:
    r = results[name]
    assert isinstance(r, VllmArgsRejected), f"{name} was accepted: {CASES[name]}"
    return r


def test_rendered_args_parse_into_engine_args(results: dict[str, Any]) -> None:
    r = ok(results, "rendered")
    e = r["engine_args"]
    assert e["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert e["max_num_seqs"] == 64
    assert e["max_num_batched_tokens"] == 8192
    assert e["max_model_len"] == 8192
    assert e["enable_prefix_caching"] is True
    assert e["kv_cache_dtype"] == "fp8"
    assert e["gpu_memory_utilization"] == 0.9
    assert e["block_size"] == 16
    assert e["tensor_parallel_size"] == 2
    assert e["kv_offloading_size"] == 4.0
    assert e["served_model_name"] == ["llama"]
    assert e["dtype"] == "bfloat16"
    assert e["download_dir"] == "/models"
    assert e["trust_remote_code"] is True
    # speculative JSON is parsed into a dict, and passes the SpeculativeConfig key/method checks
    assert e["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}
    assert r["checks"]["speculative"]["config"]["method"] == "ngram"
    assert {"ngram", "draft_model", "eagle", "eagle3", "mtp"} <= set(r["checks"]["speculative"]["methods"])
    cache = r["checks"]["cache_config"]
    assert cache["cache_dtype"] == "fp8" and cache["block_size"] == 16
    assert cache["kv_offloading_size"] == 4.0 and cache["kv_offloading_backend"] == "native"
    assert r["args"]["host"] == "0.0.0.0" and r["args"]["port"] == 8000


def test_model_flag_and_negated_prefix_caching(results: dict[str, Any]) -> None:
    e = ok(results, "model_flag")["engine_args"]
    assert e["model"] == "m"
    assert e["enable_prefix_caching"] is False
    assert e["quantization"] == "awq"
    assert "bitsandbytes" not in ok(results, "model_flag")["checks"]["quantization"]["methods"]


def test_swap_space_was_removed(results: dict[str, Any]) -> None:
    r = rejected(results, "swap_space")
    assert r.stage == "parse" and r.returncode == 2
    assert "unrecognized arguments: --swap-space 4" in r.error


@pytest.mark.parametrize(
    ("name", "stage", "needle"),
    [
        ("bad_kv_dtype", "check", "Invalid kv_cache_dtype: 'fp9'"),
        ("bad_dtype", "parse", "invalid choice: 'float8'"),
        ("bad_quantization", "check", "Unknown quantization method: int3"),
        ("bad_spec_key", "check", "unknown keys ['lookup_max']"),
        ("bad_spec_method", "check", "method 'medusa2' not in"),
        ("bad_spec_json", "parse", "--speculative-config"),
        ("auto_tool_no_parser", "validate", "--enable-auto-tool-choice requires --tool-call-parser"),
    ],
)
def test_invalid_args_are_rejected(results: dict[str, Any], name: str, stage: str, needle: str) -> None:
    r = rejected(results, name)
    assert r.stage == stage, r
    assert needle in r.error, r.error
