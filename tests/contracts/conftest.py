"""Shared fixtures for the engine contract tests.

Heavy prerequisites (the llama-server build, the vLLM venv) live in $IB_CACHE and are created by
`make contracts`. Without them the tests that need them skip, unless IB_REQUIRE_CONTRACTS=1 (set by
`make contracts`), in which case they fail: a contract run must never pass by skipping.
"""

from __future__ import annotations

import os

import pytest


def require(condition: bool, why: str) -> None:
    """Skip (or fail under IB_REQUIRE_CONTRACTS=1) when a heavy prerequisite is missing."""
    if condition:
        return
    if os.environ.get("IB_REQUIRE_CONTRACTS") == "1":
        pytest.fail(f"IB_REQUIRE_CONTRACTS=1 but {why}", pytrace=False)
    pytest.skip(why)
