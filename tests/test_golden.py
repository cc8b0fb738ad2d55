"""Golden files: every tests/data/input/*.yaml renders to tests/data/output/*.yaml. UPDATE_GOLDEN=1 rewrites."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ib_testkit.golden import INPUTS, OUTPUTS, decide, render_text
from inference_backend.engines import NAMES

CASES = sorted(INPUTS.glob("*.yaml"))


def test_enough_cases() -> None:
    assert len(CASES) >= 20
    engines = {p.name.split("-", 1)[0] for p in CASES}
    assert engines == set(NAMES), "every registered engine has golden files"


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


def test_readme_engine_examples_are_current() -> None:
    """README.md shows, per engine, a spec beside its rendered container; it must match what render produces."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "hack/engines_doc_example.py"
    loader = importlib.util.spec_from_file_location("engines_doc_example", path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    readme = (path.parents[1] / "README.md").read_text()
    assert module.README_BEGIN + "\n" + module.readme_section() + "\n" + module.README_END in readme, (
        "README.md engine examples are stale: run .venv/bin/python hack/engines_doc_example.py --readme"
    )
