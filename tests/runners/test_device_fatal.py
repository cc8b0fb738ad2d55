"""A broken device stops the engine and turns /health 503, so the kubelet restarts the pod.

On CUDA a device-side error (an illegal access, a device assert) is sticky: every later call on the context raises,
and `TorchBackend.device_error` sees it by synchronising and running one tiny kernel. This machine has no GPU, so the
device breaking is the one thing made up here: the real PyTorch runner (model, backend, scheduler, HTTP app) is loaded
on CPU, and from a chosen step its forward raises CUDA's message and its device check reports the device unusable, as
they do on a poisoned context. Everything above that boundary is the code that runs on a GPU node.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ib_testkit.runners import Collector
from inference_backend.runners.common.engine import GenRequest, SamplingParams

CUDA_ERROR = "CUDA error: an illegal memory access was encountered"


def _load(model: Path) -> tuple[Any, Any]:
    from inference_backend.runners.common.metrics import Metrics
    from inference_backend.runners.pytorch import runner
    from inference_backend.runners.pytorch.args import build_parser

    args = build_parser().parse_args(["--model", str(model), "--max-batch-size", "2", "--threads", "1"])
    metrics = Metrics("tiny")
    return runner.load(args, metrics), metrics


def test_cpu_backend_reports_no_device_error(models: dict[str, Path]) -> None:
    loaded, _ = _load(models["tiny"])
    try:
        assert loaded.engine.backend.device_error() is None
    finally:
        loaded.engine.shutdown()


def test_a_broken_device_fails_every_request_and_health_turns_503(models: dict[str, Path]) -> None:
    from fastapi.testclient import TestClient
    from inference_backend.runners.common.server import State, build_app

    loaded, metrics = _load(models["tiny"])
    engine = loaded.engine
    backend = engine.backend
    broken = threading.Event()
    decode = backend.decode

    def poisoned_decode(seqs: list[Any]) -> list[list[int]]:
        if broken.is_set():
            raise RuntimeError(CUDA_ERROR)
        return decode(seqs)

    backend.decode = poisoned_decode
    backend.device_error = lambda: f"CUDA device unusable: {CUDA_ERROR}" if broken.is_set() else None
    state = State("tiny", metrics)
    state.loaded = loaded
    try:
        with TestClient(build_app(state)) as client:
            assert client.get("/health").status_code == 200
            body = {"model": "tiny", "prompt": "a b c", "max_tokens": 4, "temperature": 0}
            assert client.post("/v1/completions", json=body).status_code == 200  # serving before the fault

            # Two requests running (the batch is full at 2) and one waiting when the device breaks.
            names = ("run-1", "run-2", "queued")
            started = threading.Semaphore(0)
            got = {name: Collector(on_first=started.release) for name in names}
            params = SamplingParams(400, 0.0, ignore_eos=True)
            for name in names:
                engine.submit(GenRequest(name, [1, 5, 9, 13], params, got[name]))
            assert started.acquire(timeout=60) and started.acquire(timeout=60)
            assert not got["queued"].events  # still waiting for a place in the batch
            broken.set()
            for name in names:
                assert got[name].done.wait(60), name
                last = got[name].events[-1]
                assert last.finish_reason == "error" and last.error is not None and CUDA_ERROR in last.error, last
            assert len(got["queued"].events) == 1  # it never ran

            health = client.get("/health")
            assert health.status_code == 503, health.text
            assert health.json()["status"] == "unhealthy" and CUDA_ERROR in health.json()["reason"]
            assert not engine.alive() and engine.fatal is not None
            # Nothing more is admitted: a new request is refused at once with the OpenAI-shaped 503.
            r = client.post("/v1/completions", json=body)
            assert r.status_code == 503, r.text
            err = r.json()["error"]
            assert err["code"] == "engine_unavailable" and CUDA_ERROR in err["message"]
    finally:
        engine.shutdown()
