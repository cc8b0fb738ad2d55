"""Golden files: every tests/data/input/*.yaml renders to tests/data/output/*.yaml. UPDATE_GOLDEN=1 rewrites."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from golden import INPUTS, OUTPUTS, decide, render_text

CASES = sorted(INPUTS.glob("*.yaml"))


def test_enough_cases() -> None:
    assert len(CASES) >= 20
    engines = {p.name.split("-", 1)[0] for p in CASES}
    assert engines == {"vllm", "tgi", "llamacpp", "onnxruntime", "pytorch"}


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden(path: Path) -> None:
    _, decision = decide(path)
    assert decision.backend == path.name.split("-", 1)[0], "the file name starts with the engine it must pick"
    text = render_text(path)
    out = OUTPUTS / path.name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        out.write_text(text)
    assert out.exists(), f"{out} missing: run UPDATE_GOLDEN=1 pytest tests/test_golden.py"
    assert text == out.read_text(), f"{path.name} renders differently from {out.name} (UPDATE_GOLDEN=1 to accept)"
