"""The llama-server harness boots the real pinned llama-server with renderer-style args.

Every flag below was checked against the vendored llama.cpp source (common/arg.cpp, b11312) and is in
tests/contracts/data/llama-server-b11312.flags.txt.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
from ib_testkit.llama_server import (
    llama_bench_bin,
    llama_cpp_pins,
    llama_server_bin,
    run_llama_server_to_exit,
    start_llama_server,
)

from tests.contracts.conftest import require
from tests.contracts.gguf_models import write_target_and_draft

pytestmark = pytest.mark.slow

# What the renderer emits for a llama.cpp deployment with a draft model (paths/port substituted).
RENDERED = [
    "-m",
    "/models/target.gguf",
    "--host",
    "0.0.0.0",
    "--port",
    "8080",
    "--parallel",
    "4",
    "-cb",
    "-c",
    "2048",
    "-b",
    "512",
    "-ub",
    "512",
    "-fa",
    "on",
    "-ctk",
    "q8_0",
    "-ctv",
    "q8_0",
    "--cache-reuse",
    "256",
    "--metrics",
    "-md",
    "/models/draft.gguf",
    "--spec-type",
    "draft-simple",
    "--spec-draft-n-max",
    "8",
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    # gguf is installed by `make contracts` (contracts-deps) until it is in the dev extra
    require(importlib.util.find_spec("gguf") is not None, "the gguf package is not installed")
    return write_target_and_draft(tmp_path_factory.mktemp("gguf"))


@pytest.fixture(scope="module")
def binary() -> Path:
    path = llama_server_bin()
    require(path.exists(), f"{path} missing (run hack/build-llama-server or make contracts)")
    return path


def test_version_matches_pin(binary: Path) -> None:
    code, out = run_llama_server_to_exit(["--version"])
    pins = llama_cpp_pins()
    assert code == 0, out
    assert f"(build {pins['LLAMA_CPP_BUILD']}, commit {pins['LLAMA_CPP_COMMIT']})" in out, out


def test_server_boots_with_rendered_args(binary: Path, models: tuple[Path, Path]) -> None:
    target, draft = models
    with start_llama_server(RENDERED, {}, model=target, draft=draft) as srv:
        assert srv.get_json("/health") == {"status": "ok"}

        res = srv.post_json(
            "/v1/completions",
            {"prompt": "the cat sat on", "max_tokens": 12, "temperature": 0, "ignore_eos": True},
        )
        assert res["usage"]["completion_tokens"] == 12, res
        assert res["choices"][0]["text"], res

        # the draft model really drafts (its tokens are noise, so none are accepted)
        native = srv.post_json(
            "/completion", {"prompt": "the cat", "n_predict": 16, "temperature": 0, "ignore_eos": True}
        )
        assert native["tokens_predicted"] == 16
        assert native["timings"]["draft_n"] > 0, native["timings"]

        status, body = srv.get("/metrics")
        assert status == 200
        metrics = body.decode()
        assert re.search(r"^llamacpp:prompt_tokens_total \d", metrics, re.M), metrics[:2000]
        assert re.search(r"^llamacpp:tokens_predicted_total \d", metrics, re.M), metrics[:2000]
        assert re.search(r"^llamacpp:spec_decode_num_drafts_total [1-9]", metrics, re.M), metrics[:2000]

        slots = srv.get_json("/slots")
        assert len(slots) == 4
        assert all(s["speculative"] is True for s in slots), slots
        assert {s["n_ctx"] for s in slots} == {512}

        props = srv.get_json("/props")
        assert props["total_slots"] == 4
    assert srv.proc.returncode == 0, srv.output()[-3000:]


def test_draft_without_spec_type_is_loaded_but_unused(binary: Path, models: tuple[Path, Path]) -> None:
    """In b11312 `-md` alone does not turn speculation on: `--spec-type draft-simple` is required."""
    target, draft = models
    args = ["-m", "{model}", "--parallel", "2", "-c", "1024", "-md", "{draft}", "--spec-draft-n-max", "8"]
    with start_llama_server(args, {}, model=target, draft=draft) as srv:
        slots = srv.get_json("/slots")
        assert all(s["speculative"] is False for s in slots), slots


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--draft-max", "8"], "the argument has been removed"),
        (["--draft", "8"], "the argument has been removed"),
        (["--draft-min", "2"], "the argument has been removed"),
        (["--swap-space", "4"], "invalid argument: --swap-space"),
    ],
)
def test_removed_or_unknown_flag_is_fatal(
    binary: Path, models: tuple[Path, Path], flag: list[str], message: str
) -> None:
    target, _ = models
    code, out = run_llama_server_to_exit(["-m", "{model}", "-c", "512", *flag], model=target)
    assert code != 0, out
    assert message in out, out[-3000:]


def test_quantized_v_cache_needs_flash_attention(binary: Path, models: tuple[Path, Path]) -> None:
    """-ctv q8_0 boots with the default `-fa auto` (CPU supports it) and is fatal with `-fa off`."""
    target, _ = models
    args = ["-m", "{model}", "-c", "512", "-ctv", "q8_0", "-fa", "off"]
    code, out = run_llama_server_to_exit(args, model=target)
    assert code != 0
    assert "quantized V cache requires flash_attn to be enabled" in out, out[-3000:]


def test_env_vars_are_passed(binary: Path, models: tuple[Path, Path]) -> None:
    target, _ = models
    env = {"LLAMA_ARG_N_PARALLEL": "3"}
    with start_llama_server(["-m", "{model}", "-c", "1024"], env, model=target) as srv:
        assert len(srv.get_json("/slots")) == 3


def test_llama_bench_runs_on_the_tiny_model(binary: Path, models: tuple[Path, Path]) -> None:
    target, _ = models
    res = subprocess.run(
        [str(llama_bench_bin()), "-m", str(target), "-p", "32", "-n", "8", "-r", "1", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.loads(res.stdout)
    assert {r["n_prompt"] for r in rows} == {0, 32}
    assert all(r["build_number"] == int(llama_cpp_pins()["LLAMA_CPP_BUILD"]) for r in rows)
