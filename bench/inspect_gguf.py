"""`inference-backend model inspect` on a realistic Llama-3 GGUF header: time and peak memory.

    python -m bench.inspect_gguf [--runs N] [--source DIR] [--reader ours|gguf-py]

Writes the header of Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf (ib_testkit.gguf_files.llama3_8b_q4_k_m: the real
metadata keys, 128,256 tokens with their types, 280,147 merges, the chat template, 292 tensors; the file grows
sparse to its 5.2 GB so every data offset is in range), then runs `model inspect` on it in a fresh process ``runs``
times and prints each run's wall and CPU seconds and peak resident memory (the child's ru_maxrss), with the
targets (under 3 s and 300 MiB) and the load average (on a shared machine the wall time follows the load; the CPU
time does not). ``--source DIR``: import the operator from another checkout's source root (e.g. the
commit before the bounded reader: 17 s and 668 MiB on the issue's machine). ``--reader gguf-py``: what that reader
did, alone: gguf-py's GGUFReader and the fields it read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ib_testkit.gguf_files import llama3_8b_q4_k_m

TARGET_SECONDS, TARGET_MIB = 3.0, 300
_GGUF_PY = """
import sys, gguf
r = gguf.GGUFReader(sys.argv[1], "r")
for key in ("general.architecture", "general.file_type", "llama.block_count", "tokenizer.ggml.tokens",
            "tokenizer.ggml.pre", "tokenizer.ggml.model"):
    r.fields[key].contents()
sum(int(t.n_elements) for t in r.tensors)
"""


def _run(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv[:4])} failed: {err.read().decode()[-2000:]}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_mib": round(usage.ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--source", help="an operator source root to import inference_backend from")
    parser.add_argument("--reader", choices=("ours", "gguf-py"), default="ours")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.source:
        env["PYTHONPATH"] = str(Path(args.source).resolve()) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        path = llama3_8b_q4_k_m(Path(tmp) / "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
        if args.reader == "gguf-py":
            cmd = [sys.executable, "-c", _GGUF_PY, str(path)]
        else:
            cmd = [
                sys.executable,
                "-m",
                "inference_backend.cli",
                "model",
                "inspect",
                str(path),
                "--uri",
                "hf://bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            ]
        runs = [_run(cmd, env) for _ in range(args.runs)]
    best = {k: min(r[k] for r in runs) for k in runs[0]}
    print(
        json.dumps(
            {
                "file": "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf header (128256 tokens, 280147 merges, 292 tensors)",
                "reader": args.reader,
                "source": args.source or "this checkout",
                "runs": runs,
                "best": best,
                "load": [round(x, 1) for x in os.getloadavg()],
                "target": {
                    "seconds": TARGET_SECONDS,
                    "mib": TARGET_MIB,
                    "held_cpu": best["cpu_s"] < TARGET_SECONDS and best["peak_mib"] < TARGET_MIB,
                    "held_wall": best["wall_s"] < TARGET_SECONDS and best["peak_mib"] < TARGET_MIB,
                },
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
