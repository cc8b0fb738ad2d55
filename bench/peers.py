"""Issue 16 item 6 in one run: both runners side by side with their peers, and both ratios against the targets.

    make runners-peers        ($V/bin/python -m bench.peers [--rounds 3] [--tokens 64] [--threads 1])

1. The PyTorch runner against `transformers serve --continuous-batching` (bench/peers_pytorch.py) at concurrency
   1, 8 and 16 on the 30M bench model; targets: >= 1.5x at 16, >= 1.0x at 1.
2. The ONNX server over HTTP (onnxruntime-genai format) against onnxruntime-genai's own generation loop
   (bench/peers_onnx.py) at batch 1, 8 and 16; target: >= 1.0x at 16.
Each part prints its rounds and its table; a summary of the ratios comes last. Prints figures; asserts nothing.
`--threads` is both sides' compute threads (default 1: on a shared machine 2 threads on 2 cores collapse at times,
docs/runners.md, Benchmarks).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from bench import bench_model, peers_onnx, peers_pytorch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ib-peers-"))
    spec = bench_model.PRESETS["cpu"]
    print(
        f"# {spec.name}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start, {a.threads} "
        f"compute thread(s) per server, {a.tokens} tokens per request"
    )
    print(f"## 1. PyTorch runner vs {peers_pytorch.PEER} (best of {a.rounds} rounds)")
    model = bench_model.make_safetensors(spec, work / spec.name)
    rows = peers_pytorch.measure(model, (1, 8, 16), a.tokens, a.rounds, threads=a.threads, logdir=work)
    print(peers_pytorch.table(rows))
    print(f"## 2. ONNX server (HTTP) vs the onnxruntime-genai loop (median of {a.rounds} rounds)")
    opts = argparse.Namespace(
        tokens=a.tokens, prompt_len=32, rounds=a.rounds, threads=a.threads, workdir=work / "onnx", profile=None
    )
    rates = peers_onnx.collect(opts)
    print(peers_onnx.table(rates))
    by_c = {r.concurrency: r.ratio for r in rows}
    print("## summary (target in brackets)")
    print(f"PyTorch runner / transformers serve CB: c=1 {by_c[1]:.2f}x (>= 1.0), c=16 {by_c[16]:.2f}x (>= 1.5)")
    print(f"ONNX server / onnxruntime-genai loop:   N=16 {peers_onnx.best_ratio(rates[16]):.2f}x (>= 1.0)")


if __name__ == "__main__":
    main()
