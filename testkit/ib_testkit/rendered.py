"""Real renderer output for the contract tests: spec + nodes (ib_testkit.factories) -> select -> engine container.

No argument list in the contract tests is written by hand: each comes from ``render_case`` (or from the golden
outputs, tests/data/output/*.yaml), so a renderer change is what the engines see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from inference_backend.api import InferenceBackendSpec
from inference_backend.api.model import ModelSpec
from inference_backend.engines import ENGINES
from inference_backend.engines.base import EngineContainer
from inference_backend.selection import Decision, select

from ib_testkit import ROOT
from ib_testkit.factories import MODELS, cluster, spec

GOLDEN_OUTPUTS = ROOT / "tests" / "data" / "output"


@dataclass(frozen=True)
class Rendered:
    spec: InferenceBackendSpec
    decision: Decision
    container: EngineContainer

    @property
    def args(self) -> list[str]:
        return list(self.container.args)

    @property
    def env(self) -> dict[str, str]:
        return {str(e["name"]): str(e.get("value", "")) for e in self.container.env}


def render_case(
    body: Mapping[str, Any],
    *nodes: dict[str, Any],
    models: Mapping[str, ModelSpec] = MODELS,
    name: str = "ib",
    engine: str | None = None,
) -> Rendered:
    """Select for ``body`` (an InferenceBackend spec as in YAML) on ``nodes`` and render its engine container."""
    s = spec(**body)
    decision = select(s, cluster(*nodes), models)
    assert decision.satisfiable, f"not satisfiable: {decision.reasons[-1]}"
    assert decision.backend is not None
    if engine is not None:
        assert decision.backend == engine, f"selected {decision.backend}, expected {engine}: {decision.reasons}"
    return Rendered(s, decision, ENGINES[decision.backend](decision, s, name))


def golden_containers() -> list[tuple[str, str, dict[str, Any]]]:
    """(output file stem, engine, container dict) of every engine container in tests/data/output/*.yaml."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for path in sorted(GOLDEN_OUTPUTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(doc, dict) or doc.get("kind") not in ("Deployment", "LeaderWorkerSet", "StatefulSet"):
                continue
            pod = doc["spec"]["template"]["spec"]
            for c in pod["containers"]:
                if c["name"] in ENGINES:
                    out.append((path.stem, c["name"], c))
    return out
