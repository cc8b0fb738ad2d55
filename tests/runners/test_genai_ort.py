"""onnxruntime running a genai-format model directly (onnx/gqa.py): requests join a running batch (continuous
batching) and a cached prompt prefix is reused, with exactly transformers' tokens; a model it cannot run falls
back to genai's Generator (auto) or is refused by name (--genai-runtime onnxruntime); the scheduler admits a padded
buffer's real size (rows x longest reservation) within the KV budget."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from ib_testkit.runners import complete, metric, workload
from inference_backend.runners.common.engine import GenRequest, SamplingParams
from inference_backend.runners.common.metrics import Metrics
from inference_backend.runners.common.scheduler import Scheduler, Sequence

ARGS = ["--served-model-name", "tiny", "--genai-runtime", "onnxruntime"]


def _backend(model_dir: Path) -> Any:
    from inference_backend.runners.onnx.genai import read_config
    from inference_backend.runners.onnx.genai_graph import last_position_head
    from inference_backend.runners.onnx.gqa import GqaBackend, open_session

    head = last_position_head(model_dir / "model.onnx", "attention_mask", "logits")
    decoder = read_config(model_dir)["model"]["decoder"]
    return GqaBackend(open_session(model_dir, "model.onnx", head, 1), decoder, None)


def _seq(prompt: list[int], max_tokens: int) -> Sequence:
    req = GenRequest("r", list(prompt), SamplingParams(max_tokens=max_tokens), lambda ev: None)
    return Sequence(req, list(prompt), len(prompt), len(prompt) + max_tokens)


def test_rows_join_and_leave_a_running_batch(models: dict[str, Path], no_eos: Any) -> None:
    """The backend as the continuous scheduler drives it: a row decodes alone, two join it (prefilled into free
    slots), the first leaves (the last row moves into its slot), a fourth joins with a longer reservation (the
    buffer grows, the running rows copied) and leaves (the buffer shrinks back, the others copied): every row's
    tokens are transformers' greedy tokens."""
    backend = _backend(models["genai"])
    a, b, c, d = _seq([1, 9, 17, 33, 65], 40), *(_seq(p, 40) for p, _ in workload(2, seed=7)), _seq([1, 5], 400)
    live: list[Sequence] = []

    def join(seqs: list[Sequence]) -> None:
        for s, out in zip(seqs, backend.prefill(seqs), strict=True):
            s.tokens += out
        live.extend(seqs)

    def step(n: int) -> None:
        for _ in range(n):
            for s, out in zip(live, backend.decode(live), strict=True):
                s.tokens += out

    join([a])
    step(5)
    join([b, c])
    step(10)
    backend.release([a])
    live.remove(a)
    step(4)
    capacity = backend.kv[0].shape[2]
    join([d])
    assert backend.kv[0].shape[2] > capacity  # grown for d's reservation
    step(12)
    backend.release([d])
    live.remove(d)
    assert backend.kv[0].shape[2] <= capacity  # d's long buffer does not outlive it (b and c copied over)
    step(3)
    for s in (a, b, c, d):
        generated = s.tokens[s.prompt_len :]
        assert generated == no_eos(s.tokens[: s.prompt_len], len(generated)), s.tokens[: s.prompt_len]
    assert [len(s.tokens) - s.prompt_len for s in (a, b, c, d)] == [16, 30, 30, 13]


def test_a_cached_prefix_gives_the_same_tokens(models: dict[str, Path], reference: Any, start_server: Any) -> None:
    """A prompt sharing 48 tokens with an earlier one (another prompt ran in between, in the same slot) continues
    from the cached KV: transformers' tokens; a sampled request with a seed gives the same tokens twice."""
    srv = start_server("onnx", ["--model", str(models["genai"]), *ARGS, "--enable-prefix-caching"])
    first = [1] + [4 + (7 * i) % 300 for i in range(50)]
    second = first[:48] + [11, 12, 13, 14, 15]
    with httpx.Client() as c:
        complete(c, srv.url, first, 20)
        complete(c, srv.url, [1] + [5 + (11 * i) % 290 for i in range(60)], 5)  # overwrites the slot's KV
        assert metric(srv.url, "vllm:prefix_cache_hits_total") == 0
        got = complete(c, srv.url, second, 20)["choices"][0]["token_ids"]
        assert metric(srv.url, "vllm:prefix_cache_hits_total") == 48  # 16-token blocks: 48 of the shared 48
        assert got == reference(second, 20)[0]
        again = complete(c, srv.url, first, 20)["choices"][0]["token_ids"]
        assert again == reference(first, 20)[0]
        sampled = [
            complete(c, srv.url, second, 12, temperature=1.0, seed=5, presence_penalty=0.5)["choices"][0]
            for _ in range(2)
        ]
    assert sampled[0]["token_ids"] == sampled[1]["token_ids"]
    assert metric(srv.url, "vllm:prefix_cache_hits_total") == 4 * 48


def _edited_copy(src: Path, dst: Path, **search: Any) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "genai_config.json":
            (dst / f.name).write_bytes(f.read_bytes())  # genai refuses external data outside the model directory
    config = json.loads((src / "genai_config.json").read_text())
    config["search"].update(search)
    (dst / "genai_config.json").write_text(json.dumps(config))
    return dst


def test_a_model_it_cannot_run_falls_back_or_is_refused(
    models: dict[str, Path], reference: Any, tmp_path: Path, start_server: Any
) -> None:
    model = _edited_copy(models["genai"], tmp_path / "no-shared-buffer", past_present_share_buffer=False)
    why = "genai_config.json search.past_present_share_buffer is off"
    refused = start_server("onnx", ["--model", str(model), *ARGS], wait=False)
    assert refused.proc.wait(timeout=120) != 0
    assert f"--genai-runtime onnxruntime: cannot run this model: {why}" in refused.log.read_text()
    srv = start_server("onnx", ["--model", str(model), "--served-model-name", "tiny"])  # auto
    with httpx.Client() as c:
        assert complete(c, srv.url, [1, 5, 9], 8)["choices"][0]["token_ids"] == reference([1, 5, 9], 8)[0]
    assert f"genai's Generator runs this model: {why}" in srv.log.read_text()


class _Padded:
    """Backend that says whether its KV is one padded buffer; records its prefill batches."""

    def __init__(self, padded: bool) -> None:
        self.padded_kv = padded
        self.batches: list[int] = []

    def prefill(self, seqs: list[Sequence]) -> list[list[int]]:
        self.batches.append(len(seqs))
        return [[5] for _ in seqs]

    def decode(self, seqs: list[Sequence]) -> list[list[int]]:
        return [[5] for _ in seqs]

    def release(self, seqs: list[Sequence]) -> None:
        pass

    def device_error(self) -> str | None:
        return None


@pytest.mark.parametrize(("padded", "first_batch"), [(True, 2), (False, 5)])
def test_padded_kv_admits_rows_times_the_longest(padded: bool, first_batch: int) -> None:
    """Budget 1000: one request reserving 400 and four reserving 50. Padded, two rows already cost 800 and a third
    1200; summed, all five fit (600)."""
    backend = _Padded(padded)
    sched = Scheduler(
        backend,
        policy="static",
        max_batch_size=8,
        max_batch_tokens=8192,
        max_wait_ms=200,
        max_queue=100,
        kv_capacity_tokens=1000,
        max_model_len=512,
        eos_token_ids={2},
        metrics=Metrics("t"),
    )
    done = threading.Semaphore(0)
    for i, n in enumerate([399, 49, 49, 49, 49]):  # 1-token prompts: reserved = 1 + max_tokens
        sched.submit(
            GenRequest(
                f"r{i}",
                [1],
                SamplingParams(max_tokens=n),
                lambda ev: done.release() if ev.finish_reason is not None else None,
            )
        )
    sched.start()
    for _ in range(5):
        assert done.acquire(timeout=20)
    sched.shutdown()
    assert backend.batches[0] == first_batch and sum(backend.batches) == 5
