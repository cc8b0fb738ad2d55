"""The ONNX server serves onnxruntime-genai format models, built here from the tiny random Llama by genai's own model
builder (no download), run by onnxruntime directly (gqa.py, the CPU default) or by genai's Generator (genai.py):
fp32 (lossless) gives exactly transformers' greedy tokens under 32 concurrent requests in every batching mode;
rows that genai itself would end (an end-of-sequence id under ignore_eos, a padded batch at its max_length)
continue exactly; fp16 and int4 load and serve (tokens compared loosely: see each test), with the same tokens
from both runtimes.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from ib_testkit.genai_models import build_genai
from ib_testkit.runners import complete, concurrent, metric, workload
from inference_backend.runners.onnx.genai_load import RUNTIMES

ARGS = ["--served-model-name", "tiny", "--max-batch-size", "8"]


@pytest.fixture(scope="session")
def quantized(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("genai")
    return {p: build_genai(models["tiny"], root / f"tiny-genai-{p}", p) for p in ("fp16", "int4")}


@pytest.mark.parametrize(
    ("runtime", "flags"),
    [
        ("onnxruntime", ["--batching", "static", "--enable-prefix-caching"]),
        ("onnxruntime", ["--batching", "continuous", "--enable-prefix-caching"]),
        ("onnxruntime", ["--batching", "dynamic", "--max-wait-ms", "50"]),
        ("genai", ["--batching", "static", "--enable-prefix-caching"]),
        ("genai", ["--batching", "dynamic", "--max-wait-ms", "50"]),
    ],
    ids=["ort-static-prefix", "ort-continuous-prefix", "ort-dynamic", "genai-static-prefix-flag", "genai-dynamic"],
)
def test_fp32_greedy_matches_generate(
    runtime: str, flags: list[str], models: dict[str, Path], reference: Any, start_server: Any
) -> None:
    """32 concurrent requests (half share a 40-token prefix) in batches of 8: with onnxruntime running the model
    (the default on CPU), later batches reuse the cached prefix; genai's Generator has no prefix cache (logged)."""
    srv = start_server("onnx", ["--model", str(models["genai"]), *ARGS, "--genai-runtime", runtime, *flags])
    jobs = workload(32)
    for (prompt, max_tokens), reply in zip(jobs, concurrent(srv.url, jobs), strict=True):
        expected, stopped = reference(prompt, max_tokens)
        assert reply["choices"][0]["token_ids"] == expected, prompt
        assert reply["choices"][0]["finish_reason"] == ("stop" if stopped else "length")
    assert metric(srv.url, "vllm:request_success_total") == 32
    assert metric(srv.url, "vllm:num_requests_running") == 0
    log = srv.log.read_text()
    assert "LM head: last position only" in log  # these tokens came from the rewritten graph
    assert f"run by {RUNTIMES[runtime]}" in log
    hits = metric(srv.url, "vllm:prefix_cache_hits_total")
    if runtime == "genai":
        assert metric(srv.url, "vllm:prefix_cache_queries_total") == 0  # no prefix cache on this path (logged)
        if "--enable-prefix-caching" in flags:
            assert "not available when genai's Generator runs the model" in log
    elif "--enable-prefix-caching" in flags:
        assert hits >= 32, hits  # at least one later prompt continued from the shared 32-token block prefix
    else:
        assert hits == 0


@pytest.mark.parametrize("runtime", ["genai", "onnxruntime"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy-batch", "with-a-sampled-row"])
def test_rows_genai_would_end_continue_exactly(
    sampled: bool, runtime: str, models: dict[str, Path], reference: Any, no_eos: Any, start_server: Any
) -> None:
    """ignore_eos rows that produce eos inside a batch, and a short row batched with a long prompt whose padded width
    plus the short row's max_tokens exceeds the context (512), move to a generator of their own and go on. An
    all-greedy batch lets genai pick; one sampled row makes the batch go through our sampler and set_logits. Run by
    onnxruntime directly, the same batch needs no moves (each row has its own length in one buffer)."""
    srv = start_server(
        "onnx",
        [
            "--model",
            str(models["genai"]),
            *ARGS,
            "--genai-runtime",
            runtime,
            "--batching",
            "static",
            "--max-batch-size",
            "7" if sampled else "6",
            "--max-wait-ms",
            "2000",
        ],
    )
    eos_prompts = list(itertools.islice((p for p, _ in workload(40, seed=3) if reference(p, 60)[1]), 3))
    assert len(eos_prompts) >= 2, "the workload has prompts whose greedy continuation ends with eos"
    long_prompt = [1] + [4 + i % 300 for i in range(440)]
    jobs: list[tuple[list[int], int, dict[str, Any]]] = [(p, 60, {"ignore_eos": True}) for p in eos_prompts]
    jobs += [(long_prompt, 8, {}), ([1, 5, 9, 33], 150, {"ignore_eos": True})]
    if sampled:
        jobs.append(([1, 7, 8], 20, {"temperature": 1.0, "seed": 3, "ignore_eos": True}))

    def send(job: tuple[list[int], int, dict[str, Any]]) -> Any:
        with httpx.Client() as c:
            return complete(c, srv.url, job[0], job[1], **job[2])

    with ThreadPoolExecutor(len(jobs)) as pool:  # one static batch
        replies = list(pool.map(send, jobs))
    for (prompt, n, extra), reply in zip(jobs, replies, strict=True):
        got = reply["choices"][0]["token_ids"]
        if "temperature" in extra:
            assert len(got) == n
        elif extra.get("ignore_eos"):
            assert got == no_eos(prompt, n)
            assert prompt not in eos_prompts or 2 in got  # it produced eos and went on
        else:
            assert got == reference(prompt, n)[0]


def test_fp16_and_int4_load_and_serve(
    quantized: dict[str, Path], models: dict[str, Path], reference: Any, start_server: Any
) -> None:
    """fp16 (the builder's CUDA graph, run by the CPU provider) matches fp32's first greedy token on most prompts;
    int4 (RTN, block 32) on random weights of std 0.5 drifts from the first token, so only shape and determinism are
    checked there. Both give the same tokens batched as alone."""
    jobs = workload(8, seed=4)
    for precision, dtype in (("fp16", "float16"), ("int4", "auto")):
        tokens = {}
        for runtime in ("onnxruntime", "genai"):
            srv = start_server(
                "onnx", ["--model", str(quantized[precision]), *ARGS, "--dtype", dtype, "--genai-runtime", runtime]
            )
            batched = concurrent(srv.url, [(p, 12) for p, _ in jobs])
            with httpx.Client() as c:
                alone = [complete(c, srv.url, p, 12, ignore_eos=False) for p, _ in jobs[:3]]
            for b, a in zip(batched, alone, strict=False):
                assert b["choices"][0]["token_ids"] == a["choices"][0]["token_ids"]
            firsts = [
                r["choices"][0]["token_ids"][:1] == reference(p, 1)[0] for (p, _), r in zip(jobs, batched, strict=True)
            ]
            if precision == "fp16":
                assert sum(firsts) >= 6, firsts
            tokens[runtime] = [r["choices"][0]["token_ids"] for r in batched]
            assert f"run by {RUNTIMES[runtime]}" in srv.log.read_text()
            srv.stop()
        assert tokens["onnxruntime"] == tokens["genai"], precision  # the same graph on the same onnxruntime


def test_dtype_must_match_the_model(models: dict[str, Path], start_server: Any) -> None:
    srv = start_server("onnx", ["--model", str(models["genai"]), "--dtype", "float16"], wait=False)
    assert srv.proc.wait(timeout=120) != 0
    assert "--dtype float16: this onnxruntime-genai model computes in float32" in srv.log.read_text()
