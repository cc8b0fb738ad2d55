"""Our runners' /metrics use vLLM 0.33.0's own names, types and default histogram buckets (issue 16, item 5).

vLLM's side is read from its source in the vLLM venv by hack/vllm_metric_names.py (no import of vLLM, no GPU).
Our side is the runners' real Metrics registry (inference_backend.runners.common.metrics), exposed the way
/metrics exposes it (prometheus_client.generate_latest).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from inference_backend.runners.common.metrics import Metrics
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.contracts.parser_harness import ROOT
from tests.contracts.vllm import HARNESS

# The meanings issue 16 asks for, under the names vLLM gives them (counters without the `_total` suffix).
REQUIRED = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
)


@pytest.fixture(scope="module")
def vllm_metrics() -> dict[str, dict[str, Any]]:
    script = ROOT / "hack" / "vllm_metric_names.py"
    out = subprocess.run(
        [str(HARNESS.python()), str(script)], capture_output=True, text=True, timeout=120, check=True, cwd=ROOT
    ).stdout
    found: dict[str, dict[str, Any]] = json.loads(out)
    assert "vllm:time_to_first_token_seconds" in found, "the reader found none of vLLM's metrics"
    return found


def _ours() -> dict[str, dict[str, Any]]:
    m = Metrics("tiny")
    m.ttft.observe(0.5)  # histograms with an observation, counters and gauges as exposed at start
    text = generate_latest(m.registry).decode()
    assert "_created" not in text  # vLLM disables them; so do we
    out: dict[str, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        les = sorted({float(s.labels["le"]) for s in fam.samples if s.name.endswith("_bucket")} - {float("inf")})
        out[fam.name] = {"type": fam.type, "buckets": les or None, "labels": {k for s in fam.samples for k in s.labels}}
    return out


def test_every_vllm_named_metric_is_vllms_own(vllm_metrics: dict[str, dict[str, Any]]) -> None:
    ours = _ours()
    for name, mine in ours.items():
        if not name.startswith("vllm:"):
            assert name.startswith("ib:gpu_memory_"), f"{name}: neither vLLM's name nor our documented own"
            continue
        assert name in vllm_metrics, f"{name} is not a vLLM 0.33.0 metric"
        theirs = vllm_metrics[name]
        assert mine["type"] == theirs["type"], name
        assert mine["buckets"] == theirs["buckets"], f"{name}: buckets differ from vLLM's defaults"
        assert "model_name" in mine["labels"], name


def test_each_required_meaning_is_exposed(vllm_metrics: dict[str, dict[str, Any]]) -> None:
    ours = _ours()
    for name in REQUIRED:
        assert name in vllm_metrics, f"{name}: vLLM 0.33.0 has no such metric (renamed?)"
        assert name in ours, f"the runners do not expose {name}"
    # long CPU generations land in a bucket, not +Inf (vLLM's tops: 2560 s TTFT, 80 s per token, 7680 s e2e)
    assert ours["vllm:time_to_first_token_seconds"]["buckets"][-1] >= 2560
    assert ours["vllm:e2e_request_latency_seconds"]["buckets"][-1] >= 7680
