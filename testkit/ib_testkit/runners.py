"""Our runners (PyTorch runner, ONNX Runtime server) as subprocesses, and the requests the tests and bench/ send them.

    srv = Server("pytorch", ["--model", DIR, "--host", "127.0.0.1", "--port", str(free_port())], log)
    srv.wait_ready(); complete(client, srv.url, [1, 5, 9], 8); srv.stop()

Used by tests/runners (its conftest's start_server fixture) and bench/runners.py. Needs httpx (the runners venv has
it; so does .venv, through lightkube).
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from ib_testkit import ROOT, free_port, stop_process

__all__ = ["SERVERS", "SHARED_PREFIX_LEN", "Server", "complete", "concurrent", "free_port", "metric", "workload"]

SHARED_PREFIX_LEN = 40
# A test's server parameter -> (runner module, key of tests/runners' `models` fixture): the ONNX server serves our
# exporter's format ("onnx") and onnxruntime-genai's ("genai", built by genai's model builder).
SERVERS = {"pytorch": ("pytorch", "tiny"), "onnx": ("onnx", "onnx"), "onnx-genai": ("onnx", "genai")}


class Server:
    """``python -m inference_backend.runners.KIND ARGS`` (this repository's operator/ first on its PYTHONPATH)."""

    def __init__(self, kind: str, args: list[str], log: Path, env: Mapping[str, str] | None = None) -> None:
        self.port = int(args[args.index("--port") + 1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT / "operator")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"inference_backend.runners.{kind}", *args],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
        )

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-3000:]
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{tail}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"server not ready in {timeout}s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        stop_process(self.proc, timeout=15)


class Collector:
    """A GenRequest's callback for in-process tests: its TokenEvents, gathered on the engine thread; on_first runs
    when the first event arrives, done is set at the last."""

    def __init__(self, on_first: Any = None) -> None:
        self.events: list[Any] = []
        self.done = threading.Event()
        self.on_first = on_first

    def __call__(self, ev: Any) -> None:
        if not self.events and self.on_first is not None:
            self.on_first()
        self.events.append(ev)
        if ev.finish_reason is not None:
            self.done.set()

    @property
    def tokens(self) -> list[int]:
        return [t for ev in self.events for t in ev.token_ids]


def workload(n: int = 32, seed: int = 0, vocab: int = 320) -> list[tuple[list[int], int]]:
    """n (prompt ids, max_tokens) pairs of different lengths; half share a 40-token prefix."""
    rnd = random.Random(seed)
    shared = [1] + [rnd.randrange(4, vocab) for _ in range(SHARED_PREFIX_LEN - 1)]
    out = []
    for i in range(n):
        tail = [rnd.randrange(4, vocab) for _ in range(rnd.randint(2, 30))]
        prompt = shared + tail if i % 2 else [1, *tail]
        out.append((prompt, rnd.randint(4, 40)))
    return out


def complete(client: httpx.Client, url: str, prompt: list[int] | str, max_tokens: int, **extra: Any) -> Any:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
    body.setdefault("return_token_ids", True)
    r = client.post(url + "/v1/completions", json=body, timeout=300)
    r.raise_for_status()
    return r.json()


def concurrent(url: str, jobs: list[tuple[list[int], int]], workers: int = 32) -> list[Any]:
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    with httpx.Client(limits=limits) as client, ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda job: complete(client, url, job[0], job[1]), jobs))


def metric(url: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus metric's samples (all label sets, or those carrying every label given)."""
    text = httpx.get(url + "/metrics").text
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? ([0-9.eE+-]+)$", re.M)
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(float(v) for lbl, v in pattern.findall(text) if all(w in lbl for w in wanted))
