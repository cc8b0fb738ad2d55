"""`inference-backend bench` end to end: guidellm 0.8.1 against our PyTorch runner serving a tiny model."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("guidellm")  # runners venv only; IB_REQUIRE_RUNNERS=1 turns this skip into a failure

from ib_testkit.runners import metric
from inference_backend.bench import config
from inference_backend.cli import build_parser

ROOT = Path(__file__).parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IGNORE_EOS = ["--extra-body", '{"ignore_eos": true}']


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from inference_backend.runners.tiny import make_model

    return make_model(tmp_path_factory.mktemp("bench") / "tiny", layers=2, seed=0)


@pytest.fixture(scope="module")
def server(tiny: Path, start_server: Any) -> Any:
    return start_server("pytorch", ["--model", str(tiny), "--served-model-name", "tiny"])


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "inference_backend.cli", "bench", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_concurrency_sweep_against_the_pytorch_runner(server: Any, tiny: Path, tmp_path: Path) -> None:
    generated = metric(server.url, "vllm:generation_tokens_total")
    out = tmp_path / "out"
    args = f"--url {server.url} --model tiny --processor {tiny} --concurrency 1,2 --requests 6 --prompt-tokens 32"
    proc = bench(*args.split(), *f"--output-tokens 8 --no-progress --out {out}".split(), *IGNORE_EOS)
    assert proc.returncode == 0, proc.stderr + (out / "guidellm.log").read_text()
    doc = json.loads((out / "bench.json").read_text())
    assert doc["schema"] == "inference-backend.bench/v1" and doc["tool"] == {"name": "guidellm", "version": "0.8.1"}
    assert doc["load"]["extraBody"] == {"ignore_eos": True} and doc["load"]["outputTokens"] == 8
    assert [s["target"] for s in doc["steps"]] == [1.0, 2.0]
    for s in doc["steps"]:
        assert s["kind"] == "concurrency" and s["completed"] == 6 and s["errored"] == 0 and s["errorRate"] == 0.0
        assert s["outputTokensPerSecond"] > 0 and s["requestsPerSecond"] > 0 and s["durationS"] > 0
        for key in ("ttftMs", "itlMs", "latencyMs"):
            q = s[key]
            assert 0 < q["p50"] <= q["p95"] <= q["p99"], (key, q)
        assert s["ttftMs"]["p50"] < s["latencyMs"]["p99"]
    # The runner honoured ignore_eos: every request generated exactly its 8 tokens.
    assert metric(server.url, "vllm:generation_tokens_total") - generated == 2 * 6 * 8
    png = (out / "bench.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 1000
    raw = json.loads((out / "guidellm.json").read_text())
    assert len(raw["benchmarks"]) == 2
    assert "concurrency=1" in proc.stdout and "concurrency=2" in proc.stdout


def test_wrong_model_name_errors_every_request_and_exits_1(server: Any, tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = f"--url {server.url} --model no-such-model --processor {tiny} --concurrency 1 --requests 2"
    proc = bench(*args.split(), *f"--prompt-tokens 16 --output-tokens 4 --no-progress --out {out}".split())
    assert proc.returncode == 1
    assert "lists tiny, not --model no-such-model" in proc.stderr
    assert "error: no request succeeded" in proc.stderr and "404" in proc.stderr
    (step,) = json.loads((out / "bench.json").read_text())["steps"]
    assert step["completed"] == 0 and step["errored"] == 2 and step["errorRate"] == 1.0
    assert step["ttftMs"]["p50"] is None
    assert (out / "bench.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    "load", [["--concurrency", "1,2,4"], ["--rate", "2,4.5", "--rate-type", "poisson"], ["--sweep", "4"]]
)
def test_scenarios_are_valid_for_guidellm(load: list[str], tmp_path: Path) -> None:
    """Each scenario we write passes guidellm's own validation and merges into one run of the intended steps."""
    from guidellm.benchmark.entrypoints import resolve_to_single_benchmark
    from guidellm.schemas.benchmark import BenchmarkScenario

    argv = shlex.split("bench --url http://h:1 --model m --seconds 5 --requests 10 --prompt-stdev 4 --prompt-min 100")
    args = build_parser().parse_args([*argv, *load, "--extra-body", '{"top_k": 3}'])
    cfg = config.from_args(args)
    scenario = BenchmarkScenario.model_validate(config.scenario(cfg, tmp_path / "g.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # guidellm warns on deprecated ways of listing steps
        merged = resolve_to_single_benchmark(scenario.get_benchmarks())
    profile = merged.profile.model_dump()
    if cfg.kind == "concurrency":
        assert profile["kind"] == "concurrent" and profile["streams"] == [1, 2, 4]
    elif cfg.kind == "rate":
        assert profile["kind"] == "poisson" and profile["rate"] == [2.0, 4.5]
    else:
        assert profile["kind"] == "sweep" and profile["sweep_size"] == 4
    assert [c.model_dump()["kind"] for c in merged.constraints] == ["max_requests", "max_duration"]
    assert merged.backend.model_dump()["extras"]["body"] == {"top_k": 3}
    data = merged.data[0].model_dump()
    assert (data["prompt_tokens"], data["prompt_tokens_stdev"], data["prompt_tokens_min"]) == (256, 4, 100)
