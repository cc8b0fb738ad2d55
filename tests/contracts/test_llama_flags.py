"""Fast checks of the committed llama-server flag list (no binary needed), plus its freshness (slow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ib_testkit.llama_server import llama_server_bin

from tests.contracts.conftest import require
from tests.contracts.llama_flags import check_llama_server_args, llama_server_flags
from tests.contracts.test_llama_server_harness import RENDERED

ROOT = Path(__file__).resolve().parents[2]


def test_rendered_args_use_existing_flags() -> None:
    assert check_llama_server_args(RENDERED) == []


def test_flag_names_of_this_build() -> None:
    flags = llama_server_flags()
    assert flags["-md"] is flags["--model-draft"] is flags["--spec-draft-model"]
    assert flags["-cb"] is flags["--no-cont-batching"]
    assert flags["-np"].env == "LLAMA_ARG_N_PARALLEL"
    assert "draft-simple" in (flags["--spec-type"].value_hint or "")
    assert flags["--metrics"].value_hint is None
    for removed in ("--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min"):
        assert flags[removed].removed, removed
    assert not flags["--spec-draft-n-max"].removed


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--draft-max", "8"], "has been removed"),
        (["--swap-space", "4"], "invalid argument: --swap-space"),
        (["--port"], "expected value"),
        (["-c", "2048", "--n-gpu-layer", "99"], "invalid argument: --n-gpu-layer"),
    ],
)
def test_bad_args_are_reported(args: list[str], needle: str) -> None:
    assert any(needle in e for e in check_llama_server_args(args))


def test_underscores_in_long_flags_are_accepted() -> None:
    assert check_llama_server_args(["--ctx_size", "512", "--cache_reuse", "64"]) == []


@pytest.mark.slow
def test_flag_list_matches_the_binary() -> None:
    require(llama_server_bin().exists(), f"{llama_server_bin()} missing (run hack/build-llama-server)")
    res = subprocess.run(
        [sys.executable, str(ROOT / "hack/llama_server_flags.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
