"""A server of the profile as a local process: start it, wait for /health, talk to it, stop it.

Engine-neutral; what differs per engine (the argv, the API of the greedy request) is in engines.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import procstats

EOS_ID = 2
HEALTH_TIMEOUT = 600.0


def http_json(url: str, payload: Any = None, timeout: float = 120) -> tuple[int, Any]:
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
            status = int(resp.status)
    except urllib.error.HTTPError as e:
        body, status = e.read(), int(e.code)
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:
        return status, body.decode(errors="replace")


def http_text(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode(errors="replace"))


@dataclass
class Served:
    engine: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def start(engine: str, argv: list[str], env: dict[str, str], log: Path, timeout: float) -> Served:
    port = int(argv[argv.index("--port") + 1])
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")} | env
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env)
    srv = Served(engine, argv, env, proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{engine} exited with {proc.returncode} before /health:\n{srv.output()[-3000:]}")
        with contextlib.suppress(OSError):
            if urllib.request.urlopen(srv.url + "/health", timeout=5).status == 200:
                return srv
        time.sleep(0.3)
    srv.stop()
    raise TimeoutError(f"{engine} not healthy after {timeout:.0f}s:\n{srv.output()[-3000:]}")


def transformers_greedy(hf_dir: Path, ids: list[int], n: int, device: str) -> list[int]:
    """The reference: transformers' own generate() on the safetensors checkpoint, greedy, up to EOS (excluded)."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype).to(device).eval()  # type: ignore[arg-type]
    x = torch.tensor([ids], device=device)
    with torch.inference_mode():
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return strip_eos([int(t) for t in out[0, len(ids) :].tolist()])


def strip_eos(tokens: list[int]) -> list[int]:
    """Tokens before the first EOS (id 2 in the bench tokenizer): engines differ in whether they return it."""
    return tokens[: tokens.index(EOS_ID)] if EOS_ID in tokens else tokens


class MetricSampler:
    """Polls GET /metrics during the load for the largest value of one gauge (runners: vllm:kv_cache_usage_perc)."""

    def __init__(self, url: str, name: str | None, interval: float = 0.5) -> None:
        self.url, self.name, self.interval = url, name, interval
        self.peak: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                v = procstats.parse_prometheus(http_text(self.url + "/metrics"), str(self.name))
                if v is not None:
                    self.peak = v if self.peak is None else max(self.peak, v)
            self._stop.wait(self.interval)

    def __enter__(self) -> MetricSampler:
        if self.name is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def gpu_memory(pids: list[int]) -> dict[str, Any] | None:
    """Device memory in use now (nvidia-smi): by the server's processes, and on the whole GPU."""
    try:
        q = ["nvidia-smi", "--format=csv,noheader,nounits"]
        total = subprocess.run([*q, "--query-gpu=memory.used,memory.total"], capture_output=True, text=True, timeout=20)
        apps = subprocess.run([*q, "--query-compute-apps=pid,used_memory"], capture_output=True, text=True, timeout=20)
        used, size = (int(x) for x in total.stdout.split(",")[:2])
        mine = sum(
            int(m) for p, m in (line.split(",") for line in apps.stdout.splitlines() if "," in line) if int(p) in pids
        )
        return {
            "serverBytes": mine * 2**20,
            "gpuUsedBytes": used * 2**20,
            "gpuTotalBytes": size * 2**20,
            "source": "nvidia-smi (compute-apps of the server's process tree; memory.used of the GPU)",
        }
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
