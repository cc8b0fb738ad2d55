"""`inference-backend bench`: run guidellm on a scenario built from our options, then write bench.json/.png.

guidellm runs as a subprocess of this interpreter (`python -m guidellm run --scenario FILE`): its live display
owns the terminal while it runs (or it is silenced with --no-progress and its output goes to guidellm.log).
Exit status: 0 done; 1 the server is unreachable, guidellm failed, or no request of any step succeeded (the
results are still written then); 2 invalid options or guidellm/matplotlib not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inference_backend.bench import config, report

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
DEPENDENCIES = ("guidellm", "matplotlib")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, type=config.url, help="base URL of the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="model name sent in each request (the served model name)")
    p.add_argument(
        "--processor",
        metavar="TOKENIZER",
        help="tokenizer (local directory or hub name) for the prompts; default: --model",
    )
    p.add_argument(
        "--api", choices=tuple(config.API_PATHS), default="completions", help="endpoint (default completions)"
    )
    load = p.add_mutually_exclusive_group()
    load.add_argument(
        "--concurrency", type=config.positive_ints, metavar="N,N", help="concurrency levels, one step each (1,2,4,8)"
    )
    load.add_argument(
        "--rate", type=config.positive_floats, metavar="R,R", help="request rates (req/s), one step each: 2,4"
    )
    load.add_argument(
        "--sweep",
        type=config.sweep_size,
        metavar="N",
        help="guidellm's sweep: synchronous, throughput, then N-2 rates up to the throughput",
    )
    p.add_argument(
        "--rate-type", choices=("constant", "poisson"), default="constant", help="arrivals for --rate/--sweep"
    )
    for name, default in (("prompt", 256), ("output", 128)):
        p.add_argument(
            f"--{name}-tokens", type=config.positive_int, default=default, metavar="N", help=f"mean (default {default})"
        )
        p.add_argument(
            f"--{name}-stdev", type=config.non_negative_int, default=0, metavar="N", help="standard deviation (0)"
        )
        p.add_argument(f"--{name}-min", type=config.positive_int, metavar="N", help="lower clip of the distribution")
        p.add_argument(f"--{name}-max", type=config.positive_int, metavar="N", help="upper clip of the distribution")
    p.add_argument(
        "--requests",
        type=config.positive_int,
        metavar="N",
        help=f"requests per step (default {config.DEFAULT_REQUESTS} unless --seconds is given)",
    )
    p.add_argument(
        "--seconds", type=config.positive_float, metavar="S", help="seconds per step (with --requests: first reached)"
    )
    p.add_argument(
        "--extra-body",
        type=config.json_object,
        metavar="JSON",
        help="JSON merged into each request: '{\"ignore_eos\": true}'",
    )
    p.add_argument("--seed", type=int, default=42, metavar="N", help="seed of the synthetic prompts (42)")
    p.add_argument(
        "--timeout", type=config.positive_float, metavar="S", help="per-request read timeout in seconds (none)"
    )
    p.add_argument("--out", type=Path, metavar="DIR", help="output directory (default bench-results/<timestamp>)")
    p.add_argument("--no-progress", action="store_true", help="no live display; guidellm's output goes to guidellm.log")


def missing_dependencies() -> list[str]:
    return [m for m in DEPENDENCIES if importlib.util.find_spec(m) is None]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _run_guidellm(cmd: list[str], progress: bool, log: Path) -> int:
    if progress:
        return subprocess.run(cmd, check=False).returncode
    with log.open("w") as f:
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False).returncode


def preflight(url: str, model: str, timeout: float = 10.0) -> str | None:
    """Why the server cannot be benchmarked (unreachable), or None. Warns when /v1/models omits the model."""
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError:
        return None  # it answered; not every server lists models
    except (urllib.error.URLError, OSError) as exc:
        return f"cannot reach {url}: {getattr(exc, 'reason', exc)}"
    try:
        ids = [m.get("id") for m in json.loads(body).get("data", [])]
    except (ValueError, AttributeError, TypeError):
        return None
    if ids and model not in ids:
        print(f"warning: {url}/v1/models lists {', '.join(map(str, ids))}, not --model {model}", file=sys.stderr)
    return None


def _failure(rc: int, log: Path, progress: bool) -> str:
    lines = [] if progress or not log.exists() else [x for x in log.read_text().splitlines() if x.strip()]
    last = f": {lines[-1].strip()}" if lines else ""
    where = "its output is above" if progress else f"full output in {log}"
    return f"error: guidellm exited with {rc}{last} ({where})"


def first_error(raw: dict[str, Any]) -> str | None:
    """The error message of the first errored request in guidellm's report, if it recorded one."""
    for bench in raw.get("benchmarks", []):
        for req in bench.get("requests", {}).get("errored") or []:
            message = (req.get("info") or {}).get("error")
            if message:
                return str(message)
    return None


def run(args: argparse.Namespace) -> int:
    missing = missing_dependencies()
    if missing:
        print(
            f"error: inference-backend bench needs {' and '.join(missing)}, which this environment lacks: run it "
            "with the runners venv (`$(hack/runners-venv)/bin/inference-backend bench ...`) or install the bench "
            "dependencies (`pip install 'inference-backend[bench]'`)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    try:
        cfg = config.from_args(args)
    except config.BenchInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    unreachable = preflight(cfg.url, cfg.model)
    if unreachable:
        print(f"error: {unreachable}", file=sys.stderr)
        return EXIT_FAILED
    out: Path = args.out or Path("bench-results") / datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    raw_path, scenario_path, log = out / "guidellm.json", out / "guidellm-scenario.json", out / "guidellm.log"
    raw_path.unlink(missing_ok=True)  # never read a previous run's report
    scenario_path.write_text(json.dumps(config.scenario(cfg, raw_path.resolve()), indent=2) + "\n")
    cmd = config.guidellm_command(scenario_path, progress=not args.no_progress)
    started = _now()
    rc = _run_guidellm(cmd, not args.no_progress, log)
    finished = _now()
    if rc != 0 or not raw_path.exists():
        print(_failure(rc, log, not args.no_progress), file=sys.stderr)
        return EXIT_FAILED
    raw = json.loads(raw_path.read_text())
    command = ["inference-backend", *getattr(args, "argv", [])]
    try:
        doc = report.document(
            raw,
            kind=cfg.kind,
            url=cfg.url,
            model=cfg.model,
            command=command,
            started=started,
            finished=finished,
            load=config.load_summary(cfg),
        )
    except report.ReportError as exc:
        print(f"error: {exc} ({raw_path})", file=sys.stderr)
        return EXIT_FAILED
    doc["guidellmCommand"] = cmd
    (out / "bench.json").write_text(json.dumps(doc, indent=2) + "\n")
    from inference_backend.bench.plot import plot

    plot(doc, out / "bench.png")
    print(report.summary_table(doc))
    print(f"results: {out / 'bench.json'}, {out / 'bench.png'}, guidellm report {raw_path}")
    if not any(s["completed"] for s in doc["steps"]):
        reason = first_error(raw)
        print(f"error: no request succeeded{f': {reason}' if reason else ''}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
