"""bench/profiles_7b.py's server command lines: a comparison variant's flags replace the defaults (one value each)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnxruntime_genai")  # runners venv only; IB_REQUIRE_RUNNERS=1 turns this skip into a failure

from bench import profiles_7b


def test_a_variant_replaces_the_default_batching() -> None:
    argv, _ = profiles_7b._argv("onnxruntime", Path("m"), 2, [])
    assert argv.count("--batching") == 1 and argv[argv.index("--batching") + 1] == "continuous"  # the card's CPU auto
    argv, _ = profiles_7b._argv("onnxruntime", Path("m"), 2, profiles_7b.VARIANTS["onnx-int4-generator"])
    assert argv.count("--batching") == 1 and argv[argv.index("--batching") + 1] == "dynamic"
    assert argv[argv.index("--genai-runtime") + 1] == "genai"
