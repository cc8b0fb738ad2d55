"""Options of `inference-backend bench`, their validation, and the guidellm scenario they become.

Pure: nothing here imports guidellm. Each bad value is reported naming its option (argparse prints
`argument --concurrency: expected positive integers, got 'x'` and exits 2; cross-option checks raise BenchInputError).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal["concurrency", "rate", "sweep"]
DEFAULT_CONCURRENCY = "1,2,4,8"
DEFAULT_REQUESTS = 100  # per step, when neither --requests nor --seconds is given
API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


class BenchInputError(ValueError):
    """An invalid option value or combination; the message starts with the option name."""


def positive_ints(text: str) -> list[int]:
    """`1,2,4,8` -> [1, 2, 4, 8]; argparse type for --concurrency."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def positive_floats(text: str) -> list[float]:
    """`2,4.5` -> [2.0, 4.5]; argparse type for --rate (requests per second)."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or any(not v > 0 or v == float("inf") for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers separated by commas, got {text!r}")
    return values


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def sweep_size(text: str) -> int:
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected at least 2 steps (synchronous and throughput), got {text!r}")
    return value


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"ignore_eos\": true}}', got {text!r}")
    return value


def url(text: str) -> str:
    """The server's base URL, without a trailing / or /v1 (guidellm adds /v1/completions)."""
    if not text.startswith(("http://", "https://")) or len(text.split("://", 1)[1].strip("/")) == 0:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text.rstrip("/").removesuffix("/v1")


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution for guidellm's synthetic data (normal, clipped to [min, max])."""

    mean: int
    stdev: int = 0
    min: int | None = None
    max: int | None = None


@dataclass(frozen=True)
class BenchConfig:
    url: str
    model: str
    processor: str
    kind: Kind
    targets: tuple[float, ...]  # concurrency levels or request rates; empty for a sweep
    prompt: Lengths
    output: Lengths
    requests: int | None
    seconds: float | None
    extra_body: dict[str, Any] = field(default_factory=dict)
    api: str = "completions"
    rate_type: str = "constant"
    sweep_size: int = 10
    seed: int = 42
    timeout: float | None = None


def _lengths(args: argparse.Namespace, name: str) -> Lengths:
    lengths = Lengths(
        getattr(args, f"{name}_tokens"),
        getattr(args, f"{name}_stdev"),
        getattr(args, f"{name}_min"),
        getattr(args, f"{name}_max"),
    )
    if lengths.min is not None and lengths.min > lengths.mean:
        raise BenchInputError(f"--{name}-min: {lengths.min} is above --{name}-tokens {lengths.mean}")
    if lengths.max is not None and lengths.max < lengths.mean:
        raise BenchInputError(f"--{name}-max: {lengths.max} is below --{name}-tokens {lengths.mean}")
    return lengths


def from_args(args: argparse.Namespace) -> BenchConfig:
    """The validated configuration; BenchInputError for a bad combination of options."""
    kind: Kind
    targets: tuple[float, ...]
    if args.sweep is not None:
        kind, targets = "sweep", ()
    elif args.rate is not None:
        kind, targets = "rate", tuple(args.rate)
    else:
        kind, targets = "concurrency", tuple(float(c) for c in (args.concurrency or positive_ints(DEFAULT_CONCURRENCY)))
    if len(set(targets)) != len(targets):
        raise BenchInputError(f"--{kind}: each value may appear only once, got {','.join(f'{t:g}' for t in targets)}")
    if args.rate_type != "constant" and kind == "concurrency":
        raise BenchInputError("--rate-type: applies to --rate and --sweep, not to --concurrency")
    requests = args.requests
    if requests is None and args.seconds is None:
        requests = DEFAULT_REQUESTS
    return BenchConfig(
        url=args.url,
        model=args.model,
        processor=args.processor or args.model,
        kind=kind,
        targets=targets,
        prompt=_lengths(args, "prompt"),
        output=_lengths(args, "output"),
        requests=requests,
        seconds=args.seconds,
        extra_body=args.extra_body or {},
        api=args.api,
        rate_type=args.rate_type,
        sweep_size=args.sweep or 10,
        seed=args.seed,
        timeout=args.timeout,
    )


def _data(cfg: BenchConfig) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": "synthetic_text"}
    for name, lengths in (("prompt", cfg.prompt), ("output", cfg.output)):
        data[f"{name}_tokens"] = lengths.mean
        if lengths.stdev:  # guidellm wants a positive stdev or none (fixed length)
            data[f"{name}_tokens_stdev"] = lengths.stdev
        if lengths.min is not None:
            data[f"{name}_tokens_min"] = lengths.min
        if lengths.max is not None:
            data[f"{name}_tokens_max"] = lengths.max
    return data


def scenario(cfg: BenchConfig, report_path: Path) -> dict[str, Any]:
    """guidellm 0.8.1's scenario file (`guidellm run --scenario FILE`): one sub-benchmark per step."""
    backend: dict[str, Any] = {
        "kind": "openai_http",
        "target": cfg.url,
        "model": cfg.model,
        "request_format": API_PATHS[cfg.api],
    }
    if cfg.extra_body:
        backend["extras"] = {"body": cfg.extra_body}
    if cfg.timeout is not None:
        backend["timeout"] = cfg.timeout
    constraints: list[dict[str, Any]] = []
    if cfg.requests is not None:
        constraints.append({"kind": "max_requests", "count": cfg.requests})
    if cfg.seconds is not None:
        constraints.append({"kind": "max_duration", "seconds": cfg.seconds})
    benchmarks: list[dict[str, Any] | None]
    if cfg.kind == "concurrency":
        profile: dict[str, Any] = {"kind": "concurrent"}
        benchmarks = [{"profile.streams": int(t)} for t in cfg.targets]
    elif cfg.kind == "rate":
        profile = {"kind": cfg.rate_type}
        benchmarks = [{"profile.rate": t} for t in cfg.targets]
    else:
        profile = {"kind": "sweep", "sweep_size": cfg.sweep_size, "strategy_type": cfg.rate_type}
        benchmarks = [None]
    spec = {
        "backend": backend,
        "profile": profile,
        "constraints": constraints,
        "tokenizer": {"kind": "huggingface_auto", "model": cfg.processor},
        "data": [_data(cfg)],
        "seed": {"kind": "static", "value": cfg.seed},
        "outputs": [{"kind": "json", "path": str(report_path)}],
    }
    return {"spec": spec, "benchmarks": benchmarks}


def guidellm_command(scenario_path: Path, progress: bool, python: str = sys.executable) -> list[str]:
    """The guidellm invocation: live progress display, or nothing on the console (--no-progress)."""
    return [python, "-m", "guidellm", "run", "--scenario", str(scenario_path)] + (
        [] if progress else ["--disable-console"]
    )


def load_summary(cfg: BenchConfig) -> dict[str, Any]:
    """The `load` object of bench.json."""
    return {
        "promptTokens": cfg.prompt.mean,
        "promptStdev": cfg.prompt.stdev,
        "promptMin": cfg.prompt.min,
        "promptMax": cfg.prompt.max,
        "outputTokens": cfg.output.mean,
        "outputStdev": cfg.output.stdev,
        "outputMin": cfg.output.min,
        "outputMax": cfg.output.max,
        "extraBody": cfg.extra_body,
        "api": API_PATHS[cfg.api],
        "processor": cfg.processor,
        "requestsPerStep": cfg.requests,
        "secondsPerStep": cfg.seconds,
        "seed": cfg.seed,
    }
