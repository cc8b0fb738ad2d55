"""Trim a guidellm 0.8.1 JSON report to a test fixture: python tests/data/bench/trim_report.py IN OUT.

Keeps what report.py reads and the per-request records the tests recompute it from (timings, token counts,
errors); drops prompts, outputs, request bodies, the metrics we do not read and the confidence intervals.
"""

from __future__ import annotations

import json
import sys
from typing import Any

METRICS = (
    "request_totals",
    "requests_per_second",
    "request_latency",
    "time_to_first_token_ms",
    "inter_token_latency_ms",
    "prompt_token_count",
    "output_token_count",
    "output_tokens_per_second",
)
REQUEST_FIELDS = (
    "request_id",
    "request_start_time",
    "request_end_time",
    "request_latency",
    "prompt_tokens",
    "output_tokens",
    "time_to_first_token_ms",
    "inter_token_latency_ms",
)
TIMINGS = ("request_start", "first_token_iteration", "last_token_iteration", "request_end", "token_iterations")


def _distribution(d: Any) -> Any:
    if not isinstance(d, dict):
        return d
    return {
        k: (
            {kk: vv for kk, vv in v.items() if kk not in ("pdf", "mean_ci", "percentile_cis")}
            if isinstance(v, dict)
            else v
        )
        for k, v in d.items()
    }


def _request(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: r[k] for k in REQUEST_FIELDS}
    info = r["info"]
    out["info"] = {
        "status": info["status"],
        "error": info["error"],
        "timings": {k: info["timings"][k] for k in TIMINGS},
    }
    return out


def trim(report: dict[str, Any]) -> dict[str, Any]:
    benchmarks = []
    for b in report["benchmarks"]:
        benchmarks.append(
            {
                "type_": b["type_"],
                "config": {"strategy": b["config"]["strategy"], "constraints": b["config"]["constraints"]},
                "scheduler_state": {k: v for k, v in b["scheduler_state"].items() if k.endswith("_requests")},
                "metrics": {k: _distribution(b["metrics"][k]) for k in METRICS},
                "requests": {k: [_request(r) for r in (v or [])] for k, v in b["requests"].items() if k != "total"},
                "start_time": b["start_time"],
                "end_time": b["end_time"],
                "duration": b["duration"],
            }
        )
    return {"metadata": report["metadata"], "benchmarks": benchmarks}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        trimmed = trim(json.load(f))
    with open(sys.argv[2], "w") as f:
        json.dump(trimmed, f, indent=1)
        f.write("\n")
