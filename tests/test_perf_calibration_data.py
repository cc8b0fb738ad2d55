"""Integrity of the published calibration set (tests/data/perf-calibration/published.csv): its columns, vocabulary,
units and holdout rule, read with the standard library only. It checks the data, not the performance model fitted to
it (the model's error on these rows is the model's own test and benchmark)."""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from pathlib import Path

import pytest
from ib_testkit.calibration import COLUMNS
from inference_backend.facts.sku_table import SKUS

DIR = Path(__file__).parent / "data" / "perf-calibration"
CSV = DIR / "published.csv"
README = DIR / "README.md"

ENGINES = {"vllm", "sglang", "tgi", "llamacpp", "onnxruntime", "pytorch"}
FLOAT_DTYPES = {"fp32", "fp16", "bf16"}
QUANT_DTYPES = {"fp8", "int8", "int4", "mxfp4"}
KV_DTYPES = {"", "fp32", "fp16", "bf16", "fp8", "q8_0", "q4_0"}
INTEGERS = ["gpu_count", "tp", "pp", "replicas", "concurrency"]
POSITIVE = [
    "parameters",
    "active_parameters",
    "request_rate",
    "prompt_tokens",
    "output_tokens",
    "ttft_ms_p50",
    "ttft_ms_p95",
    "tpot_ms_p50",
    "output_tokens_per_s",
    "total_tokens_per_s",
]
METRICS = ["ttft_ms_p50", "ttft_ms_p95", "tpot_ms_p50", "output_tokens_per_s", "total_tokens_per_s"]
ID = re.compile(r"^[a-z0-9]+(-[a-z0-9.]+)+$")
DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


def load() -> tuple[list[str], list[dict[str, str]]]:
    with CSV.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


HEADER, ROWS = load()


def number(row: dict[str, str], column: str) -> float | None:
    text = row[column]
    if text == "":
        return None
    value = float(text)
    assert math.isfinite(value), f"{row['id']}: {column}={text!r} is not finite"
    return value


def test_columns_are_exactly_the_schema() -> None:
    assert HEADER == COLUMNS


def test_enough_rows_and_unique_ids() -> None:
    ids = [r["id"] for r in ROWS]
    assert len(ids) >= 30
    assert len(set(ids)) == len(ids), sorted(i for i in set(ids) if ids.count(i) > 1)
    bad = [i for i in ids if not ID.match(i)]
    assert not bad, f"ids must be lower-case words joined by '-', the first naming the source: {bad}"


def test_vocabularies() -> None:
    products = {sku.names[0] for sku in SKUS} | {"cpu"}
    for r in ROWS:
        assert r["engine"] in ENGINES, (r["id"], r["engine"])
        assert r["gpu"] in products, f"{r['id']}: gpu {r['gpu']!r} is not a product name of facts/sku_table.py"
        assert r["kv_dtype"] in KV_DTYPES, (r["id"], r["kv_dtype"])
        if r["quantization"]:
            assert r["dtype"] in QUANT_DTYPES, f"{r['id']}: quantized weights need a quantized dtype"
        else:
            assert r["dtype"] in FLOAT_DTYPES, f"{r['id']}: unquantized weights need fp32/fp16/bf16"
        assert r["holdout"] in {"true", "false"}, r["id"]
        assert r["model"], r["id"]


def test_numbers_are_positive_and_integers_where_counted() -> None:
    for r in ROWS:
        for column in INTEGERS:
            value = number(r, column)
            if value is not None:
                assert value == int(value) and value >= 1, f"{r['id']}: {column}={r[column]!r}"
        for column in POSITIVE:
            value = number(r, column)
            if value is not None:
                assert value > 0, f"{r['id']}: {column}={r[column]!r}"


def test_each_row_has_a_metric_a_load_and_a_source() -> None:
    for r in ROWS:
        assert any(r[c] for c in METRICS), f"{r['id']}: no metric"
        assert r["concurrency"] or r["request_rate"], f"{r['id']}: no load (concurrency or request_rate)"
        assert r["source_url"].startswith("https://"), r["id"]
        assert r["source_location"], r["id"]
        assert DATE.match(r["source_date"]), (r["id"], r["source_date"])
        assert r["notes"], f"{r['id']}: notes say how the row was read"


def test_hardware_counts_agree() -> None:
    for r in ROWS:
        parameters, active = number(r, "parameters"), number(r, "active_parameters")
        assert parameters is not None and parameters >= 1e8, f"{r['id']}: parameters as a plain number (8.03e9)"
        if active is not None:
            assert active < parameters, r["id"]
        if r["gpu"] == "cpu":
            assert not r["gpu_count"] and not r["tp"], f"{r['id']}: a CPU row counts no GPUs"
            continue
        gpus = number(r, "gpu_count")
        assert gpus is not None, f"{r['id']}: gpu_count"
        tp, pp, replicas = (number(r, c) for c in ("tp", "pp", "replicas"))
        if tp is not None and pp is not None and replicas is not None:
            assert tp * pp * replicas == gpus, f"{r['id']}: tp x pp x replicas != gpu_count"


def test_metrics_are_consistent() -> None:
    for r in ROWS:
        p50, p95 = number(r, "ttft_ms_p50"), number(r, "ttft_ms_p95")
        if p50 is not None and p95 is not None:
            assert p95 >= p50, r["id"]
        out, total = number(r, "output_tokens_per_s"), number(r, "total_tokens_per_s")
        if out is not None and total is not None:
            assert total >= out, r["id"]
        concurrency, tpot = number(r, "concurrency"), number(r, "tpot_ms_p50")
        if out is not None and tpot is not None and concurrency is not None:
            # no replica streams faster than one token per TPOT per request (10% slack for means vs medians)
            replicas = number(r, "replicas") or 1
            assert out <= 1.1 * concurrency / replicas * 1000 / tpot, r["id"]


def source(row: dict[str, str]) -> str:
    return row["id"].split("-", 1)[0]


def test_holdout_follows_the_stated_rule() -> None:
    """Within each source (the id's first word), rows sorted by id: positions 1, 5, 9, ... (0-based) are held out."""
    by_source: dict[str, list[dict[str, str]]] = defaultdict(list)
    for r in ROWS:
        by_source[source(r)].append(r)
    for rows in by_source.values():
        for i, r in enumerate(sorted(rows, key=lambda r: r["id"])):
            assert (r["holdout"] == "true") == (i % 4 == 1), r["id"]
    held = sum(r["holdout"] == "true" for r in ROWS)
    assert held >= 0.2 * len(ROWS)


@pytest.mark.parametrize("name", sorted({source(r) for r in ROWS}))
def test_every_source_is_described_in_the_readme(name: str) -> None:
    assert f"`{name}`" in README.read_text(), f"README.md has no paragraph for source {name}"


def test_engines_and_load_extremes_are_covered() -> None:
    engines = {r["engine"] for r in ROWS}
    assert engines >= ENGINES
    single = {r["engine"] for r in ROWS if r["concurrency"] == "1"}
    assert single >= ENGINES
    assert any(r["gpu"] == "cpu" for r in ROWS)
    gpus_by_engine: dict[str, set[str]] = defaultdict(set)
    for r in ROWS:
        gpus_by_engine[r["engine"]].add(r["gpu"])
    # llama.cpp is measured on datacenter GPUs, not only on CPUs
    assert len(gpus_by_engine["llamacpp"] - {"cpu"}) >= 3


def same_load(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[c] for c in ("gpu", "gpu_count", "model", "dtype", "concurrency", "request_rate"))


@pytest.mark.parametrize("vendor", ["NVIDIA-", "AMD_"])
def test_tgi_and_vllm_meet_on_the_same_hardware_and_load(vendor: str) -> None:
    """Engines can only be ranked where one source measured both on the same GPUs, model and load."""
    by_source: dict[str, dict[str, set[tuple[str, ...]]]] = defaultdict(lambda: defaultdict(set))
    for r in ROWS:
        if r["gpu"].startswith(vendor) and r["engine"] in {"tgi", "vllm"}:
            by_source[source(r)][r["engine"]].add(same_load(r))
    shared = {name: loads["tgi"] & loads["vllm"] for name, loads in by_source.items()}
    assert sum(len(s) for s in shared.values()) >= 3, shared
