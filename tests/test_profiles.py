"""The engine profile table: every value traces to a measurement in the repository or names its published source."""

from __future__ import annotations

import json

from inference_backend.engines import NAMES as ENGINES
from inference_backend.engines import card
from inference_backend.engines.profiles_measured import MEASURED_CPU

from bench import profiles


def test_measured_module_is_the_derivation_of_the_committed_results() -> None:
    result = json.loads(profiles.DEFAULT_INPUT.read_text())
    assert profiles.derive(result) == MEASURED_CPU
    assert profiles.MODULE.read_text() == profiles.render_module(MEASURED_CPU, "bench/results/cpu-profiles.json")


def test_every_cpu_engine_is_measured_and_every_row_has_provenance() -> None:
    for engine in ("llamacpp", "onnxruntime", "pytorch"):
        assert card(engine).profiles["cpu"].provenance.startswith("measured: "), engine
        assert "make bench-engines" in card(engine).profiles["cpu"].provenance
    for engine in ENGINES:
        assert card(engine).profiles["gpu"].provenance.split(":")[0] in ("measured", "published", "estimate")
    for engine in ("vllm", "tgi"):
        assert card(engine).profiles["gpu"].provenance.startswith("published: ")


def test_scaling_rules_on_the_measured_figures() -> None:
    result = json.loads(profiles.DEFAULT_INPUT.read_text())
    params, weights = result["model"]["parameters"], result["model"]["safetensorsBytes"]
    row = [r for r in result["table"] if r["engine"] == "llamacpp"]
    best = max(r["outputTokensPerSecond"] for r in row)
    derived = profiles.derive(result)["llamacpp"]
    assert abs(derived["tokens_per_second"] - best * weights / (7e9 * weights / params)) < 1e-3
    low = min(row, key=lambda r: r["concurrency"])
    expected_ttft = low["ttftP95Ms"] * 7e9 / params * 512 / result["load"]["promptTokens"]
    assert abs(derived["ttft_ms"] - expected_ttft) < 0.1
