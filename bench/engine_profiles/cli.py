"""The command line of the engine profiles (`python -m bench.engine_profiles --help`) and the Run it builds."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from ib_testkit.llama_server import llama_server_bin

import bench.engine_profiles
from bench.bench_model import PRESETS
from bench.engine_profiles.load import Load
from bench.engine_profiles.run import Run
from bench.engine_profiles.steps import ROOT, Budget
from bench.profile_render import ENGINES


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.engine_profiles",
        description=bench.engine_profiles.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="bench model shape (bench_model.PRESETS)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--engines",
        default=None,
        help="comma-separated subset of "
        + ",".join(ENGINES)
        + " (default: all; on cuda llamacpp before onnxruntime, whose fp32 export is the slowest step)",
    )
    p.add_argument("--concurrency", default="1,2,4,8")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=64)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--requests", type=int, default=None, help="requests per concurrency step (default 16)")
    g.add_argument("--seconds", type=float, default=None, help="seconds per concurrency step")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of every engine and llama-bench (default on cpu: all usable cores)",
    )
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--label", default=None, help="results name (default: the device, cpu or cuda)")
    p.add_argument("--work", type=Path, default=None, help="models, logs, raw bench output (default: $IB_CACHE/bench)")
    p.add_argument("--llama-bin", type=Path, default=None, help="directory with llama-server and llama-bench")
    p.add_argument(
        "--build-llama-cuda",
        action="store_true",
        help="build llama-server/llama-bench with CUDA (sm_90) in the background from the pinned source",
    )
    p.add_argument("--llama-cuda-fa", action="store_true", help="with --build-llama-cuda: build the FA kernels too")
    p.add_argument("--bandwidth-gib", type=float, default=None, help="copy buffer size (default: 1 on cpu, 4 on cuda)")
    p.add_argument(
        "--bench-pythonpath",
        default=os.environ.get("IB_BENCH_PYTHONPATH"),
        help="prepended to PYTHONPATH for `inference-backend bench` (its operator/ until it is merged)",
    )
    p.add_argument(
        "--budget-s", type=float, default=1800, help="time budget of the whole run (steps are skipped after)"
    )
    return p.parse_args(argv)


def build_run(a: argparse.Namespace, command: str) -> Run:
    cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
    threads = a.threads or (len(os.sched_getaffinity(0)) if a.device == "cpu" else None)
    default = ("pytorch", "llamacpp", "onnxruntime") if a.device == "cuda" else ENGINES
    engines = tuple(e for e in a.engines.split(",") if e) if a.engines else default
    unknown = set(engines) - set(ENGINES)
    if unknown:
        raise SystemExit(f"--engines: unknown {sorted(unknown)}; choose from {ENGINES}")
    load = Load(
        tuple(int(c) for c in a.concurrency.split(",")),
        a.prompt_tokens,
        a.output_tokens,
        a.requests if a.requests or a.seconds else 16,
        a.seconds,
        a.bench_pythonpath,
    )
    return Run(
        preset=a.preset,
        model=PRESETS[a.preset],
        device=a.device,
        engines=engines,
        load=load,
        threads=threads,
        out=a.out,
        label=a.label or a.device,
        work=a.work or cache / "bench" / a.preset,
        llama_bin=a.llama_bin or llama_server_bin().parent,
        budget=Budget(a.budget_s),
        command=command,
        build_llama_cuda=a.build_llama_cuda,
        llama_cuda_fa=a.llama_cuda_fa,
        bandwidth_gib=a.bandwidth_gib or (4.0 if a.device == "cuda" else 1.0),
    )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    command = shlex.join(["python", "-m", "bench.engine_profiles", *(argv if argv is not None else sys.argv[1:])])
    run = build_run(a, command)
    run.work.mkdir(parents=True, exist_ok=True)
    path = run.go()
    doc = json.loads(path.read_text())
    for row in doc["table"]:
        print(json.dumps(row))
    failed = [s for s in run.log.steps if s["status"] == "failed"]
    skipped = [s for s in run.log.steps if s["status"] == "skipped"]
    print(f">> wrote {path}: {len(run.log.steps)} steps, {len(failed)} failed, {len(skipped)} skipped")
    measured = [e for e, r in doc["engines"].items() if r.get("steps")]
    if not measured:
        print(">> no engine was measured (see the prerequisites and the skipped steps above)")
        return 3
    return 1 if failed else 0
