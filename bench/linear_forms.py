"""The bench model's matmuls for M rows, in each weight form the PyTorch runner can use (docs/runners.md).

One forward's 33 weight matrices of bench_model.PRESETS["cpu"] (8 layers of fused q/k/v, o, gate/up, down, and the
language-model head), random float32, run for M rows with: MKL via F.linear on the plain [out, in] matrix (what
transformers runs, and the runner's single-row form), and oneDNN's linear on matrices reordered once
(`--prepack-weights`, several batch hints). Best of --reps per cell, one torch thread by default; prints ms per
forward, GFLOP/s and the weight bytes streamed per second. Asserts nothing.

    PYTHONPATH=operator:testkit:. python -m bench.linear_forms [--rows 1 8 16 32 512] [--threads 1] [--no-huge-pages]

--huge-pages (default, as the runner's flag): torch's buffers of 2 MiB or more on transparent huge pages.
"""

from __future__ import annotations

import argparse
import os
import time

from bench import bench_model


def shapes() -> list[tuple[int, int]]:
    m = bench_model.PRESETS["cpu"]
    head_dim = m.hidden // m.heads
    qkv = (m.heads + 2 * m.kv_heads) * head_dim
    layer = [
        (qkv, m.hidden),
        (m.hidden, m.heads * head_dim),
        (2 * m.intermediate, m.hidden),
        (m.hidden, m.intermediate),
    ]
    return layer * m.layers + [(m.vocab, m.hidden)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 16, 32, 512])
    ap.add_argument("--hints", type=int, nargs="+", default=[1, 16, 64], help="oneDNN batch hints to reorder for")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--huge-pages", action=argparse.BooleanOptionalAction, default=True)
    a = ap.parse_args()
    os.environ["THP_MEM_ALLOC_ENABLE"] = "1" if a.huge_pages else "0"  # before torch is imported (the runner's way)
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(0)
    plain = [torch.randn(n, k, generator=gen) * 0.02 for n, k in shapes()]
    packed = {h: [torch.ops.mkldnn._reorder_linear_weight(w, h) for w in plain] for h in a.hints}
    params = sum(w.numel() for w in plain)
    print(
        f"# {len(plain)} matrices, {params / 1e6:.1f}M float32 weights ({4 * params / 1e6:.0f} MB), "
        f"{a.threads} thread(s), best of {a.reps}, huge pages {'on' if a.huge_pages else 'off'}"
    )
    forms = ["mkl-plain"] + [f"onednn-packed-{h}" for h in a.hints]
    print("| rows | " + " | ".join(f"{f} ms (GFLOP/s, weight GB/s)" for f in forms) + " |")
    print("| --- |" + " --- |" * len(forms))
    with torch.inference_mode():
        for rows in a.rows:
            xs = {k: torch.randn(rows, k, generator=gen) for _, k in shapes()}
            cells = []
            for form in forms:
                best = float("inf")
                for _ in range(a.reps):
                    t = time.perf_counter()
                    for i, w in enumerate(plain):
                        x = xs[w.shape[1]]
                        if form == "mkl-plain":
                            F.linear(x, w)
                        else:
                            pw = packed[int(form.rsplit("-", 1)[1])][i]
                            torch.ops.mkldnn._linear_pointwise(x, pw, None, "none", [], "")
                    best = min(best, time.perf_counter() - t)
                cells.append(f"{1000 * best:.1f} ({2 * params * rows / best / 1e9:.0f}, {4 * params / best / 1e9:.1f})")
            print(f"| {rows} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
