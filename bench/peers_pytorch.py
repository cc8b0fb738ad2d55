"""The PyTorch runner side by side with `transformers serve --continuous-batching`, in one run (issue 16 item 6).

Both servers load the same bench model directory (bench_model.PRESETS["cpu"], float32, CPU, torch's default thread
count on both) and get the same workload: the same text prompts, the same max_tokens, greedy, EOS ignored (ours:
``ignore_eos``; transformers: a per-request ``generation_config`` with ``eos_token_id: -1``), non-streaming
/v1/completions. Every reply's usage is checked: completion_tokens == max_tokens, and both servers count the same
prompt tokens. Each round runs every concurrency on both servers, alternating which goes first; the ratio uses each
server's best round (noise on a shared machine only slows a run down). The servers' own CPU time per generated
token (from /proc, all threads) is printed too: it is much less sensitive to other load than tokens/s. Prints
figures; asserts nothing.

    PYTHONPATH=operator:testkit:. python -m bench.peers_pytorch [--rounds 2] [--tokens 64] [--concurrency 1 8 16]

Both servers stay up for the whole run; each is idle while the other is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from ib_testkit import ROOT, free_port

from bench import bench_model, procstats
from bench.engine_profiles.serving import Served, start

PEER = "transformers serve --continuous-batching"
PEER_BLOCKS = 64
LETTERS = "etaoinshrdlcumwfgypbvkjxqz"  # the bench tokenizer was trained on words of these


@dataclass
class Row:
    concurrency: int
    requests: int
    tokens: int  # generated tokens per round (requests x max_tokens)
    ours: list[float] = field(default_factory=list)  # tokens/s, one per round
    peer: list[float] = field(default_factory=list)
    ours_cpu: list[float] = field(default_factory=list)  # server CPU ms per generated token, one per round
    peer_cpu: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return max(self.ours) / max(self.peer)


def prompts(n: int, seed: int = 11) -> list[str]:
    """n prompts of 10 to 40 pseudo-words (about 30 to 130 tokens), the same on every call."""
    rnd = random.Random(seed)
    weights = range(len(LETTERS), 0, -1)

    def word() -> str:
        return "".join(rnd.choices(LETTERS, weights, k=rnd.randint(2, 8)))

    return [" ".join(word() for _ in range(rnd.randint(10, 40))) for _ in range(n)]


def thread_env(threads: int) -> dict[str, str]:
    """torch reads OMP_NUM_THREADS at start: the one way to set transformers serve's thread count."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def start_ours(model: Path, name: str, logdir: Path, batch: int, threads: int) -> Served:
    port = free_port()
    argv = [sys.executable, "-m", "inference_backend.runners.pytorch", "--model", str(model)]
    argv += ["--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"]
    argv += ["--device", "cpu", "--batching", "continuous", "--max-batch-size", str(batch), "--log-level", "warning"]
    argv += ["--threads", str(threads)]
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), os.environ.get("PYTHONPATH", "")])}
    return start("pytorch-runner", argv, env | thread_env(threads), logdir / "ours.log", timeout=300)


def start_peer(model: Path, logdir: Path, threads: int) -> Served:
    port = free_port()
    exe = Path(sys.executable).with_name("transformers")
    argv = [str(exe), "serve", str(model), "--continuous-batching", "--device", "cpu", "--dtype", "float32"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    # Its paged KV cache takes 60% of the free host memory unless told otherwise (13 GB here: OOM-killed once on this
    # shared machine); 64 pages of 256 tokens hold 16 sequences of the whole 512-token context with room to spare.
    argv += ["--cb-num-blocks", str(PEER_BLOCKS)]
    return start("transformers-serve", argv, thread_env(threads), logdir / "peer.log", timeout=300)


def body_ours(tokens: int) -> dict[str, Any]:
    return {"max_tokens": tokens, "temperature": 0, "ignore_eos": True}


def body_peer(tokens: int) -> dict[str, Any]:
    gen = {"max_new_tokens": tokens, "do_sample": False, "eos_token_id": -1}
    return {"max_tokens": tokens, "temperature": 0, "generation_config": json.dumps(gen)}


def run(
    url: str, model: str, extra: dict[str, Any], jobs: list[str], tokens: int, concurrency: int
) -> tuple[float, list[int]]:
    """tokens/s serving all jobs with `concurrency` clients, and each reply's prompt token count."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(limits=limits, timeout=1800) as client:

        def one(prompt: str) -> tuple[int, int]:
            r = client.post(url + "/v1/completions", json={"model": model, "prompt": prompt, **extra})
            r.raise_for_status()
            usage = r.json()["usage"]
            if usage["completion_tokens"] != tokens:
                raise RuntimeError(f"{url}: {usage['completion_tokens']} tokens generated, not {tokens}")
            return usage["prompt_tokens"], usage["completion_tokens"]

        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            done = list(pool.map(one, jobs))
        wall = time.perf_counter() - t0
    return sum(c for _, c in done) / wall, [p for p, _ in done]


def measure(
    model_dir: Path,
    concurrencies: tuple[int, ...] = (1, 8, 16),
    tokens: int = 64,
    rounds: int = 2,
    min_requests: int = 4,
    threads: int = 0,
    logdir: Path | None = None,
    report: Callable[[str], None] = print,
) -> list[Row]:
    """Both servers up at once; per round, every concurrency on both (alternating who goes first).

    threads: torch compute threads of each server (0: one per core, torch's default)."""
    threads = threads or os.cpu_count() or 1
    logdir = logdir or Path(tempfile.mkdtemp(prefix="ib-peers-"))
    name = str(model_dir)  # transformers serve answers to the path it was given: ours is named the same
    ours = start_ours(model_dir, name, logdir, max(concurrencies), threads)
    try:
        peer = start_peer(model_dir, logdir, threads)
    except Exception:
        ours.stop()
        raise
    servers = {"ours": (ours.url, body_ours(tokens)), "peer": (peer.url, body_peer(tokens))}
    rows = [Row(c, max(min_requests, 2 * c), max(min_requests, 2 * c) * tokens) for c in concurrencies]
    try:
        warm = prompts(2, seed=1)
        for url, extra in servers.values():  # transformers initialises its CB manager on the first request
            run(url, name, extra, warm, tokens, 2)
        for r in range(rounds):
            for row in rows:
                jobs = prompts(row.requests)
                order = ("ours", "peer") if (r + row.concurrency) % 2 == 0 else ("peer", "ours")
                counts = {}
                for who in order:
                    url, extra = servers[who]
                    pid = (ours if who == "ours" else peer).proc.pid
                    cpu0 = procstats.tree_cpu_seconds(pid)
                    tps, counts[who] = run(url, name, extra, jobs, tokens, row.concurrency)
                    cpu = 1000 * (procstats.tree_cpu_seconds(pid) - cpu0) / row.tokens
                    (row.ours if who == "ours" else row.peer).append(tps)
                    (row.ours_cpu if who == "ours" else row.peer_cpu).append(cpu)
                if counts["ours"] != counts["peer"]:
                    raise RuntimeError(f"the servers counted different prompt tokens: {counts}")
                report(
                    f"round {r + 1} c={row.concurrency:<3d} ours {row.ours[-1]:7.1f} tok/s "
                    f"({row.ours_cpu[-1]:5.1f} CPU ms/tok)   peer {row.peer[-1]:7.1f} tok/s "
                    f"({row.peer_cpu[-1]:5.1f} CPU ms/tok)   ratio {row.ours[-1] / row.peer[-1]:.2f}"
                )
    finally:
        ours.stop()
        peer.stop()
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| concurrency | requests x tokens | PyTorch runner tok/s | transformers serve CB tok/s | ratio "
        "| CPU ms/token, ours / peer |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.concurrency} | {r.requests} x {r.tokens // r.requests} | {max(r.ours):.1f} | {max(r.peer):.1f} "
            f"| {r.ratio:.2f}x | {min(r.ours_cpu):.1f} / {min(r.peer_cpu):.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="bench model directory (default: build it in a temp dir)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads of each server (default: one per core)")
    a = ap.parse_args()
    m = bench_model.PRESETS["cpu"]
    model = a.model or bench_model.make_safetensors(m, Path(tempfile.mkdtemp(prefix="ib-peers-")) / m.name)
    cores = os.cpu_count()
    load = os.getloadavg()[0]
    print(f"# {m.name} (float32, CPU, {cores} cores, load average {load:.1f} at start: the machine may be shared,")
    print(f"# so figures are noisy; best of {a.rounds} rounds per server). Ours: continuous batching. Peer: {PEER}.")
    threads = a.threads or cores or 1
    print(f"# torch compute threads per server: {threads}")
    rows = measure(model, tuple(a.concurrency), a.tokens, a.rounds, threads=threads)
    print(table(rows))


if __name__ == "__main__":
    main()
