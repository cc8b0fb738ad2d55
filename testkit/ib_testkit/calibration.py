"""The calibration rows' schema (tests/data/perf-calibration/README.md), in one place for the data's integrity test,
the generator of aiconfigurator's silicon rows (hack/perf_tables.py) and the GPU bench that writes measured rows
(bench/gpu/calibration_rows.py)."""

from __future__ import annotations

COLUMNS = [
    "id",
    "engine",
    "engine_version",
    "gpu",
    "gpu_count",
    "tp",
    "pp",
    "replicas",
    "model",
    "parameters",
    "active_parameters",
    "dtype",
    "quantization",
    "kv_dtype",
    "concurrency",
    "request_rate",
    "prompt_tokens",
    "output_tokens",
    "ttft_ms_p50",
    "ttft_ms_p95",
    "tpot_ms_p50",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "source_url",
    "source_location",
    "source_date",
    "notes",
    "holdout",
]
"""The columns of every calibration CSV, in order."""
