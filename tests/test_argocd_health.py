"""The Argo CD health check, run by real Lua 5.1 (lupa) over status fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

lupa = pytest.importorskip("lupa.lua51")
SCRIPT = (Path(__file__).resolve().parents[1] / "charts/inference-backend/files/argocd-health.lua").read_text()


def health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    assert lua.eval("_VERSION") == "Lua 5.1"
    check = lua.eval(f"function(obj)\n{SCRIPT}\nend")
    hs = check(lua.table_from(obj, recursive=True))
    return hs["status"], hs["message"]


def ib(generation: int = 1, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x", "generation": generation}, "status": status or None}


def cond(kind: str, ok: str, message: str = "") -> dict[str, str]:
    return {"type": kind, "status": ok, "reason": "R", "message": message}


@pytest.mark.parametrize(
    ("obj", "expected", "message"),
    [
        (ib(), "Progressing", "Waiting for the inference-backend operator"),
        (ib(2, observedGeneration=1, phase="Ready", conditions=[cond("Ready", "True")]), "Progressing", "generation 2"),
        (
            ib(
                1,
                observedGeneration=1,
                phase="Ready",
                backend="vllm",
                conditions=[cond("BackendSelected", "True"), cond("Ready", "True", "1/1 replicas ready")],
            ),
            "Healthy",
            "vllm: 1/1 replicas ready",
        ),
        (
            ib(
                1,
                observedGeneration=1,
                phase="Deploying",
                conditions=[cond("BackendSelected", "True"), cond("Ready", "False", "0/1 replicas ready")],
            ),
            "Progressing",
            "0/1 replicas ready",
        ),
        (
            ib(
                1,
                observedGeneration=1,
                phase="Failed",
                conditions=[cond("BackendSelected", "False", "spec.model.parameters: needed"), cond("Ready", "False")],
            ),
            "Degraded",
            "spec.model.parameters: needed",
        ),
        (
            ib(
                3,
                observedGeneration=3,
                phase="Degraded",
                backend="vllm",
                conditions=[
                    cond("BackendSelected", "False", "no engine has a placement that fits"),
                    cond("Ready", "True", "the previous Deployment keeps serving"),
                ],
            ),
            "Degraded",
            "no engine has a placement that fits",
        ),
        (
            ib(
                1,
                observedGeneration=1,
                phase="Degraded",
                conditions=[cond("BackendSelected", "True"), cond("Ready", "False", "rollout exceeded its deadline")],
            ),
            "Degraded",
            "rollout exceeded its deadline",
        ),
    ],
)
def test_health(obj: dict[str, Any], expected: str, message: str) -> None:
    status, text = health(obj)
    assert status == expected
    assert message in text
