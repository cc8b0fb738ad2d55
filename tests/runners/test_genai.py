"""The ONNX server serves onnxruntime-genai format models, built here from the tiny random Llama by genai's own model
builder (no download): fp32 (lossless) gives exactly transformers' greedy tokens under 32 concurrent requests in
both batching modes; rows that genai itself would end (an end-of-sequence id under ignore_eos, a padded batch at
its max_length) continue exactly; fp16 and int4 load and serve (tokens compared loosely: see each test).
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from ib_testkit.genai_models import build_genai
from ib_testkit.runners import complete, concurrent, metric, workload

ARGS = ["--served-model-name", "tiny", "--max-batch-size", "8"]


@pytest.fixture(scope="session")
def quantized(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("genai")
    return {p: build_genai(models["tiny"], root / f"tiny-genai-{p}", p) for p in ("fp16", "int4")}


@pytest.fixture(scope="session")
def no_eos(models: dict[str, Path]) -> Any:
    """greedy(prompt, n) -> n tokens of transformers' generate that does not stop at eos (ignore_eos)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models["tiny"], dtype=torch.float32).eval()

    def greedy(prompt: list[int], n: int) -> list[int]:
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                                 min_new_tokens=n, eos_token_id=None)  # fmt: skip
        return list(out[0, len(prompt) :].tolist())

    return greedy


@pytest.mark.parametrize(
    "flags",
    [["--batching", "static", "--enable-prefix-caching"], ["--batching", "dynamic", "--max-wait-ms", "50"]],
    ids=["static-prefix-flag", "dynamic"],
)
def test_fp32_greedy_matches_generate(flags: list[str], models: dict[str, Path], reference: Any,
                                      start_server: Any) -> None:  # fmt: skip
    srv = start_server("onnx", ["--model", str(models["genai"]), *ARGS, *flags])
    jobs = workload(32)
    for (prompt, max_tokens), reply in zip(jobs, concurrent(srv.url, jobs), strict=True):
        expected, stopped = reference(prompt, max_tokens)
        assert reply["choices"][0]["token_ids"] == expected, prompt
        assert reply["choices"][0]["finish_reason"] == ("stop" if stopped else "length")
    assert metric(srv.url, "vllm:request_success_total") == 32
    assert metric(srv.url, "vllm:num_requests_running") == 0
    assert "LM head: last position only" in srv.log.read_text()  # these tokens came from the rewritten graph
    assert metric(srv.url, "vllm:prefix_cache_queries_total") == 0  # no prefix cache on this path (logged)
    if "--enable-prefix-caching" in flags:
        assert "not available for onnxruntime-genai models" in srv.log.read_text()


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy-batch", "with-a-sampled-row"])
def test_rows_genai_would_end_continue_exactly(sampled: bool, models: dict[str, Path], reference: Any, no_eos: Any,
                                               start_server: Any) -> None:  # fmt: skip
    """ignore_eos rows that produce eos inside a batch, and a short row batched with a long prompt whose padded width
    plus the short row's max_tokens exceeds the context (512), move to a generator of their own and go on. An
    all-greedy batch lets genai pick; one sampled row makes the batch go through our sampler and set_logits."""
    srv = start_server("onnx", ["--model", str(models["genai"]), *ARGS, "--batching", "static",
                                "--max-batch-size", "7" if sampled else "6", "--max-wait-ms", "2000"])  # fmt: skip
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


def test_fp16_and_int4_load_and_serve(quantized: dict[str, Path], models: dict[str, Path], reference: Any,
                                      start_server: Any) -> None:  # fmt: skip
    """fp16 (the builder's CUDA graph, run by the CPU provider) matches fp32's first greedy token on most prompts;
    int4 (RTN, block 32) on random weights of std 0.5 drifts from the first token, so only shape and determinism are
    checked there. Both give the same tokens batched as alone."""
    jobs = workload(8, seed=4)
    for precision, dtype in (("fp16", "float16"), ("int4", "auto")):
        srv = start_server("onnx", ["--model", str(quantized[precision]), *ARGS, "--dtype", dtype])
        batched = concurrent(srv.url, [(p, 12) for p, _ in jobs])
        with httpx.Client() as c:
            alone = [complete(c, srv.url, p, 12, ignore_eos=False) for p, _ in jobs[:3]]
        for b, a in zip(batched, alone, strict=False):
            assert b["choices"][0]["token_ids"] == a["choices"][0]["token_ids"]
        firsts = [r["choices"][0]["token_ids"][:1] == reference(p, 1)[0]
                  for (p, _), r in zip(jobs, batched, strict=True)]  # fmt: skip
        if precision == "fp16":
            assert sum(firsts) >= 6, firsts
        srv.stop()


def test_dtype_must_match_the_model(models: dict[str, Path], start_server: Any) -> None:
    srv = start_server("onnx", ["--model", str(models["genai"]), "--dtype", "float16"], wait=False)
    assert srv.proc.wait(timeout=120) != 0
    assert "--dtype float16: this onnxruntime-genai model computes in float32" in srv.log.read_text()
