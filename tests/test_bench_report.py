"""bench/report.py on real guidellm 0.8.1 reports (tests/data/bench, trimmed by trim_report.py).

Every figure is recomputed here from the per-request records (timestamps and token counts), not from guidellm's
aggregates: nearest-rank percentiles in exact arithmetic, inter-token latency weighted by the tokens after the
first, rates as events over the step's measured window.
"""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from inference_backend.bench import report

DATA = Path(__file__).parent / "data" / "bench"


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())  # type: ignore[no-any-return]


def nearest_rank(pairs: list[tuple[float, float]], q: float) -> set[float]:
    """The smallest value whose cumulative weight reaches q of the total; at an exact tie, the next value too."""
    pairs = sorted(pairs)
    total = sum(Fraction(w) for _, w in pairs)
    goal, cum = Fraction(q) * total, Fraction(0)
    for i, (value, weight) in enumerate(pairs):
        cum += Fraction(weight)
        if cum >= goal:
            tie = cum == goal and i + 1 < len(pairs)
            return {value, pairs[i + 1][0]} if tie else {value}
    raise AssertionError("unreachable")


def check_quantiles(got: dict[str, float | None], pairs: list[tuple[float, float]]) -> None:
    mean = sum(v * w for v, w in pairs) / sum(w for _, w in pairs)
    assert got["mean"] == pytest.approx(mean, rel=1e-9)
    for key, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        assert any(got[key] == pytest.approx(v, rel=1e-9) for v in nearest_rank(pairs, q)), (key, got, pairs)


def independent(bench: dict[str, Any]) -> dict[str, Any]:
    ok = bench["requests"]["successful"]
    t = [r["info"]["timings"] for r in ok]
    window = bench["end_time"] - bench["start_time"]
    return {
        "ttft": [((x["first_token_iteration"] - x["request_start"]) * 1000, 1.0) for x in t],
        "latency": [((x["request_end"] - x["request_start"]) * 1000, 1.0) for x in t],
        "itl": [
            ((x["last_token_iteration"] - x["first_token_iteration"]) * 1000 / (n - 1), n - 1)
            for x, n in zip(t, (r["output_tokens"] for r in ok), strict=True)
            if n > 1
        ],
        "rps": len(ok) / window,
        "tps": sum(r["output_tokens"] for r in ok) / window,
        "window": window,
    }


def test_steps_match_figures_recomputed_from_the_request_records() -> None:
    raw = load("concurrency-1-4.json")
    steps = report.steps("concurrency", raw)
    assert [s["target"] for s in steps] == [1.0, 4.0]
    for s, bench in zip(steps, raw["benchmarks"], strict=True):
        ind = independent(bench)
        assert s["completed"] == len(bench["requests"]["successful"]) == 12
        assert s["errored"] == len(bench["requests"]["errored"]) == 0
        assert s["incomplete"] == len(bench["requests"]["incomplete"]) == 0 and s["errorRate"] == 0.0
        check_quantiles(s["ttftMs"], ind["ttft"])
        check_quantiles(s["latencyMs"], ind["latency"])
        check_quantiles(s["itlMs"], ind["itl"])
        assert s["requestsPerSecond"] == pytest.approx(ind["rps"], rel=1e-6)
        assert s["outputTokensPerSecond"] == pytest.approx(ind["tps"], rel=1e-6)
        assert s["durationS"] == pytest.approx(ind["window"], rel=1e-9)
        assert s["ttftMs"]["p50"] <= s["ttftMs"]["p95"] <= s["ttftMs"]["p99"]
    # The fixture has varied output lengths, so the token weighting of the inter-token latency matters.
    assert len({w for _, w in independent(raw["benchmarks"][0])["itl"]}) > 1


def test_every_request_lasted_within_its_step_window() -> None:
    """The premise of the rate checks above: no completed request ended outside the measured window."""
    for bench in load("concurrency-1-4.json")["benchmarks"]:
        for r in bench["requests"]["successful"]:
            assert bench["start_time"] <= r["info"]["timings"]["request_end"] <= bench["end_time"]


def test_all_errored_report_has_error_rate_one_and_no_latencies() -> None:
    raw = load("wrong-model.json")
    steps = report.steps("concurrency", raw)
    assert len(steps) == 2
    for s, bench in zip(steps, raw["benchmarks"], strict=True):
        assert s["completed"] == 0 and s["errored"] == len(bench["requests"]["errored"]) == 3
        assert s["errorRate"] == 1.0
        assert s["ttftMs"] == s["itlMs"] == s["latencyMs"] == dict.fromkeys(report.QUANTILES)
        assert s["outputTokensPerSecond"] == 0.0 and s["requestsPerSecond"] == 0.0
    assert "404" in raw["benchmarks"][0]["requests"]["errored"][0]["info"]["error"]


def test_document_has_the_agreed_schema() -> None:
    load_ = {"promptTokens": 32, "promptStdev": 8, "outputTokens": 12, "outputStdev": 4, "extraBody": {}}
    doc = report.document(
        load("concurrency-1-4.json"),
        kind="concurrency",
        url="http://h:1",
        model="tiny",
        command=["inference-backend", "bench"],
        started="a",
        finished="b",
        load=load_,
    )
    assert doc["schema"] == "inference-backend.bench/v1"
    assert doc["tool"] == {"name": "guidellm", "version": "0.8.1"}
    assert {"url", "model", "command", "started", "finished", "load", "steps"} <= set(doc)
    step_keys = {"kind", "target", "completed", "errored", "errorRate", "ttftMs", "itlMs", "latencyMs"}
    step_keys |= {"outputTokensPerSecond", "requestsPerSecond", "durationS"}
    for s in doc["steps"]:
        assert step_keys <= set(s) and s["kind"] == "concurrency"
        for key in ("ttftMs", "itlMs", "latencyMs"):
            assert set(s[key]) == {"mean", "p50", "p95", "p99"}
        assert isinstance(s["completed"], int) and isinstance(s["target"], float)
    json.dumps(doc)  # serialisable as is


def test_targets_by_kind() -> None:
    assert report.target("rate", {"type_": "constant", "rate": 2.5}, 9.0) == 2.5
    assert report.target("sweep", {"type_": "poisson", "rate": 3.0}, 9.0) == 3.0
    assert report.target("sweep", {"type_": "synchronous"}, 1.25) == 1.25
    assert report.target("concurrency", {"type_": "concurrent", "streams": 4}, 9.0) == 4.0
    with pytest.raises(report.ReportError, match="rate step ran strategy 'throughput'"):
        report.target("rate", {"type_": "throughput"}, 9.0)


def test_unknown_format_and_missing_fields_are_named() -> None:
    raw = load("concurrency-1-4.json")
    newer = copy.deepcopy(raw)
    newer["metadata"]["version"] = 3
    with pytest.raises(report.ReportError, match="format version 3"):
        report.steps("concurrency", newer)
    broken = copy.deepcopy(raw)
    del broken["benchmarks"][1]["metrics"]["inter_token_latency_ms"]
    with pytest.raises(report.ReportError, match="missing inter_token_latency_ms"):
        report.steps("concurrency", broken)
    broken = copy.deepcopy(raw)
    broken["benchmarks"][0]["metrics"]["request_totals"]["errored"] = "none"
    with pytest.raises(report.ReportError, match=r"request_totals\.errored is not a number"):
        report.steps("concurrency", broken)


def test_summary_table_rows() -> None:
    doc = {"steps": report.steps("concurrency", load("concurrency-1-4.json"))}
    doc["steps"].append(report.steps("concurrency", load("wrong-model.json"))[0])
    lines = report.summary_table(doc).splitlines()
    assert lines[0].split()[:4] == ["step", "done", "err", "inc"]
    assert lines[1].startswith("concurrency=1 ") and lines[2].startswith("concurrency=4 ")
    first = doc["steps"][0]
    assert f"{first['ttftMs']['p50']:.1f}" in lines[1] and f"{first['outputTokensPerSecond']:.1f}" in lines[1]
    assert "3 (100%)" in lines[3] and lines[3].split()[1] == "0" and " - " in lines[3]
    assert len({len(line) for line in lines}) == 1  # aligned columns
    assert not math.isnan(first["errorRate"])
