"""The selection's TTFT and tokens/s estimates: measured rows at the real shape first, then the nearest measured
quantization, then the scaled reference profile; the decision's reasons say which (issue 16 item 7)."""

from __future__ import annotations

import dataclasses

import pytest
from ib_testkit.factories import cluster, node, spec
from inference_backend.decision import Placement, ResolvedModel
from inference_backend.engines import MeasuredRow, Profile, card
from inference_backend.facts import HardwareClass
from inference_backend.memory import QUANT_BYTES
from inference_backend.selection import estimate as est
from inference_backend.selection import select

REFERENCE = Profile(ttft_ms=210_000, tokens_per_second=0.6, memory_gib_per_7b=26, bytes_per_param=4.0,
                    provenance="measured: a 32M model scaled to 7B", reference_cores=2)  # fmt: skip
Q8 = MeasuredRow(weights="q8_0", parameters=6_738_415_616, bytes_per_param=1.0625, cores=2, prompt_tokens=512,
                 ttft_ms=69_000, tokens_per_second_1=2.3, tokens_per_second_8=2.5, peak_rss_gib=7.2,
                 provenance="measured: test row")  # fmt: skip
CPU2 = Placement("cpu", HardwareClass(arch="amd64", cpu_millis=2000, memory_bytes=24 * 2**30), 1)
CPU8 = dataclasses.replace(CPU2, hardware=dataclasses.replace(CPU2.hardware, cpu_millis=8000))


def _model(quantization: str = "none", parameters: int = Q8.parameters, dtype: str = "float16") -> ResolvedModel:
    return ResolvedModel(uri=None, format="gguf", parameters=parameters, dtype=dtype, quantization=quantization,
                         context_length=4096, layers=32, kv_heads=32, head_dim=128, shape_source="test")  # fmt: skip


def _weights(m: ResolvedModel) -> float:
    return m.parameters * QUANT_BYTES[m.quantization]


def test_the_measured_row_in_the_models_format_gives_the_estimate() -> None:
    profile = dataclasses.replace(REFERENCE, measured=(Q8,))
    m = _model("q8_0")
    e = est.estimate(profile, "cpu", CPU2, m, _weights(m), "float16")
    assert e.ttft_ms == pytest.approx(69_000)
    assert e.tokens_per_second == pytest.approx(2.5 * 1.0625 / QUANT_BYTES["q8_0"], rel=1e-3)
    assert e.how.startswith("measured row (6.7B q8_0, 2 cores") and "measured: test row" in e.how
    # twice the parameters: twice the prefill, half the decode; four times the cores: a quarter and four times
    m13 = _model("q8_0", parameters=2 * Q8.parameters)
    e13 = est.estimate(profile, "cpu", CPU8, m13, _weights(m13), "float16")
    assert e13.ttft_ms == pytest.approx(69_000 * 2 / 4)
    assert e13.tokens_per_second == pytest.approx(e.tokens_per_second / 2 * 4, rel=1e-3)


def test_another_quantization_takes_the_nearest_measured_quantized_row_for_prefill() -> None:
    q4 = dataclasses.replace(Q8, weights="q4_k_m", bytes_per_param=0.61, ttft_ms=80_000, tokens_per_second_8=4.0)
    profile = dataclasses.replace(REFERENCE, measured=(Q8, q4))
    m = _model("q5_k_m")
    e = est.estimate(profile, "cpu", CPU2, m, _weights(m), "float16")
    assert e.ttft_ms == pytest.approx(80_000)  # q5_k_m (0.71 B/param) is nearer q4_k_m than q8_0
    assert e.tokens_per_second == pytest.approx(4.0 * 0.61 / QUANT_BYTES["q5_k_m"], rel=1e-3)
    assert e.how.startswith("nearest measured quantization: the 6.7B q4_k_m") and "no q5_k_m row" in e.how


def test_without_a_row_in_its_family_the_reference_profile_is_scaled() -> None:
    profile = dataclasses.replace(REFERENCE, measured=(Q8,))
    m = _model("none", dtype="float32")  # a float model never borrows a quantized row's prefill
    e = est.estimate(profile, "cpu", CPU2, m, m.parameters * 4.0, "float32")
    assert e.ttft_ms == pytest.approx(210_000 * Q8.parameters / 7e9)
    assert e.tokens_per_second == pytest.approx(0.6 * 7e9 / Q8.parameters)
    assert e.how.startswith("scaled from the cpu reference profile") and "no row measured" in e.how
    assert est.estimate(REFERENCE, "cpu", CPU2, _model("q8_0"), 7e9, "float16").how.startswith("scaled")


def test_the_decision_says_where_its_estimate_comes_from() -> None:
    cpu = cluster(node("cpu", cpu="16", memory="64Gi"))
    d = select(spec(backend="pytorch", model={"uri": "hf://x/y", "parameters": "7B", "dtype": "bfloat16"},
                    hardware={"accelerator": "cpu"}), cpu, {})  # fmt: skip
    line = next(r for r in d.reasons if r.startswith("estimated TTFT"))
    row = next(r for r in card("pytorch").profiles["cpu"].measured if r.weights == "bfloat16")
    assert "measured row (6.7B bfloat16, 2 cores" in line and row.provenance in line
    assert d.estimate["ttftMillis"] == pytest.approx(row.ttft_ms * 7e9 / row.parameters * 2 / 16, rel=1e-3)
    d = select(spec(backend="pytorch", model={"uri": "hf://x/y", "parameters": "7B", "dtype": "float32"},
                    hardware={"accelerator": "cpu"}), cpu, {})  # fmt: skip
    assert "scaled from the cpu reference profile" in next(r for r in d.reasons if r.startswith("estimated TTFT"))
    d = select(spec(model={"uri": "hf://x/y/model.Q8_0.gguf", "parameters": "7B"}, hardware={"accelerator": "cpu"}),
               cpu, {})  # fmt: skip
    assert "measured row (6.7B q8_0, 2 cores" in next(r for r in d.reasons if r.startswith("estimated TTFT"))
    d = select(spec(model={"uri": "hf://x/y/model.Q6_K.gguf", "parameters": "7B"}, hardware={"accelerator": "cpu"}),
               cpu, {})  # fmt: skip
    line = next(r for r in d.reasons if r.startswith("estimated TTFT"))
    assert (
        "nearest measured quantization: the 6.7B q8_0, 2 cores row (no q6_k row)" in line
    )  # 0.82 B/param: nearer q8_0


def test_an_onnx_int4_or_int8_model_takes_the_onnx_servers_measured_row() -> None:
    rows = card("onnxruntime").profiles["cpu"].measured
    assert {r.weights for r in rows} >= {"int4"}
    cpu = cluster(node("cpu", cpu="16", memory="64Gi"))
    for row in rows:
        d = select(spec(backend="onnxruntime", model={"uri": "s3://b/m.onnx", "parameters": "7B", "dtype": row.weights},
                        hardware={"accelerator": "cpu"}), cpu, {})  # fmt: skip
        line = next(r for r in d.reasons if r.startswith("estimated TTFT"))
        assert f"measured row (6.7B {row.weights}, 2 cores" in line and row.provenance in line
        # same format: tokens/s follow the parameters (the row's real bytes per parameter, not int4's nominal 0.5)
        assert d.estimate["ttftMillis"] == pytest.approx(row.ttft_ms * 7e9 / row.parameters * 2 / 16, rel=1e-3)
        assert d.estimate["tokensPerSecond"] == pytest.approx(
            row.tokens_per_second_8 * 16 / 2 * row.parameters / 7e9, abs=0.06
        )
