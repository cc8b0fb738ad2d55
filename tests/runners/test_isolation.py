"""One bad request never hurts another: it fails alone, with its own error, and every other request in the batch
gets exactly the tokens it gets alone (greedy, compared with transformers' generate).

In-process, the real scheduler and backends get requests the HTTP front no longer lets through (token ids out of
the vocabulary, a temperature that overflows the sampler): the model, sampler and engine fail for real. Over HTTP,
out-of-vocabulary ids are refused with 400 naming `prompt`, among concurrent good requests, and the server still
stops promptly on SIGTERM.
"""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from ib_testkit.runners import SERVERS, Collector, complete, metric, workload
from inference_backend.runners.common.engine import GenRequest, SamplingParams

OVERFLOW = 5e-324  # logits / temperature overflow to inf: softmax gives NaN, the sampler raises

ENGINES = [
    pytest.param("pytorch", ["--batching", "continuous"], id="pytorch-continuous"),
    pytest.param("pytorch", ["--batching", "dynamic", "--max-wait-ms", "300"], id="pytorch-dynamic"),
    pytest.param(  # prompts of a batch prefilled packed into one forward, some continuing from cached prefixes
        "pytorch", ["--batching", "dynamic", "--max-wait-ms", "300", "--enable-prefix-caching"], id="pytorch-prefix"
    ),
    pytest.param("pytorch", ["--batching", "continuous", "--no-fused-forward"], id="pytorch-transformers-forward"),
    pytest.param("onnx", ["--batching", "dynamic", "--max-wait-ms", "300"], id="onnx-dynamic-batched-prefill"),
    pytest.param("onnx", ["--batching", "static", "--enable-prefix-caching"], id="onnx-static-prefix"),
    pytest.param("onnx-genai", ["--batching", "dynamic", "--max-wait-ms", "300"], id="onnx-genai-ort-dynamic"),
    pytest.param("onnx-genai", ["--batching", "continuous", "--enable-prefix-caching"], id="onnx-genai-ort-continuous"),
    pytest.param(
        "onnx-genai",
        ["--batching", "dynamic", "--max-wait-ms", "300", "--genai-runtime", "genai"],
        id="onnx-genai-generator-dynamic",
    ),
]


def _load(kind: str, flags: list[str], model: Path) -> Any:
    from inference_backend.runners.common.metrics import Metrics

    kind = SERVERS[kind][0]
    if kind == "pytorch":
        from inference_backend.runners.pytorch import runner
        from inference_backend.runners.pytorch.args import build_parser
    else:
        from inference_backend.runners.onnx import runner  # type: ignore[no-redef]
        from inference_backend.runners.onnx.args import build_parser  # type: ignore[assignment]
    args = build_parser().parse_args(["--model", str(model), "--max-batch-size", "16", "--threads", "1", *flags])
    return runner.load(args, Metrics("tiny"))


@pytest.mark.parametrize(("kind", "flags"), ENGINES)
def test_bad_requests_fail_alone(kind: str, flags: list[str], models: dict[str, Path], reference: Any) -> None:
    loaded = _load(kind, flags, models[SERVERS[kind][1]])
    engine = loaded.engine
    try:
        jobs = workload(12, seed=3)
        good = [Collector() for _ in jobs]
        pairs = enumerate(zip(jobs, good, strict=True))
        reqs = [GenRequest(f"good-{i}", p, SamplingParams(n, 0.0), c) for i, ((p, n), c) in pairs]
        oov = Collector()
        bad_ids = GenRequest("oov", [1, 5, loaded.vocab_size + 7, 9], SamplingParams(8, 0.0), oov)
        nan_first = Collector()
        bad_sampling = GenRequest("nan-first", [1, 6, 7], SamplingParams(8, OVERFLOW), nan_first)
        late_params = SamplingParams(30, 1.0, seed=1, ignore_eos=True)
        nan_later = Collector(on_first=lambda: setattr(late_params, "temperature", OVERFLOW))
        bad_later = GenRequest("nan-later", [1, 8, 9, 10], late_params, nan_later)
        # The bad ones arrive among the good ones, so they share batches (and, in batched prefill, one forward).
        order = reqs[:4] + [bad_ids] + reqs[4:8] + [bad_sampling, bad_later] + reqs[8:]
        for r in order:
            engine.submit(r)
        for c in [*good, oov, nan_first, nan_later]:
            assert c.done.wait(300), "a request never finished"
        for (prompt, max_tokens), c in zip(jobs, good, strict=True):
            expected, stopped = reference(prompt, max_tokens)
            assert c.tokens == expected, prompt
            assert c.events[-1].finish_reason == ("stop" if stopped else "length") and c.events[-1].error is None
        for c, words in ((oov, "prefill failed"), (nan_first, "sampling failed"), (nan_later, "sampling failed")):
            last = c.events[-1]
            assert last.finish_reason == "error" and last.error is not None and words in last.error, last
        assert len(nan_later.tokens) >= 1  # it failed mid-generation, after its first token
        assert engine.alive() and engine.running == [] and engine.reserved == 0
        # The engine goes on serving: the same good request again gives the same tokens.
        again = Collector()
        engine.submit(GenRequest("again", jobs[0][0], SamplingParams(jobs[0][1], 0.0), again))
        assert again.done.wait(120) and again.tokens == good[0].tokens
    finally:
        engine.shutdown()


@pytest.mark.parametrize("server", list(SERVERS))
def test_out_of_vocabulary_ids_get_400_among_good_requests(
    server: str, models: dict[str, Path], reference: Any, start_server: Any
) -> None:
    kind, key = SERVERS[server]
    srv = start_server(kind, ["--model", str(models[key]), "--served-model-name", "tiny", "--max-batch-size", "8"])
    jobs: list[tuple[Any, int]] = list(workload(12, seed=5))
    bad = {3: [1, 5, 10**6, 9], 7: [1, -4, 9], 10: [1, 2**70]}
    for i, ids in bad.items():
        jobs.insert(i, (ids, 8))

    def send(job: tuple[Any, int]) -> httpx.Response:
        body = {"model": "tiny", "prompt": job[0], "max_tokens": job[1], "temperature": 0, "return_token_ids": True}
        return httpx.post(srv.url + "/v1/completions", json=body, timeout=300)

    with ThreadPoolExecutor(len(jobs)) as pool:
        replies = list(pool.map(send, jobs))
    for (prompt, max_tokens), r in zip(jobs, replies, strict=True):
        if any(not 0 <= t < 320 for t in prompt):
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["param"] == "prompt" and err["code"] == "invalid_value" and "out of range" in err["message"]
        else:
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["token_ids"] == reference(prompt, max_tokens)[0]
    with httpx.Client() as c:
        assert complete(c, srv.url, [1, 5, 9], 4)["usage"]["completion_tokens"] >= 1
    assert metric(srv.url, "vllm:num_requests_running") == 0
    srv.proc.terminate()
    assert srv.proc.wait(timeout=60) in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after its drain
    assert "Finished server process" in srv.log.read_text()
