"""Does the 7B int4 row's build (bench/genai_random.py: zero points, as `is_symmetric=false`) run as fast as the
builder's default `-p int4` (symmetric, no zero-point inputs)? Measured on the Llama-2-7B shape cut to a few layers
(full width, full vocabulary), where the default path still fits in memory.

    flock /tmp/ib-heavy.lock nice -n 10 python -m bench.genai_zero_points [--layers 4] [--rounds 5]

Builds both with genai's model builder: `symmetric` from a random bf16 checkpoint (bench/profiles_7b.py
bf16_checkpoint, `-p int4 -e cpu`), `zero-points` from a random Olive checkpoint (genai_random). Then, in one
process and on --threads threads, genai's own loop on each: prefill of a 512-token prompt and 32 greedy tokens at
batch 1; rounds alternate between the two models (a shared machine's load falls on both alike); prints the median
of --rounds rounds after a warm-up round, and the ratio zero-points / symmetric. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_model import PRESETS
from bench.genai_random import build, olive_checkpoint
from bench.profiles_7b import _ids, bf16_checkpoint


def timings(model: Any, prompt: list[int], tokens: int) -> tuple[float, float]:
    """(seconds to the first token of ``prompt``, seconds of the next ``tokens`` tokens) in genai's loop."""
    import numpy as np
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    total = len(prompt) + tokens + 1
    params.set_search_options(max_length=total, min_length=total, batch_size=1, do_sample=False)
    gen = og.Generator(model, params)
    t0 = time.perf_counter()
    gen.append_tokens(np.array([prompt], dtype=np.int32))
    gen.generate_next_token()
    t1 = time.perf_counter()
    for _ in range(tokens):
        gen.generate_next_token()
    return t1 - t0, time.perf_counter() - t1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ib-genai-zero-points")
    p.add_argument("--max-build-memory-gib", type=float, default=17.0)
    a = p.parse_args()
    import onnxruntime_genai as og

    m = dataclasses.replace(PRESETS["llama2-7b"], name=f"llama2-7b-{a.layers}l", layers=a.layers)
    cap = int(a.max_build_memory_gib * 2**30)
    a.work.mkdir(parents=True, exist_ok=True)
    models = {}
    for name in ("symmetric", "zero-points"):
        src, out = a.work / f"src-{name}", a.work / f"genai-{name}"
        if not (out / "genai_config.json").exists():
            if name == "symmetric":
                bf16_checkpoint(m, src)
            else:
                olive_checkpoint(m, src, 4)
            print(name, json.dumps(build(src, out, 4, cap)), flush=True)
            subprocess.run(["rm", "-rf", str(src)], check=True)
        cfg = og.Config(str(out))
        cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": a.threads}}}}))
        models[name] = og.Model(cfg)
    prompt = _ids(512, 1, m.vocab)
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in models}
    for r in range(a.rounds + 1):
        for name, model in models.items():
            t = timings(model, prompt, a.tokens)
            if r:
                times[name].append(t)
    print(
        f"Llama-2-7B shape, {a.layers} layers ({m.parameters() / 1e9:.2f}B), int4 block 32, {a.threads} threads, "
        f"median of {a.rounds} rounds, onnxruntime-genai {og.__version__}"
    )
    med = {k: (statistics.median(x for x, _ in v), statistics.median(y for _, y in v)) for k, v in times.items()}
    for name, (ttft, dec) in med.items():
        print(f"{name:12s} TTFT 512 tokens {ttft:.2f} s   decode {a.tokens / dec:.2f} tok/s")
    (st, sd), (zt, zd) = med["symmetric"], med["zero-points"]
    print(f"zero-points / symmetric: TTFT {zt / st:.3f}x, decode tokens/s {sd / zd:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
