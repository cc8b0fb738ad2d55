"""The workload model's error on the calibration set (tests/data/perf-calibration/): bounded for the rows the fit
saw and, apart, for the held-out rows it never saw. `make bench-model` prints the same figures per engine."""

from __future__ import annotations

import statistics

import pytest

from bench import perf_model

# The bounds this code meets with a small margin (docs/engine-profiles.md, "Calibration set and measured error":
# median 0.17 / 0.23, 92.8% / 92.7% within 2x when written; 92.1% / 93.1% before the wave fix, 92.2% / 93.9% before
# dstack's DeepSeek-R1 rows were read whole and TGI v3's page's rows were added). The issue's targets, a median
# |log2| of 0.32 and 90% of the figures within 2x, hold on both sets.
MEDIAN = {"fitted": 0.22, "held-out": 0.27}
WITHIN_2X = {"fitted": 0.90, "held-out": 0.92}


def _cases() -> dict[str, list[perf_model.Case]]:
    cases = [c for r in perf_model.load_rows() if (c := perf_model.case(r)) is not None]
    return {"fitted": [c for c in cases if not c.holdout], "held-out": [c for c in cases if c.holdout]}


def test_the_calibration_set_is_large_enough_and_holds_rows_out() -> None:
    rows = perf_model.load_rows()
    placed = _cases()
    assert len(rows) >= 30 and len(placed["held-out"]) >= 10
    assert {r["engine"] for r in rows} >= {"vllm", "sglang", "tgi", "llamacpp"}
    assert all(r["source_url"] and r["source_location"] for r in rows)


def test_the_model_error_is_bounded_on_fitted_and_held_out_rows() -> None:
    for label, cases in _cases().items():
        errs = perf_model.summary(cases)["all"]
        median = statistics.median(errs)
        within = sum(e <= 1 for e in errs) / len(errs)
        assert median <= MEDIAN[label], (label, median)
        assert within >= WITHIN_2X[label], (label, within)


def test_engines_and_gpus_rank_as_measured_in_most_pairs() -> None:
    r = perf_model.rankings([c for cs in _cases().values() for c in cs])
    # 244 of 254 (15 ties; 9 unjudgeable) when written. Four of the 10 disagreements are dstack's vLLM 0.7.4 rows on
    # 8x H200 at 128 DeepSeek-R1 users: their KV cache filled before 128 requests (TTFT 83 s against 14 s at 64,
    # throughput flat from 64 users), a capacity the model overestimates (docs/engine-profiles.md: "What still
    # disagrees").
    assert r.total >= 20 and r.agree / r.total >= 0.95, r.bad


def test_only_pairs_measured_within_the_tie_rule_are_ties() -> None:
    """A pair whose measured tokens/s differ by less than TIE (about 5%) agrees whichever way the estimate orders
    it and is listed as a tie; every pair listed as disagreeing differs by more."""
    import math
    import re

    r = perf_model.rankings([c for cs in _cases().values() for c in cs])
    figures = re.compile(r"measured ([0-9.e+]+) / ([0-9.e+]+), estimated ([0-9.e+]+) / ([0-9.e+]+)")

    def gap(line: str) -> tuple[float, bool]:
        m = figures.search(line)
        assert m, line
        ma, mb, ea, eb = (float(x) for x in m.groups())
        return abs(math.log(ma / mb)), (ea > eb) == (ma > mb)

    assert r.ties and all(gap(t)[0] < perf_model.TIE * 1.01 for t in r.ties)
    assert all(gap(b)[0] >= perf_model.TIE * 0.99 and not gap(b)[1] for b in r.bad)
    assert r.agree == r.total - len(r.bad)


def test_a_row_its_own_source_contradicts_leaves_the_rankings_and_is_printed_with_the_row_it_contradicts() -> None:
    """The consistency rule (bench/perf_model.py contradictions), applied to every row: within one source, engine
    and release, GPU and count, dtype and load, a row asking less work per output token than another (smaller model,
    or shorter prompt and context) that measured fewer tokens/s by more than TIE. TGI 1.0.3's 8x A100 7B row (42.7
    tokens/s at one user) is slower than the same instance's 13B row (47.7); LLM-Inference-Bench's ROCm vLLM 0.6.1
    8B row at 128+128 tokens (59.0) is slower than its 1,024+1,024 one (97.2). The fastest row of such a set is not
    flagged, nor is any row whose larger sibling is slower or within TIE."""
    rows = perf_model.load_rows()
    odd = perf_model.contradictions(rows)
    assert "tgisagemaker-tgi-a100x8-llama-2-7b-hf-c1" in odd
    assert "tgisagemaker-tgi-a100x8-llama-2-13b-hf-c1" in odd["tgisagemaker-tgi-a100x8-llama-2-7b-hf-c1"]
    assert "llminfbench-vllm-mi300xx1-llama3-8b-c1-len128" in odd
    assert "llminfbench-vllm-mi300xx1-llama3-8b-c1-len2048" not in odd
    assert "tgisagemaker-tgi-a100x8-llama-2-13b-hf-c1" not in odd  # its 70B sibling is slower, as it should be
    assert len(odd) < 0.05 * len(rows)
    # a consistent set: the same rows with the smaller ones made faster flag nothing
    fixed = [dict(r, output_tokens_per_s="1000") if r["id"] in odd else r for r in rows]
    assert not {k for k in perf_model.contradictions(fixed) if k in odd}
    r = perf_model.rankings([c for cs in _cases().values() for c in cs])
    assert r.unjudgeable and all("source contradicts itself: row " in u for u in r.unjudgeable)
    assert not any(i in b for b in r.bad + r.ties for i in odd)


def test_metas_fp8_405b_checkpoint_weighs_its_16_bit_attention() -> None:
    """Meta's Llama-3.1-405B-FP8 (quant_method fbgemm_fp8) keeps every attention projection and the first and last
    layers' MLP in BF16 (bench/perf_model.py PARTIAL_FP8): 71.9B attention parameters at 2 bytes and the rest at 1
    (the edge layers' share at 2) come to about 483 GB, where all in FP8 would be 405 GB; AMD's per-tensor FP8
    checkpoint of the same model is all FP8."""
    rows = {r["id"]: r for r in perf_model.load_rows()}
    meta = perf_model.case(rows["dstack-vllm-h100x8-llama31-405b-fp8-in2048-out2048-c64"])
    amd = perf_model.case(rows["dstack-vllm-mi300x-amdfp8kvx8-llama31-405b-fp8-in2048-out2048-c64"])
    assert meta is not None and amd is not None
    assert 475e9 < meta.replica.weights < 490e9, meta.replica.weights
    assert amd.replica.weights == pytest.approx(4.05e11)


def test_70b_on_h100_at_a_published_saturated_load_plans_the_gpus_the_throughput_implies() -> None:
    """Llama-3.1-70B bf16 on 4x H100, vLLM 0.6.0 saturated (SGLang's v0.6.0 benchmark, offline: 5,000 ShareGPT
    prompts at once): 3,701 output tokens/s per replica. A service asking 10x that needs 10 such replicas, 40 GPUs;
    the plan's GPU count is within 1.5x of it (bench/perf_model.py plan_check, which `make bench-model` prints).
    (ShareGPT's prompts average about 220 tokens; the row states only the output length.) At LLM-Inference-Bench's
    unsaturated batch of 64 (2,184 tokens/s, mid-2024 vLLM) the model is about 2x more optimistic:
    docs/engine-profiles.md."""
    gpus, implied, why = perf_model.plan_check()
    assert implied / 1.5 <= gpus <= implied * 1.5, (gpus, why)


def test_mi300x_and_tgi_rank_as_the_published_rows_rank_them() -> None:
    """Pairs of rows on the same model and load where one side is an MI300X (against another GPU, same engine) or
    TGI (against another engine, same GPU): the estimate orders their tokens/s as the measurement does."""
    cases = [c for cs in _cases().values() for c in cs]
    r = perf_model.rankings(cases, involving=("AMD_Instinct_MI300X_OAM", "tgi"))
    assert r.total >= 5 and r.agree / r.total >= 0.8, r.bad  # MI300X 44/48, TGI 7/7 (rest unjudgeable) when written


def test_a_replicas_most_throughput_is_the_peak_over_concurrency_not_its_value_at_the_kv_limit() -> None:
    """Past some concurrency the waits for a place in the batch and the longer steps cost more than the extra
    sequences give (the pinned vLLM on 4x H100 with Llama-3.1-70B: about 5,800 tokens/s near 300 requests, 5,450 at
    the 1,100 its KV cache holds), so the planner's "most" one replica makes is the peak, not the last point."""
    from dataclasses import replace

    from inference_backend.selection.estimate import estimate
    from inference_backend.selection.planning import _for_throughput
    from inference_backend.selection.workload import Workload

    c = perf_model.case(next(r for r in perf_model.load_rows() if r["id"] == perf_model.PLAN_ROW))
    assert c is not None
    replica = replace(c.replica, version="")  # the pinned release, as the planner rates it

    def tps(w: Workload) -> float:
        return estimate(replica, c.placement, c.model, w).tokens_per_second

    held = 1100.0
    load, why = _for_throughput(1e9, 220, 194, held, lambda w: estimate(replica, c.placement, c.model, w))
    assert "its most" in why
    sweep = [tps(Workload(220, 194, concurrency=held ** (i / 99))) for i in range(100)]
    assert tps(load) >= 0.98 * max(sweep) > tps(Workload(220, 194, concurrency=held)), (load, max(sweep))
