"""Greedy output over HTTP equals in-process model.generate, for every batching mode, prefix cache on/off,
speculative decoding on, under 32 concurrent requests of different prompts and lengths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ib_testkit.runners import concurrent, metric, workload

PREFIX = (["--enable-prefix-caching"], ["--no-enable-prefix-caching"])
CONFIGS = [
    pytest.param(kind, ["--batching", mode, *prefix], id=f"{kind}-{mode}-{prefix[0][2:]}")
    for kind, modes in (("pytorch", ("static", "dynamic", "continuous")), ("onnx", ("static", "dynamic", "continuous")))
    for mode in modes
    for prefix in PREFIX
]
SPEC = [
    pytest.param("tiny", ["--enable-prefix-caching"], id="draft-is-target"),
    pytest.param("draft", ["--batching", "dynamic"], id="draft-other-model"),
]


def _check(url: str, reference: Any) -> None:
    jobs = workload(32)
    replies = concurrent(url, jobs)
    for (prompt, max_tokens), reply in zip(jobs, replies, strict=True):
        expected, stopped = reference(prompt, max_tokens)
        choice = reply["choices"][0]
        assert choice["token_ids"] == expected, f"prompt {prompt}"
        assert choice["finish_reason"] == ("stop" if stopped else "length")
        assert reply["usage"]["completion_tokens"] == len(expected)


@pytest.mark.parametrize(("kind", "flags"), CONFIGS)
def test_greedy_matches_generate(
    kind: str, flags: list[str], models: dict[str, Path], reference: Any, start_server: Any
) -> None:
    model = models["tiny" if kind == "pytorch" else "onnx"]
    args = ["--model", str(model), "--served-model-name", "tiny", "--max-batch-size", "8"]
    srv = start_server(kind, [*args, *flags])
    _check(srv.url, reference)
    hits = metric(srv.url, "vllm:prefix_cache_hits_total")
    assert (hits > 0) == ("--enable-prefix-caching" in flags)
    assert metric(srv.url, "vllm:num_requests_running") == 0
    assert metric(srv.url, "vllm:request_success_total") == 32


@pytest.mark.parametrize(("draft", "flags"), SPEC)
def test_speculative_decoding_keeps_greedy_output(
    draft: str, flags: list[str], models: dict[str, Path], reference: Any, start_server: Any
) -> None:
    args = ["--model", str(models["tiny"]), "--served-model-name", "tiny"]
    args += ["--draft-model", str(models[draft]), "--num-speculative-tokens", "3"]
    srv = start_server("pytorch", [*args, *flags])
    _check(srv.url, reference)
    proposed = metric(srv.url, "vllm:spec_decode_num_draft_tokens_total")
    accepted = metric(srv.url, "vllm:spec_decode_num_accepted_tokens_total")
    assert proposed > 0
    if draft == "tiny":
        assert accepted == proposed  # the target drafting for itself is always right
    else:
        assert accepted < proposed


def test_incompatible_draft_refused(models: dict[str, Path], start_server: Any) -> None:
    args = ["--model", str(models["tiny"]), "--draft-model", str(models["badvocab"])]
    srv = start_server("pytorch", args, wait=False)
    assert srv.proc.wait(timeout=120) != 0
    log = srv.log.read_text()
    assert "refusing to start" in log and "incompatible" in log and "sizes differ" in log
