"""hack/sglang_parse_args.py + tests/contracts/sglang.py against the real SGLang 0.5.23 (no GPU, no model).

Each case goes through SGLang's own prepare_server_args (parse), ServerArgs.resolve_once (resolve) and
check_server_args (check). The flags and their rules are in docs/engine-flags/sglang-0.5.23.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contracts.sglang import SGLANG_VERSION, SglangArgsRejected, parse_sglang_args_many

pytestmark = pytest.mark.slow

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DRAFT = "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"
SERVE = ["--model-path", MODEL, "--host", "0.0.0.0", "--port", "30000", "--served-model-name", "llama"]
RENDERED = [
    *SERVE,
    "--tp-size",
    "2",
    "--mem-fraction-static",
    "0.85",
    "--max-running-requests",
    "64",
    "--chunked-prefill-size",
    "8192",
    "--context-length",
    "8192",
    "--kv-cache-dtype",
    "fp8_e4m3",
    "--disable-radix-cache",
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-draft-model-path",
    DRAFT,
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--enable-metrics",
    "--dtype",
    "bfloat16",
    "--quantization",
    "fp8",
]

CASES: dict[str, list[str]] = {
    "rendered": RENDERED,
    "ngram": [
        *SERVE,
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-num-draft-tokens",
        "8",
        "--speculative-ngram-max-bfs-breadth",
        "4",
        "--max-running-requests",
        "32",
    ],
    "eagle_auto_params": [*SERVE, "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", DRAFT],
    "multi_node": [
        "--model-path",
        MODEL,
        "--tp-size",
        "8",
        "--pp-size",
        "2",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--dist-init-addr",
        "sglang-0.sglang:20000",
    ],
    "defaults": ["--model-path", MODEL],
    "cpu_device": ["--model-path", MODEL, "--device", "cpu"],
    "abbreviated": ["--model-path", MODEL, "--mem-frac", "0.8"],
    # rejected by the parser
    "misspelled": ["--model-path", MODEL, "--tp-szie", "2"],
    "removed_ngram_window": ["--model-path", MODEL, "--speculative-ngram-max-match-window-size", "12"],
    "removed_cuda_graph_max_bs": ["--model-path", MODEL, "--cuda-graph-max-bs", "8"],
    "bad_kv_dtype": ["--model-path", MODEL, "--kv-cache-dtype", "fp8"],
    "bad_quantization": ["--model-path", MODEL, "--quantization", "int3"],
    "bad_dtype": ["--model-path", MODEL, "--dtype", "float8"],
    "no_model": ["--tp-size", "2"],
    # rejected by resolution
    "bad_spec_algorithm": ["--model-path", MODEL, "--speculative-algorithm", "MEDUSA"],
    "eagle_partial_params": [
        "--model-path",
        MODEL,
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-draft-model-path",
        DRAFT,
        "--speculative-num-steps",
        "3",
    ],
    "ngram_paged_triton": [
        "--model-path",
        MODEL,
        "--speculative-algorithm",
        "NGRAM",
        "--page-size",
        "16",
        "--attention-backend",
        "triton",
    ],
    "context_too_long": ["--model-path", MODEL, "--context-length", "200000"],
    # rejected by check_server_args
    "prefill_not_page_multiple": ["--model-path", MODEL, "--chunked-prefill-size", "1000", "--page-size", "16"],
    "tp_not_node_multiple": [
        "--model-path",
        MODEL,
        "--tp-size",
        "3",
        "--nnodes",
        "2",
        "--dist-init-addr",
        "sglang-0.sglang:20000",
    ],
    "served_name_colon": ["--model-path", MODEL, "--served-model-name", "llama:8b"],
    "pp_with_eagle": [
        "--model-path",
        MODEL,
        "--pp-size",
        "2",
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-draft-model-path",
        DRAFT,
    ],
}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any] | SglangArgsRejected]:
    out = parse_sglang_args_many(list(CASES.values()))
    return dict(zip(CASES, out, strict=True))


def ok(results: dict[str, Any], name: str) -> dict[str, Any]:
    r = results[name]
    assert not isinstance(r, SglangArgsRejected), str(r)
    assert r["sglang_version"] == SGLANG_VERSION
    assert r["stage"] == "check"
    return dict(r)


def rejected(results: dict[str, Any], name: str) -> SglangArgsRejected:
    r = results[name]
    assert isinstance(r, SglangArgsRejected), f"{name} was accepted: {CASES[name]}"
    return r


def test_rendered_args_parse_resolve_and_check(results: dict[str, Any]) -> None:
    r = ok(results, "rendered")
    a, res = r["args"], r["resolved"]
    assert a["model_path"] == MODEL and a["speculative_draft_model_path"] == DRAFT
    expected = {
        "host": "0.0.0.0",
        "port": 30000,
        "served_model_name": "llama",
        "tp_size": 2,
        "mem_fraction_static": 0.85,
        "max_running_requests": 64,
        "chunked_prefill_size": 8192,
        "context_length": 8192,
        "kv_cache_dtype": "fp8_e4m3",
        "disable_radix_cache": True,
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "enable_metrics": True,
        "dtype": "bfloat16",
        "quantization": "fp8",
    }
    assert {k: a[k] for k in expected} == expected
    assert {k: res[k] for k in expected} == expected  # resolution kept every explicit value
    # the stand-ins the harness used, and nothing else
    assert r["stand_ins"]["model_path"]["given"] == MODEL
    assert r["stand_ins"]["speculative_draft_model_path"]["given"] == DRAFT
    assert r["stand_ins"]["device"] == {"given": None, "resolved_with": "cuda"}
    assert res["model_path"] == r["stand_ins"]["model_path"]["resolved_with"]
    assert res["device"] == "cuda" and res["page_size"] == 1


def test_ngram_speculation_resolves_its_parameters(results: dict[str, Any]) -> None:
    res = ok(results, "ngram")["resolved"]
    assert res["speculative_algorithm"] == "NGRAM"
    assert res["speculative_num_draft_tokens"] == 8
    assert res["speculative_eagle_topk"] == 4  # NGRAM sets topk to --speculative-ngram-max-bfs-breadth
    assert res["speculative_num_steps"] == 2  # draft tokens // topk
    assert res["max_running_requests"] == 32
    assert res["enable_mixed_chunk"] is False


def test_eagle_without_step_params_gets_sglang_defaults(results: dict[str, Any]) -> None:
    r = ok(results, "eagle_auto_params")
    assert r["args"]["speculative_num_steps"] is None
    res = r["resolved"]
    steps = (res["speculative_num_steps"], res["speculative_eagle_topk"], res["speculative_num_draft_tokens"])
    assert steps == (5, 4, 8)
    assert res["max_running_requests"] == 48  # reset for speculative decoding when not given


def test_multi_node_pipeline_parallel_is_accepted(results: dict[str, Any]) -> None:
    res = ok(results, "multi_node")["resolved"]
    assert (res["tp_size"], res["pp_size"], res["nnodes"], res["node_rank"]) == (8, 2, 2, 1)
    assert res["dist_init_addr"] == "sglang-0.sglang:20000"


def test_defaults(results: dict[str, Any]) -> None:
    r = ok(results, "defaults")
    a = r["args"]
    assert (a["host"], a["port"], a["tp_size"]) == ("127.0.0.1", 30000, 1)
    assert (a["kv_cache_dtype"], a["dtype"], a["quantization"]) == ("auto", "auto", None)
    assert a["served_model_name"] is None and a["enable_metrics"] is False and a["disable_radix_cache"] is False
    assert r["resolved"]["served_model_name"] == r["resolved"]["model_path"]  # defaults to the model path


def test_cpu_device_is_kept_and_gets_cpu_backends(results: dict[str, Any]) -> None:
    r = ok(results, "cpu_device")
    assert "device" not in r["stand_ins"]
    res = r["resolved"]
    assert res["device"] == "cpu" and res["sampling_backend"] == "pytorch"
    assert res["attention_backend"] in ("intel_amx", "torch_native")  # torch_native without AMX or on arm64


def test_unique_prefixes_of_flags_are_accepted(results: dict[str, Any]) -> None:
    """prepare_server_args's ArgumentParser keeps allow_abbrev: a misspelling that is a prefix passes."""
    assert ok(results, "abbreviated")["args"]["mem_fraction_static"] == 0.8


@pytest.mark.parametrize(
    ("name", "stage", "needle"),
    [
        ("misspelled", "parse", "unrecognized arguments: --tp-szie 2"),
        ("removed_ngram_window", "parse", "unrecognized arguments: --speculative-ngram-max-match-window-size 12"),
        ("removed_cuda_graph_max_bs", "parse", "ambiguous option: --cuda-graph-max-bs could match"),
        ("bad_kv_dtype", "parse", "argument --kv-cache-dtype: invalid choice: 'fp8'"),
        ("bad_quantization", "parse", "argument --quantization: invalid choice: 'int3'"),
        ("bad_dtype", "parse", "argument --dtype: invalid choice: 'float8'"),
        ("no_model", "parse", "the following arguments are required: --model-path/--model"),
        ("bad_spec_algorithm", "resolve", "Unknown speculative algorithm name: MEDUSA"),
        ("eagle_partial_params", "resolve", "TypeError"),
        ("ngram_paged_triton", "resolve", "only supported for the 'flashinfer' backend"),
        ("context_too_long", "resolve", "User-specified context_length (200000) is greater than the derived"),
        ("prefill_not_page_multiple", "check", "chunked_prefill_size must be divisible by page_size"),
        ("tp_not_node_multiple", "check", "tp_size must be divisible by number of nodes"),
        ("served_name_colon", "check", "served_model_name cannot contain a colon"),
        ("pp_with_eagle", "check", "PP + speculative decoding (MTP) is only supported on prefill nodes"),
    ],
)
def test_invalid_args_are_rejected(results: dict[str, Any], name: str, stage: str, needle: str) -> None:
    r = rejected(results, name)
    assert r.stage == stage, r
    assert r.returncode == {"parse": 2, "resolve": 3, "check": 4}[stage]
    assert needle in r.error, r.error
