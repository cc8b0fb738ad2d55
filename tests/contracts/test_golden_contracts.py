"""Every engine container of the golden outputs (tests/data/output/*.yaml) passes its engine's FAST check.

llama.cpp: the pinned build's flag list; TGI: the 3.3.7 launcher contract (args and env); our runners: their own
parsers; vLLM: all golden arg lists through vLLM 0.33.0's parser and checks in one harness call; SGLang: all
golden arg lists through SGLang 0.5.23's own parser, resolution and checks (hack/sglang_parse_args.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.rendered import golden_containers
from inference_backend.engines import NAMES

from tests.contracts.llama_flags import check_llama_server_args
from tests.contracts.sglang import SglangArgsRejected, parse_sglang_args_many
from tests.contracts.test_runners_contract import parse_runner_args
from tests.contracts.tgi import check_tgi_args
from tests.contracts.vllm import VllmArgsRejected, parse_vllm_args_many

GOLDEN = golden_containers()
IDS = [f"{stem}:{engine}" for stem, engine, _ in GOLDEN]
VLLM = [(stem, c) for stem, engine, c in GOLDEN if engine == "vllm"]
SGLANG = [(stem, c) for stem, engine, c in GOLDEN if engine == "sglang"]
HARNESSED = ("vllm", "sglang")  # checked in one harness call each, below


def test_every_engine_has_golden_containers() -> None:
    assert {engine for _, engine, _ in GOLDEN} == set(NAMES)


@pytest.mark.parametrize(
    ("stem", "engine", "container"),
    [g for g in GOLDEN if g[1] not in HARNESSED],
    ids=[i for i, g in zip(IDS, GOLDEN, strict=True) if g[1] not in HARNESSED],
)
def test_golden_container_passes_the_fast_check(stem: str, engine: str, container: dict[str, Any]) -> None:
    args = [str(a) for a in container["args"]]
    if engine == "llamacpp":
        assert container["command"] == ["/app/llama-server"]
        assert check_llama_server_args(args) == []
    elif engine == "tgi":
        env = {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}
        assert check_tgi_args(args, env) == []
        assert "-p" not in args
    else:
        ns = parse_runner_args(engine, args)
        assert ns.port == 8000 and ns.model.startswith("/models")


@pytest.fixture(scope="module")
def vllm_results() -> dict[str, dict[str, Any] | VllmArgsRejected]:
    results = parse_vllm_args_many([[str(a) for a in c["args"]] for _, c in VLLM])
    return {stem: r for (stem, _), r in zip(VLLM, results, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("stem", [stem for stem, _ in VLLM])
def test_golden_vllm_container_is_accepted_by_vllm(stem: str, vllm_results: dict[str, Any]) -> None:
    r = vllm_results[stem]
    assert not isinstance(r, VllmArgsRejected), str(r)
    container = dict(VLLM)[stem]
    assert container["command"] == ["vllm", "serve"]
    assert r["engine_args"]["model"] == container["args"][0]


@pytest.fixture(scope="module")
def sglang_results() -> dict[str, dict[str, Any] | SglangArgsRejected]:
    results = parse_sglang_args_many([[str(a) for a in c["args"]] for _, c in SGLANG])
    return {stem: r for (stem, _), r in zip(SGLANG, results, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("stem", [stem for stem, _ in SGLANG])
def test_golden_sglang_container_is_accepted_by_sglang(stem: str, sglang_results: dict[str, Any]) -> None:
    r = sglang_results[stem]
    assert not isinstance(r, SglangArgsRejected), str(r)
    container = dict(SGLANG)[stem]
    assert container["command"] == ["python3", "-m", "sglang.launch_server"]
    args = [str(a) for a in container["args"]]
    assert r["args"]["model_path"] == args[args.index("--model-path") + 1]
    assert r["args"]["port"] == 8000 and r["args"]["host"] == "0.0.0.0"


# What SGLang itself parsed from the flags the renderer chose for each golden spec (its own field names).
SGLANG_PARSED = {
    "sglang-gpu-draft": {
        "speculative_algorithm": "STANDALONE",
        "speculative_num_steps": 4,
        "speculative_num_draft_tokens": 5,
        "max_running_requests": 64,
        "chunked_prefill_size": 8192,
    },
    "sglang-ngram-kvfp8-hicache": {
        "speculative_algorithm": "NGRAM",
        "kv_cache_dtype": "fp8_e4m3",
        "enable_hierarchical_cache": True,
        "hicache_size": 32,
        "mem_fraction_static": 0.88,
    },
    "sglang-tp2-noprefix": {"tp_size": 2, "disable_radix_cache": True, "context_length": 8192},
    "sglang-bnb-t4": {"quantization": "bitsandbytes", "page_size": 16, "enable_metrics": True},
}


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(SGLANG_PARSED))
def test_sglang_parses_the_flags_to_the_spec_values(stem: str, sglang_results: dict[str, Any]) -> None:
    r = sglang_results[stem]
    assert not isinstance(r, SglangArgsRejected), str(r)
    parsed = {k: r["args"].get(k) for k in SGLANG_PARSED[stem]}
    assert parsed == SGLANG_PARSED[stem]
