"""Our ONNX server (HTTP, onnxruntime-genai format) against onnxruntime-genai's own generation loop, side by side.

    flock /tmp/ib-heavy.lock nice -n 10 $V/bin/python -m bench.peers_onnx [--tokens 64] [--rounds 3] [--profile DIR]

One run on the 30M bench model (bench/bench_model.py PRESETS["cpu"], a LlamaForCausalLM, built into genai format
fp32 by genai's model builder): at batch / concurrency 1, 8 and 16, tokens/s of
  loop    the plain onnxruntime-genai loop: one og.Generator holding the N prompts (no HTTP, no scheduler),
          generate_next_token until every row has --tokens tokens (min_length keeps eos from ending rows early);
  server  our ONNX server over HTTP, N concurrent non-streaming completions of the same prompts (ignore_eos), in
          each batching mode, from a lean client (http.client; its connections and threads are set up before the
          clock starts, as a client's connection pool would be);
and the ratio server / loop of the best mode, and each side's CPU time per token (all its threads; it moves less
than tokens/s when other jobs share the machine). Same prompts (equal lengths: no padding on either side), same
thread count (--threads, default: all cores). Each figure is the median of --rounds rounds after one warm-up
round; the rounds of the loop and of the servers alternate, so a shared machine's load falls on all alike.
--profile DIR records the dynamic server through the concurrency-16 rounds with py-spy (raw folded stacks,
DIR/server-c16.txt; idle while the others run) and prints the top frames. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from ib_testkit.genai_models import build_genai
from ib_testkit.runners import Server, free_port

from bench import procstats
from bench.bench_model import PRESETS, make_safetensors

CONCURRENCY = (1, 8, 16)
# our server's configurations: the batching mode with onnxruntime running the model (gqa.py, the CPU default), and
# genai-dynamic: dynamic batching with genai's Generator running it (genai.py, --genai-runtime genai)
MODES = ("continuous", "dynamic", "static", "genai-dynamic")


def prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rnd = random.Random(seed)
    return [[1] + [rnd.randrange(4, vocab) for _ in range(length - 1)] for _ in range(n)]


def loop_seconds(model: Any, batch: list[list[int]], tokens: int) -> float:
    import numpy as np
    import onnxruntime_genai as og

    t0 = time.perf_counter()
    params = og.GeneratorParams(model)
    total = len(batch[0]) + tokens
    params.set_search_options(max_length=total, min_length=total, batch_size=len(batch), do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(batch, dtype=np.int32))
    for _ in range(tokens):
        gen.generate_next_token()
        gen.get_next_tokens()
    return time.perf_counter() - t0


def server_seconds(url: str, batch: list[list[int]], tokens: int) -> float:
    """N concurrent completions, one per prompt, from a lean client: the stdlib's http.client, one kept-alive
    connection and one thread per request, all set up before the clock starts and released together. The client
    runs on the server's cores; httpx's per-request work (and its thread pool started inside the timed region)
    cost the server about 5% of tokens/s at N=16 here."""
    host, _, port = url.removeprefix("http://").partition(":")
    conns = [http.client.HTTPConnection(host, int(port), timeout=600) for _ in batch]
    base = {"model": "bench", "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    bodies = [json.dumps({**base, "prompt": prompt}).encode() for prompt in batch]
    go = threading.Event()
    ends: list[float] = []
    replies: list[dict[str, Any]] = []

    def one(conn: http.client.HTTPConnection, body: bytes) -> None:
        go.wait()
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        replies.append(json.loads(conn.getresponse().read()))
        ends.append(time.perf_counter())

    for conn in conns:
        conn.connect()
    threads = [threading.Thread(target=one, args=pair) for pair in zip(conns, bodies, strict=True)]
    for t in threads:
        t.start()
    time.sleep(0.01)  # every thread waits on `go`
    t0 = time.perf_counter()
    go.set()
    for t in threads:
        t.join()
    for conn in conns:
        conn.close()
    for r in replies:
        assert r.get("usage", {}).get("completion_tokens") == tokens, r
    assert len(replies) == len(batch), "a request failed (its thread's traceback is above)"
    return max(ends) - t0


def measure(model: Any, servers: dict[str, Server], batch: list[list[int]], a: argparse.Namespace) -> dict[str, float]:
    """tokens/s of the loop and of each server on `batch`: rounds interleaved (loop, then each mode), so that the
    load of a shared machine falls on all of them alike; the median round of each after one warm-up round. Also,
    as "<name> cpu", the median CPU ms per token (all threads: the loop's process, or the server's)."""
    runs: dict[str, Callable[[], float]] = {"loop": partial(loop_seconds, model, batch, a.tokens)}
    runs.update({m: partial(server_seconds, srv.url, batch, a.tokens) for m, srv in servers.items()})
    cpu_of: dict[str, Callable[[], float]] = {"loop": time.process_time}
    cpu_of.update({m: partial(procstats.tree_cpu_seconds, srv.proc.pid) for m, srv in servers.items()})
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpus: dict[str, list[float]] = {k: [] for k in runs}
    spy = None
    if a.profile is not None and len(batch) == 16:
        a.profile.mkdir(parents=True, exist_ok=True)
        spy = profile(servers[MODES[0]].proc.pid, 30, a.profile / "server-c16.txt")
    for r in range(a.rounds + 1):
        for k, run in runs.items():
            cpu0 = cpu_of[k]()
            seconds = run()
            if r:
                times[k].append(seconds)
                cpus[k].append(1000 * (cpu_of[k]() - cpu0) / (len(batch) * a.tokens))
    if spy is not None:
        spy.wait()
    rates = {k: len(batch) * a.tokens / statistics.median(v) for k, v in times.items()}
    return rates | {f"{k} cpu": statistics.median(v) for k, v in cpus.items()}


def profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    spy = Path(sys.executable).parent / "py-spy"
    exe = str(spy) if spy.exists() else "py-spy"
    cmd = [
        exe,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(int(seconds)),
        "--format",
        "raw",
        "--threads",
        "--rate",
        "200",
        "--nonblocking",
        "--output",
        str(out),
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def top_frames(folded: Path, n: int = 12) -> list[tuple[str, float]]:
    """Share of samples whose innermost frame is each function (self time), from py-spy's raw folded stacks."""
    own: Counter[str] = Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        own[stack.split(";")[-1]] += int(count)
    return [(frame, c / total) for frame, c in own.most_common(n)] if total else []


def collect(a: argparse.Namespace) -> dict[int, dict[str, float]]:
    """tokens/s per N (1, 8, 16): the loop's and each server mode's (a: main()'s options)."""
    import onnxruntime_genai as og

    spec = PRESETS["cpu"]
    hf = make_safetensors(spec, a.workdir / "hf")
    genai = build_genai(hf, a.workdir / "genai-fp32", "fp32")
    cfg = og.Config(str(genai))
    cfg.clear_providers()
    cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": a.threads}}}}))
    model = og.Model(cfg)
    print(
        f"model {spec.name} ({genai}), {a.prompt_len}-token prompts, {a.tokens} tokens each, "
        f"{a.threads} threads, median of {a.rounds} rounds, onnxruntime-genai {og.__version__}"
    )
    logs = a.workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    servers: dict[str, Server] = {}
    try:
        for mode in MODES:
            flags = [
                "--model",
                str(genai),
                "--served-model-name",
                "bench",
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
                "--batching",
                mode.removeprefix("genai-"),
                "--max-batch-size",
                "16",
                "--max-wait-ms",
                "20",
                "--threads",
                str(a.threads),
                "--log-level",
                "warning",
                "--genai-runtime",
                "genai" if mode.startswith("genai-") else "onnxruntime",
            ]
            servers[mode] = Server("onnx", flags, logs / f"server-{mode}.log")
        for srv in servers.values():
            srv.wait_ready()
        rates = {n: measure(model, servers, prompts(n, a.prompt_len, spec.vocab), a) for n in CONCURRENCY}
    finally:
        for srv in servers.values():
            srv.stop()
    return rates


def table(rates: dict[int, dict[str, float]]) -> str:
    """tok/s, best/loop, and CPU ms per token (loop / each mode)."""
    head = f"{'N':>3} {'loop tok/s':>11} " + " ".join(f"{m:>15}" for m in MODES)
    lines = [f"{head}  best/loop  CPU ms/tok " + " / ".join(("loop", *MODES))]
    for n, r in rates.items():
        best = max(r[m] for m in MODES)
        cols = " ".join(f"{r[m]:15.1f}" for m in MODES)
        cpu = " / ".join(f"{r[k + ' cpu']:.2f}" for k in ("loop", *MODES))
        lines.append(f"{n:3d} {r['loop']:11.1f} {cols}  {best / r['loop']:8.2f}x  {cpu}")
    return "\n".join(lines)


def best_ratio(rates: dict[str, float]) -> float:
    return max(rates[m] for m in MODES) / rates["loop"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ib-peers-onnx")
    p.add_argument("--profile", type=Path, default=None, help="py-spy the server at concurrency 16 into this dir")
    a = p.parse_args()
    rates = collect(a)
    print(table(rates))
    if a.profile is not None and (a.profile / "server-c16.txt").exists():
        print(f"py-spy, server at concurrency 16 ({MODES[0]}), self time by innermost frame:")
        for frame, share in top_frames(a.profile / "server-c16.txt"):
            print(f"  {share:6.1%}  {frame}")


if __name__ == "__main__":
    main()
