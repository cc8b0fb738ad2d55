"""The dynamic policy's window restarts at each arrival: a burst that takes longer than --max-wait-ms to come in
is one batch (with a window counted from the first arrival it was split, and the late half waited for the whole
first batch); a pause longer than the window starts the batch; a steady trickle holds the first request at most
DYNAMIC_HOLD_CAP windows. The real Scheduler, with a backend that records its prefill batches."""

from __future__ import annotations

import threading
import time

from inference_backend.runners.common.engine import GenRequest, SamplingParams, TokenEvent
from inference_backend.runners.common.metrics import Metrics
from inference_backend.runners.common.scheduler import DYNAMIC_HOLD_CAP, Scheduler, Sequence

WINDOW_MS = 60.0


class Recorder:
    """Backend: every prefill's batch size and time; one token per step."""

    def __init__(self) -> None:
        self.prefills: list[tuple[int, float]] = []

    def prefill(self, seqs: list[Sequence]) -> list[list[int]]:
        self.prefills.append((len(seqs), time.monotonic()))
        return [[5] for _ in seqs]

    def decode(self, seqs: list[Sequence]) -> list[list[int]]:
        return [[5] for _ in seqs]

    def release(self, seqs: list[Sequence]) -> None:
        pass

    def device_error(self) -> str | None:
        return None


def arrive(gaps_ms: list[float]) -> tuple[Recorder, float]:
    """Submit one request after each gap; wait for all to finish; the backend and the first arrival time."""
    backend = Recorder()
    sched = Scheduler(
        backend,
        policy="dynamic",
        max_batch_size=64,
        max_batch_tokens=8192,
        max_wait_ms=WINDOW_MS,
        max_queue=100,
        kv_capacity_tokens=100_000,
        max_model_len=512,
        eos_token_ids={2},
        metrics=Metrics("t"),
    )
    sched.start()
    done = threading.Semaphore(0)

    def emit(ev: TokenEvent) -> None:
        if ev.finish_reason is not None:
            done.release()

    first = 0.0
    for i, gap in enumerate(gaps_ms):
        time.sleep(gap / 1000)
        sched.submit(GenRequest(f"r{i}", [1, 7, 8], SamplingParams(max_tokens=2), emit))
        first = first or time.monotonic()
    for _ in gaps_ms:
        assert done.acquire(timeout=10)
    sched.shutdown()
    return backend, first


def test_a_slow_burst_is_one_batch() -> None:
    backend, _ = arrive([0] + [10] * 11)  # 12 requests over ~110 ms: longer than the window, gaps well inside it
    assert [n for n, _ in backend.prefills] == [12]


def test_a_pause_longer_than_the_window_starts_the_batch() -> None:
    backend, _ = arrive([0, 10, 10, 3 * WINDOW_MS, 10])
    assert [n for n, _ in backend.prefills] == [3, 2]


def test_a_steady_trickle_holds_the_first_request_at_most_the_cap() -> None:
    backend, first = arrive([0] + [10] * 49)  # ~500 ms of arrivals 10 ms apart
    n, started = backend.prefills[0]
    assert started - first < (DYNAMIC_HOLD_CAP + 1) * WINDOW_MS / 1000
    assert n < 50 and sum(k for k, _ in backend.prefills) == 50
