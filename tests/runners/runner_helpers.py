"""Request helpers shared by the runner tests and usable from bench/ (httpx only)."""

from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

SHARED_PREFIX_LEN = 40


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


def metric(url: str, name: str) -> float:
    """Sum of a Prometheus metric's samples (all label sets)."""
    text = httpx.get(url + "/metrics").text
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.eE+-]+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))
