"""SGLang 0.5.23's own parser, resolution and checks on what the renderer emits, and on what it must refuse.

Every golden SGLang container is checked in tests/contracts/test_golden_contracts.py; here: the rendered args of
specs built in the test, and negative cases that prove the harness rejects what SGLang rejects.
"""

from __future__ import annotations

import pytest

from tests.contracts.sglang import SglangArgsRejected, parse_sglang_args_many

GOOD = [
    "--model-path",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--host",
    "0.0.0.0",
    "--port",
    "8000",
    "--tp-size",
    "1",
    "--page-size",
    "16",
    "--enable-metrics",
]
CASES = {
    "good": GOOD,
    "misspelled": [*GOOD, "--mem-fraction-statc", "0.9"],
    "removed": [*GOOD, "--disable-prefix-cache"],  # vLLM's spelling; SGLang's is --disable-radix-cache
    "bad-choice": [*GOOD, "--kv-cache-dtype", "q8_0"],
    "ngram-topk-page": [*GOOD, "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "5"],
}


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    out = parse_sglang_args_many(list(CASES.values()))
    return dict(zip(CASES, out, strict=True))


@pytest.mark.slow
def test_good_args_are_accepted_and_parsed(results: dict[str, object]) -> None:
    r = results["good"]
    assert not isinstance(r, SglangArgsRejected), str(r)
    assert isinstance(r, dict) and r["args"]["port"] == 8000 and r["args"]["page_size"] == 16


@pytest.mark.slow
@pytest.mark.parametrize("case", ["misspelled", "removed", "bad-choice"])
def test_flags_sglang_does_not_have_are_rejected_at_parse(case: str, results: dict[str, object]) -> None:
    r = results[case]
    assert isinstance(r, SglangArgsRejected), f"{case} was accepted"
    assert r.stage == "parse"


@pytest.mark.slow
def test_ngram_default_breadth_with_pages_is_rejected(results: dict[str, object]) -> None:
    """Why the renderer passes --speculative-ngram-max-bfs-breadth 1 (arg_groups/speculative_hook.py)."""
    r = results["ngram-topk-page"]
    assert isinstance(r, SglangArgsRejected) and "page_size" in r.error
