"""Benchmarks of the runners on tiny random models (CPU). Prints figures; asserts nothing.

$(hack/runners-venv)/bin/python -m bench.runners [--requests 16] [--tokens 32]      (or: make runners-bench)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from ib_testkit.runners import Server, free_port, metric, workload


def start(kind: str, model: Path, flags: list[str], logdir: Path) -> Server:
    args = [
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
    ]
    srv = Server(kind, [*args, *flags], logdir / f"{kind}-{len(list(logdir.iterdir()))}.log")
    srv.wait_ready()
    return srv


def run(url: str, jobs: list[list[int]], tokens: int, concurrency: int) -> float:
    """Seconds to serve all jobs with `concurrency` clients; every reply must have `tokens` tokens."""
    body = {"model": "tiny", "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    with httpx.Client(limits=httpx.Limits(max_connections=concurrency)) as c:

        def one(prompt: list[int]) -> None:
            r = c.post(url + "/v1/completions", json={**body, "prompt": prompt}, timeout=600).json()
            assert r["usage"]["completion_tokens"] == tokens

        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, jobs))
        return time.perf_counter() - t0


def in_process(model: Path, jobs: list[list[int]], tokens: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    t0 = time.perf_counter()
    for p in jobs:
        ids = torch.tensor([p])
        m.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
        )
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    from inference_backend.runners.onnx.export import export
    from inference_backend.runners.tiny import make_model

    tmp = Path(tempfile.mkdtemp(prefix="ib-bench-"))
    logs = tmp / "logs"
    logs.mkdir()
    tiny, draft = make_model(tmp / "tiny"), make_model(tmp / "draft", layers=1, seed=1)
    onnx = export(str(tiny), str(tmp / "onnx"))
    jobs = [p for p, _ in workload(a.requests, seed=7)]
    n, k = len(jobs), a.tokens
    print(f"# {n} requests x {k} tokens, tiny Llama (2 layers, hidden 64), CPU float32")

    base = in_process(tiny, jobs, k)
    print(f"in-process generate, sequential: {base:.2f}s ({n * k / base:.0f} tok/s)")
    for kind, model, modes in (("pytorch", tiny, ("continuous", "dynamic")), ("onnx", onnx, ("dynamic",))):
        for mode in modes:
            srv = start(kind, model, ["--batching", mode, "--max-batch-size", "16", "--max-wait-ms", "5"], logs)
            try:
                run(srv.url, jobs[:2], k, 2)  # warm-up
                seq = run(srv.url, jobs, k, 1)
                par = run(srv.url, jobs, k, 16)
            finally:
                srv.stop()
            extra = f", overhead vs in-process at c=1: {100 * (seq / base - 1):+.1f}%" if kind == "pytorch" else ""
            print(
                f"{kind:8s} {mode:10s} c=1: {seq:.2f}s ({n * k / seq:.0f} tok/s)  c=16: {par:.2f}s "
                f"({n * k / par:.0f} tok/s)  speedup x{seq / par:.1f}{extra}"
            )
    plain = None
    for name, d in (("none", None), ("draft=target", tiny), ("draft=1-layer", draft)):
        flags = ["--batching", "continuous"] + (["--draft-model", str(d), "--num-speculative-tokens", "4"] if d else [])
        srv = start("pytorch", tiny, flags, logs)
        try:
            run(srv.url, jobs[:2], k, 1)
            t = run(srv.url, jobs, k, 1)
            prop = metric(srv.url, "vllm:spec_decode_num_draft_tokens_total")
            acc = metric(srv.url, "vllm:spec_decode_num_accepted_tokens_total")
        finally:
            srv.stop()
        plain = plain or t
        rate = f"acceptance {100 * acc / prop:.1f}%" if prop else "acceptance n/a"
        print(f"speculative {name:14s} c=1: {t:.2f}s ({n * k / t:.0f} tok/s)  {rate}  speedup x{plain / t:.2f}")


if __name__ == "__main__":
    main()
