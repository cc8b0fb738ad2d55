"""The selection's estimate at the stated load (selection/estimate.py, perf.py, workload.py): measured CPU rows,
aiconfigurator tables for vLLM and SGLang on NVIDIA GPUs, the roofline elsewhere; the decision says which."""

from __future__ import annotations

import dataclasses
import math

import pytest
from ib_testkit.factories import MODELS, cluster, node, spec
from inference_backend.decision import Placement, ResolvedModel
from inference_backend.engines import MeasuredRow, Profile, card
from inference_backend.facts import HardwareClass
from inference_backend.memory import QUANT_BYTES
from inference_backend.selection import select
from inference_backend.selection.estimate import Replica, estimate
from inference_backend.selection.workload import Device, Efficiency, Shape, Workload, predict, step_s

REFERENCE = Profile(
    ttft_ms=210_000,
    tokens_per_second=0.6,
    memory_gib_per_7b=26,
    bytes_per_param=4.0,
    provenance="measured: a 32M model scaled to 7B",
    reference_cores=2,
)
Q8 = MeasuredRow(
    weights="q8_0",
    parameters=6_738_415_616,
    bytes_per_param=1.0625,
    cores=2,
    prompt_tokens=512,
    ttft_ms=69_000,
    tokens_per_second_1=2.3,
    tokens_per_second_8=4.0,
    peak_rss_gib=7.2,
    provenance="measured: test row",
)
CPU2 = Placement("cpu", HardwareClass(arch="amd64", cpu_millis=2000, memory_bytes=24 * 2**30), 1)
CPU8 = dataclasses.replace(CPU2, hardware=dataclasses.replace(CPU2.hardware, cpu_millis=8000))
H100 = node("h100-a", "h100", 8, cpu="192", memory="1900Gi")


def _model(quantization: str = "none", parameters: int = Q8.parameters, dtype: str = "float16") -> ResolvedModel:
    return ResolvedModel(
        uri=None,
        format="gguf",
        parameters=parameters,
        dtype=dtype,
        quantization=quantization,
        context_length=4096,
        layers=32,
        kv_heads=32,
        head_dim=128,
        shape_source="test",
        attention_heads=32,
    )


def _cpu(profile: Profile, m: ResolvedModel, placement: Placement, load: Workload, dtype: str = "float16") -> float:
    weights = m.parameters * QUANT_BYTES.get(m.quantization, 4.0)
    r = Replica("llamacpp", profile, weights, 2 * 32 * 32 * 128 * 2, dtype, 64, 0)
    return estimate(r, placement, m, load).tokens_per_second


def test_the_measured_row_reproduces_its_own_figures_at_its_shape() -> None:
    """At the row's shape, cores and loads the model gives back the row: TTFT of its prompt, tokens/s at 1 and 8."""
    profile = dataclasses.replace(REFERENCE, measured=(Q8,))
    m = _model("q8_0")
    r = Replica("llamacpp", profile, m.parameters * Q8.bytes_per_param, 2 * 32 * 32 * 128 * 2, "float16", 64)
    one = estimate(r, CPU2, m, Workload(Q8.prompt_tokens, 1, concurrency=1))
    assert one.ttft_ms == pytest.approx(Q8.ttft_ms, rel=0.05)
    assert one.how.startswith("measured row (6.7B q8_0, 2 cores") and "measured: test row" in one.how
    single = estimate(r, CPU2, m, Workload(8, 16, concurrency=1))
    assert single.tpot_ms == pytest.approx(1000 / Q8.tokens_per_second_1, rel=0.05)
    eight = estimate(r, CPU2, m, Workload(8, 16, concurrency=8))  # its wall time includes the 8 prompts' prefill
    assert eight.tokens_per_second == pytest.approx(Q8.tokens_per_second_8, rel=0.25)
    # four times the cores: prefill four times faster
    four = estimate(r, CPU8, m, Workload(Q8.prompt_tokens, 1, concurrency=1))
    assert four.ttft_ms == pytest.approx(Q8.ttft_ms / 4, rel=0.05)


def test_another_quantization_takes_the_nearest_measured_quantized_row() -> None:
    q4 = dataclasses.replace(Q8, weights="q4_k_m", bytes_per_param=0.61, ttft_ms=80_000, tokens_per_second_8=4.0)
    profile = dataclasses.replace(REFERENCE, measured=(Q8, q4))
    m = _model("q5_k_m")
    r = Replica("llamacpp", profile, m.parameters * QUANT_BYTES["q5_k_m"], 2 * 32 * 32 * 128 * 2, "float16", 64)
    e = estimate(r, CPU2, m, Workload(512, 1, concurrency=1))
    assert e.ttft_ms == pytest.approx(80_000, rel=0.05)  # q5_k_m (0.71 B/param) is nearer q4_k_m than q8_0
    assert e.how.startswith("nearest measured quantization (no q5_k_m row) (6.7B q4_k_m")


def test_without_a_row_in_its_family_the_reference_profile_is_scaled() -> None:
    profile = dataclasses.replace(REFERENCE, measured=(Q8,))
    m = _model("none", dtype="float32")  # a float model never borrows a quantized row's prefill
    r = Replica("llamacpp", profile, m.parameters * 4.0, 2 * 32 * 32 * 128 * 4, "float32", 64)
    e = estimate(r, CPU2, m, Workload(512, 1, concurrency=1))
    assert e.ttft_ms == pytest.approx(210_000 * Q8.parameters / 7e9, rel=0.05)
    assert e.how.startswith("scaled from the cpu reference profile") and "no row" in e.how


def test_roofline_memory_bound_at_small_batch_compute_bound_at_large() -> None:
    """The step's time: weights / bandwidth at one sequence, 2 x parameters x tokens / FLOPS at many."""
    shape = Shape(8e9, 8e9, 32, 4096, 16e9, 131072)
    dev = Device(1, 2e12, 500e12)
    eff = Efficiency(1.0, 1.0, 0.0, 0.0, 0.0, "test")
    one = predict(shape, dev, eff, Workload(1, 1000, concurrency=1), 1e9, "")
    assert one.tpot_ms == pytest.approx(16e9 / 2e12 * 1000, rel=0.02)  # memory-bound: 8 ms
    many = predict(shape, dev, eff, Workload(1, 1000, concurrency=4096), 1e9, "")
    assert many.tpot_ms == pytest.approx(2 * 8e9 * 4096 / 500e12 * 1000, rel=0.25)  # compute-bound: 131 ms
    # prefill is compute-bound: the TTFT of a long prompt follows FLOPs, not bandwidth
    long = predict(shape, dev, eff, Workload(8192, 1, concurrency=1), 1e9, "")
    assert long.ttft_ms > 2 * 8e9 * 8192 / 500e12 * 1000


def test_the_kv_share_slows_only_the_reads_that_grow_with_context() -> None:
    """Efficiency.kv rates the attention's KV reads apart from the weights': a step at 1,000 tokens of context reads
    16 GB of weights and 131 MB of KV; with the KV read at a tenth of the weights' share the KV's part of the step
    is 10x longer, and a step with no context left to read is unchanged."""
    shape = Shape(8e9, 8e9, 32, 4096, 16e9, 131072)
    dev = Device(1, 2e12, 500e12)
    same = Efficiency(1.0, 1.0, 0.0, 0.0, 0.0, "test")
    slow = Efficiency(1.0, 1.0, 0.0, 0.0, 0.0, "test", kv=0.1)
    weights_s, kv_s = 16e9 / 2e12, 1000 * 131072 / 2e12
    assert step_s(shape, dev, same, 1, 0, 1000, 1) == pytest.approx(weights_s + kv_s)
    assert step_s(shape, dev, slow, 1, 0, 1000, 1) == pytest.approx(weights_s + 10 * kv_s)
    assert step_s(shape, dev, slow, 1, 0, 0, 1) == pytest.approx(step_s(shape, dev, same, 1, 0, 0, 1))


def test_data_parallel_attention_holds_the_attention_whole_per_group_and_runs_each_requests_attention_in_one() -> None:
    """Device.attention_dp (SGLang --enable-dp-attention): on 8 devices in 8 attention groups, one decoding request
    reads the attention weights whole (2 GB, not an eighth) and its KV and attention on one device, not spread over
    eight; a prompt's attention projections run on one group. With 8 or more requests in the step the KV reads and
    attention FLOPs spread over the groups as under TP: only the attention weights' copies remain. Without it (1
    group) the step is the tensor-parallel one."""
    shape = Shape(100e9, 100e9, 32, 4096, 100e9, 131072, attention_params=2e9)
    tp = Device(8, 2e12, 500e12)
    dp = dataclasses.replace(tp, attention_dp=8)
    eff = Efficiency(1.0, 1.0, 0.0, 0.0, 0.0, "test")
    weights_s, kv_s = 100e9 / 8 / 2e12, 1000 * 131072 / 8 / 2e12
    assert step_s(shape, tp, eff, 1, 0, 1000, 1) == pytest.approx(weights_s + kv_s)
    assert step_s(shape, dp, eff, 1, 0, 1000, 1) == pytest.approx(weights_s + 7 * 2e9 / 8 / 2e12 + 8 * kv_s)
    assert step_s(shape, dp, eff, 16, 0, 1000, 1) == pytest.approx(
        step_s(shape, tp, eff, 16, 0, 1000, 1) + 7 * 2e9 / 8 / 2e12
    )
    own_tp, own_dp = step_s(shape, tp, eff, 0, 4000, 0, 4000), step_s(shape, dp, eff, 0, 4000, 0, 4000)
    attention = 2 * 2e9 * 4000 + 2 * 32 * 4096 * 4000 * 4000  # the prompt's projections and attention FLOPs
    assert own_dp == pytest.approx(own_tp + 7 * attention / (8 * 500e12))  # on one group of 8, not spread over 8
    assert step_s(shape, dataclasses.replace(tp, attention_dp=1), eff, 1, 0, 1000, 1) == step_s(
        shape, tp, eff, 1, 0, 1000, 1
    )


def test_beyond_the_batch_cap_requests_queue_and_a_rate_above_capacity_saturates() -> None:
    shape = Shape(8e9, 8e9, 32, 4096, 16e9, 131072)
    dev = Device(1, 2e12, 500e12)
    eff = Efficiency(0.6, 0.8, 1.0, 10.0, 5.0, "test")
    at_cap = predict(shape, dev, eff, Workload(512, 256, concurrency=16), 16, "")
    beyond = predict(shape, dev, eff, Workload(512, 256, concurrency=64), 16, "")
    assert beyond.saturated and not at_cap.saturated
    assert beyond.tokens_per_second == pytest.approx(at_cap.tokens_per_second, rel=1e-6)
    assert beyond.ttft_ms > at_cap.ttft_ms + 2 * (256 - 1) * at_cap.tpot_ms  # waits ~3 rounds of 16
    low = predict(shape, dev, eff, Workload(512, 256, rate=1.0), 16, "")
    assert not low.saturated and low.tokens_per_second == pytest.approx(256)
    assert low.concurrency == pytest.approx((low.ttft_ms + 255 * low.tpot_ms) / 1000, rel=0.05)  # Little's law
    over = predict(shape, dev, eff, Workload(512, 256, rate=1000.0), 16, "")
    assert over.saturated and math.isinf(over.ttft_ms)


def test_a_burst_is_run_step_by_step_its_prompts_queue_behind_each_other() -> None:
    """N prompts sent together: with a prefill budget of one prompt per step the k-th first token comes after k
    prefill steps, so the median TTFT is about N / 2 prompts' prefill and the p95 about 0.95 N; the run's
    tokens/s is N x O over its length; one request alone is the single-stream figure."""
    shape = Shape(8e9, 8e9, 32, 4096, 16e9, 131072)
    dev = Device(1, 2e12, 500e12)
    eff = Efficiency(1.0, 1.0, 0.0, 0.0, 0.0, "test")
    prefill_ms = 2 * 8e9 * 1024 / 500e12 * 1000  # 32.8 ms of compute per 1,024-token prompt
    burst = predict(shape, dev, eff, Workload(1024, 64, concurrency=100, burst=True), 1e9, "", budget=1024 + 100)
    assert burst.ttft_ms == pytest.approx(50 * prefill_ms, rel=0.15)
    assert burst.ttft_p95_ms == pytest.approx(95 * prefill_ms, rel=0.15)
    assert burst.ttft_p95_ms > 1.8 * burst.ttft_ms
    one = predict(shape, dev, eff, Workload(1024, 64, concurrency=1, burst=True), 1e9, "")
    steady = predict(shape, dev, eff, Workload(1024, 64, concurrency=1), 1e9, "")
    assert one.tpot_ms == pytest.approx(steady.tpot_ms, rel=0.02)
    assert one.ttft_ms == pytest.approx(prefill_ms, rel=0.1)
    assert burst.tokens_per_second < 100 * one.tokens_per_second


def test_layers_split_over_devices_pipeline_a_long_prompt_but_not_a_decode_step() -> None:
    """llama.cpp's layer split: 8 micro-batches of 512 tokens through 4 devices take 11 / 32 of one device's
    time; a 512-token prompt (one micro-batch) and a decode step gain nothing."""
    shape = Shape(70e9, 70e9, 80, 8192, 140e9, 327680)
    eff = Efficiency(1.0, 1.0, 0.0, 0.0, 0.0, "test")
    one = Device(1, 2e12, 300e12)
    four = Device(1, 2e12, 300e12, stages=4, micro_batch=512)
    long_one = predict(shape, one, eff, Workload(4096, 2, concurrency=1), 1e9, "")
    long_four = predict(shape, four, eff, Workload(4096, 2, concurrency=1), 1e9, "")
    assert long_four.ttft_ms == pytest.approx(long_one.ttft_ms * 11 / 32, rel=0.05)
    short = [predict(shape, d, eff, Workload(512, 2, concurrency=1), 1e9, "") for d in (one, four)]
    assert short[0].ttft_ms == pytest.approx(short[1].ttft_ms, rel=1e-6)
    assert short[0].tpot_ms == pytest.approx(short[1].tpot_ms, rel=1e-6)


def test_vllm_keeps_its_smaller_defaults_on_an_a100_whatever_its_memory() -> None:
    """vLLM's large-GPU defaults (1,024 sequences, 8,192 tokens a step) are for GPUs of 70 GiB or more but A100s
    (EngineArgs._set_default_args: 'a100' not in device_name)."""
    from inference_backend.selection.perf import batch_cap, step_budget

    big = 80 * 2**30
    assert batch_cap("vllm", big, 0, "NVIDIA-H100-80GB-HBM3")[0] == 1024
    assert batch_cap("vllm", big, 0, "NVIDIA-A100-SXM4-80GB")[0] == 256
    assert step_budget("vllm", big, "NVIDIA-H100-80GB-HBM3") == 8192
    assert step_budget("vllm", big, "NVIDIA-A100-SXM4-80GB") == 2048


def test_the_decision_says_where_its_estimate_comes_from() -> None:
    cpu = cluster(node("cpu", cpu="16", memory="64Gi"))
    d = select(
        spec(
            backend="pytorch",
            model={"uri": "hf://x/y", "parameters": "7B", "dtype": "bfloat16"},
            hardware={"accelerator": "cpu"},
        ),
        cpu,
        {},
    )
    line = next(r for r in d.reasons if r.startswith("estimated TTFT"))
    row = next(r for r in card("pytorch").profiles["cpu"].measured if r.weights == "bfloat16")
    assert "measured row (6.7B bfloat16, 2 cores" in line and row.provenance in line
    assert d.estimate["source"].startswith("measured row (6.7B bfloat16")  # type: ignore[union-attr]
    d = select(
        spec(model={"uri": "hf://x/y/model.Q6_K.gguf", "parameters": "7B"}, hardware={"accelerator": "cpu"}), cpu, {}
    )
    line = next(r for r in d.reasons if r.startswith("estimated TTFT"))
    assert "nearest measured quantization (no q6_k row) (6.7B q8_0" in line  # 0.82 B/param: nearer q8_0
    d = select(spec(model={"modelRef": "llama-3-1-8b"}, backend="vllm"), cluster(H100), MODELS)
    assert str(d.estimate["source"]).startswith(
        "aiconfigurator 0.12.0 table (vllm|h100_sxm|meta-llama/Meta-Llama-3.1-8B"
    )
    d = select(spec(model={"modelRef": "llama-3-1-8b"}, backend="tgi"), cluster(H100), MODELS)
    assert str(d.estimate["source"]).startswith("aiconfigurator 0.12.0 table (vllm|h100_sxm")  # TGI 3.x as vLLM
    a100 = cluster(node("a", "a100-40", 1, cpu="16", memory="64Gi"))
    d = select(spec(model={"modelRef": "llama-3-1-8b"}, backend="vllm"), a100, MODELS)
    assert "(the same chip's a100_sxm table: A100-SXM4-40GB has none)" in str(d.estimate["source"])
    l4 = cluster(node("l4", "l4", 1, cpu="16", memory="64Gi"))
    d = select(spec(model={"modelRef": "llama-3-1-8b"}, backend="tgi"), l4, MODELS)
    assert str(d.estimate["source"]).startswith("roofline (NVIDIA-L4: 300 GB/s, 121 dense 16-bit")
    assert set(d.estimate) == {"ttftMillis", "ttftP95Millis", "tpotMillis", "tokensPerSecond", "concurrency", "source"}


def _at(concurrency: int, prompt: int) -> dict[str, float | str]:
    s = spec(
        model={"modelRef": "llama-3-1-8b"},
        backend="vllm",
        replicas=1,
        objectives={"concurrency": concurrency, "promptTokens": prompt, "outputTokens": 256},
    )
    return select(s, cluster(H100), MODELS).estimate


def test_the_estimate_follows_concurrency_and_prompt_length() -> None:
    """Done-when: one model on one GPU gives different TTFT, TPOT and tokens/s at concurrency 1, 16 and 256 and at
    prompts of 128 and 4096 tokens, in the directions the calibration data shows (more load: more tokens/s, slower
    tokens and first tokens; longer prompts: later first tokens, fewer tokens/s)."""
    e = {(c, p): _at(c, p) for c in (1, 16, 256) for p in (128, 4096)}
    for p in (128, 4096):
        assert e[(1, p)]["tokensPerSecond"] < e[(16, p)]["tokensPerSecond"] < e[(256, p)]["tokensPerSecond"]  # type: ignore[operator]
        assert e[(1, p)]["tpotMillis"] < e[(16, p)]["tpotMillis"] < e[(256, p)]["tpotMillis"]  # type: ignore[operator]
        assert e[(1, p)]["ttftMillis"] < e[(16, p)]["ttftMillis"] < e[(256, p)]["ttftMillis"]  # type: ignore[operator]
    for c in (1, 16, 256):
        assert e[(c, 128)]["ttftMillis"] < e[(c, 4096)]["ttftMillis"]  # type: ignore[operator]
        assert e[(c, 128)]["tokensPerSecond"] > e[(c, 4096)]["tokensPerSecond"]  # type: ignore[operator]
    # concurrency 1 on one H100: about 125-160 tokens/s (LLM-Inference-Bench, vLLM, Llama-3-8B), not thousands
    assert 100 < float(e[(1, 128)]["tokensPerSecond"]) < 200
