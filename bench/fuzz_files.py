"""The long file fuzz: N mutated model files (ib_testkit.file_fuzz; default 2,000) through `model inspect`, in a
process limited to 1 GiB of address space, plus every hostile file of ib_testkit.hostile_files, each in its own
process limited to 20 s of CPU and 1 GiB.

    python -m bench.fuzz_files [--cases N]

Prints the counts as JSON (cases, Models read, refused naming the file, crashes, the slowest case's CPU seconds, the
peak resident memory); exit 1 when any case crashed or broke a bound.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

CPU_SECONDS, ADDRESS_SPACE = 20, 2**30


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _child(cases: int, root: Path) -> int:
    """Runs in the limited process: the mutated cases, counted."""
    from hypothesis import HealthCheck, given, settings
    from ib_testkit.file_fuzz import Mutation, apply, mutations, seeds
    from inference_backend.modelinfo import InspectError, inspect_path

    seeded = seeds(root / "seeds")
    counts: Counter[str] = Counter({"crashes": 0, "refused without naming the file": 0})  # printed even when 0
    slowest = 0.0
    failures: list[str] = []

    @settings(
        max_examples=cases, deadline=None, database=None, suppress_health_check=list(HealthCheck), phases=["generate"]
    )
    @given(mutation=mutations())
    def case(mutation: Mutation) -> None:
        nonlocal slowest
        counts["cases"] += 1
        counts[f"cases {mutation.seed}"] += 1
        path = apply(mutation, seeded, root / "case")
        start = time.process_time()
        try:
            inspect_path(path, uri="s3://bucket/model")
            counts["Models read"] += 1
        except InspectError as exc:
            counts["refused naming the file" if str(path) in str(exc) else "refused without naming the file"] += 1
        except Exception as exc:  # a crash: counted, the first few shown
            counts["crashes"] += 1
            if len(failures) < 5:
                failures.append(f"{type(exc).__name__}: {exc} ({mutation})")
        slowest = max(slowest, time.process_time() - start)

    case()
    counts["slowest case cpu ms"] = round(slowest * 1000)
    counts["peak MiB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(dict(counts)))
    for f in failures:
        print(f, file=sys.stderr)
    return 0


def _hostile(root: Path) -> Counter[str]:
    from ib_testkit.hostile_files import HOSTILE, outside

    outside(root)
    counts: Counter[str] = Counter({"hostile crashes": 0})
    for name, build in sorted(HOSTILE.items()):
        path = build(root)
        cmd = [sys.executable, "-m", "inference_backend.cli", "model", "inspect", str(path), "--uri", "s3://b/m"]
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_limits)
            _, status, usage = os.wait4(proc.pid, 0)
            err.seek(0)
            text = err.read().decode(errors="replace")
        counts["hostile files"] += 1
        ok = os.waitstatus_to_exitcode(status) == 2 and str(path) in text and "Traceback" not in text
        counts["hostile exit 2 naming the file" if ok else "hostile crashes"] += 1
        counts["hostile slowest cpu ms"] = max(
            counts["hostile slowest cpu ms"], round((usage.ru_utime + usage.ru_stime) * 1000)
        )
        counts["hostile peak MiB"] = max(counts["hostile peak MiB"], round(usage.ru_maxrss / 1024))
        if not ok:
            print(f"{name}: {text[-500:]}", file=sys.stderr)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.cases, Path(args.child))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "bench.fuzz_files", "--cases", str(args.cases), "--child", tmp]
        res = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_limits, check=False)
        sys.stderr.write(res.stderr[-5000:])
        counts: Counter[str] = Counter(
            json.loads(res.stdout.strip().splitlines()[-1])
            if res.returncode == 0
            else {"crashes": 1, "child exit": res.returncode}
        )
        hostile_root = Path(tmp) / "hostile"
        hostile_root.mkdir()
        counts.update(_hostile(hostile_root))
    counts["seconds"] = round(time.perf_counter() - started)
    print(json.dumps(dict(sorted(counts.items())), indent=1))
    return 1 if counts["crashes"] or counts["hostile crashes"] or counts["refused without naming the file"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
