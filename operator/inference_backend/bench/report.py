"""guidellm's JSON report (format version 2, guidellm 0.8.x) -> our bench.json schema; the summary table.

Dict in, dict out: no guidellm import, so the extraction is tested on a recorded report in the light venv.
Latency figures are over the completed (successful) requests of a step, as guidellm computes them:
percentiles are guidellm's (nearest rank; inter-token latency weighted by the tokens after the first),
rates are events over the step's measured window. All latencies are milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SCHEMA = "inference-backend.bench/v1"
REPORT_VERSION = 2
QUANTILES = ("mean", "p50", "p95", "p99")


class ReportError(ValueError):
    """The guidellm report lacks a field we need, or has a format version we do not read."""


def _get(obj: object, *path: str) -> object:
    for key in path:
        if not isinstance(obj, Mapping) or key not in obj:
            raise ReportError(f"guidellm report: missing {'.'.join(path)}")
        obj = obj[key]
    return obj


def _num(obj: object, *path: str) -> float:
    value = _get(obj, *path)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportError(f"guidellm report: {'.'.join(path)} is not a number: {value!r}")
    return float(value)


def _int(obj: object, *path: str) -> int:
    value = _num(obj, *path)
    if value != int(value):
        raise ReportError(f"guidellm report: {'.'.join(path)} is not an integer: {value!r}")
    return int(value)


def quantiles(distribution: object, scale: float = 1.0) -> dict[str, float | None]:
    """mean/p50/p95/p99 of a StatusDistributionSummary's successful requests; None when there are none."""
    ok = _get(distribution, "successful")
    if _int(ok, "count") == 0:
        return dict.fromkeys(QUANTILES)
    out: dict[str, float | None] = {"mean": _num(ok, "mean") * scale}
    for q in QUANTILES[1:]:
        out[q] = _num(ok, "percentiles", q) * scale
    return out


def target(kind: str, strategy: object, requests_per_second: float) -> float:
    """Concurrency for concurrency steps, req/s for rate steps; for a sweep, the strategy's rate, or for its
    synchronous and throughput steps (which have none) the measured req/s, which guidellm derives its rates from."""
    strategy_type = _get(strategy, "type_")
    if kind == "concurrency":
        return _num(strategy, "streams")
    if strategy_type in ("constant", "poisson"):
        return _num(strategy, "rate")
    if kind == "rate":
        raise ReportError(f"guidellm report: a rate step ran strategy {strategy_type!r}")
    return requests_per_second


def step(kind: str, benchmark: object) -> dict[str, Any]:
    """One step of bench.json from one entry of guidellm's report `benchmarks`.

    errorRate is errored / (completed + errored): requests still running when a --seconds step ended are
    `incomplete` (cancelled by the bound, not failed by the server) and count in neither.
    """
    metrics = _get(benchmark, "metrics")
    completed = _int(metrics, "request_totals", "successful")
    errored = _int(metrics, "request_totals", "errored")
    incomplete = _int(metrics, "request_totals", "incomplete")
    rps = _num(metrics, "requests_per_second", "successful", "mean")
    strategy = _get(benchmark, "config", "strategy")
    return {
        "kind": kind,
        "target": target(kind, strategy, rps),
        "strategy": str(_get(strategy, "type_")),
        "completed": completed,
        "errored": errored,
        "incomplete": incomplete,
        "errorRate": errored / (completed + errored) if completed + errored else 0.0,
        "ttftMs": quantiles(_get(metrics, "time_to_first_token_ms")),
        "itlMs": quantiles(_get(metrics, "inter_token_latency_ms")),
        "latencyMs": quantiles(_get(metrics, "request_latency"), scale=1000.0),
        "outputTokensPerSecond": _num(metrics, "output_tokens_per_second", "successful", "mean"),
        "requestsPerSecond": rps,
        "outputTokensMean": quantiles(_get(metrics, "output_token_count"))["mean"],
        "durationS": _num(benchmark, "duration"),
    }


def steps(kind: str, report: Mapping[str, Any]) -> list[dict[str, Any]]:
    version = _get(report, "metadata", "version")
    if version != REPORT_VERSION:
        raise ReportError(f"guidellm report: format version {version!r}, this code reads {REPORT_VERSION}")
    benchmarks = _get(report, "benchmarks")
    if not isinstance(benchmarks, list):
        raise ReportError("guidellm report: benchmarks is not a list")
    return [step(kind, b) for b in benchmarks]


def document(
    report: Mapping[str, Any],
    *,
    kind: str,
    url: str,
    model: str,
    command: Sequence[str],
    started: str,
    finished: str,
    load: Mapping[str, Any],
) -> dict[str, Any]:
    """The whole bench.json (schema inference-backend.bench/v1)."""
    return {
        "schema": SCHEMA,
        "tool": {"name": "guidellm", "version": str(_get(report, "metadata", "guidellm_version"))},
        "url": url,
        "model": model,
        "command": list(command),
        "started": started,
        "finished": finished,
        "load": dict(load),
        "steps": steps(kind, report),
    }


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


COLUMNS: tuple[str, ...] = ("step", "done", "err", "inc", "ttft p50", "ttft p99", "itl p50", "itl p99", "lat p50")
COLUMNS += ("out tok/s", "req/s", "s")


def summary_table(doc: Mapping[str, Any]) -> str:
    """A fixed-width table, one row per step; latencies in ms."""
    rows = [COLUMNS]
    for s in doc["steps"]:
        label = f"{s['strategy']}@{s['target']:.3g}" if s["kind"] == "sweep" else f"{s['kind']}={s['target']:g}"
        rows.append(
            (
                label,
                str(s["completed"]),
                f"{s['errored']} ({s['errorRate']:.0%})" if s["errored"] else "0",
                str(s["incomplete"]),
                _fmt(s["ttftMs"]["p50"]),
                _fmt(s["ttftMs"]["p99"]),
                _fmt(s["itlMs"]["p50"]),
                _fmt(s["itlMs"]["p99"]),
                _fmt(s["latencyMs"]["p50"]),
                _fmt(s["outputTokensPerSecond"]),
                _fmt(s["requestsPerSecond"], 2),
                _fmt(s["durationS"]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]

    def line(cells: tuple[str, ...]) -> str:
        first, *rest = zip(cells, widths, strict=True)
        return "  ".join([first[0].ljust(first[1]), *(c.rjust(w) for c, w in rest)])

    return "\n".join(line(r) for r in rows)
