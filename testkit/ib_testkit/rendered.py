"""Real renderer output for the contract tests: spec + nodes (ib_testkit.factories) -> select -> engine container.

No argument list in the contract tests is written by hand: each comes from ``render_case`` (or from the golden
outputs, tests/data/output/*.yaml), so a renderer change is what the engines see.
"""

from __future__ import annotations

import re
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


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(args: list[str], env: Mapping[str, str]) -> list[str]:
    """``$(VAR)`` references expanded from ``env`` as the kubelet expands a container's args (an unknown reference
    stays as written; ``$$`` escapes are not used by the renderer)."""
    return [_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), a) for a in args]


def lws_env(lws: Mapping[str, Any], worker_index: int, group: int = 0) -> dict[str, str]:
    """The variables LWS v0.7.0 sets on every container of a group (pkg/utils/pod/pod_utils.go AddLWSVariables):
    the leader's DNS name <lws>-<group>.<lws>.<namespace>, the group size and the pod's index in the group."""
    name, namespace = lws["metadata"]["name"], lws["metadata"].get("namespace", "default")
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    return {
        "LWS_LEADER_ADDRESS": f"{name}-{group}.{name}.{namespace}",
        "LWS_GROUP_SIZE": str(size),
        "LWS_WORKER_INDEX": str(worker_index),
    }


def golden_containers() -> list[tuple[str, str, dict[str, Any]]]:
    """(output file stem, engine, container dict) of every engine container in tests/data/output/*.yaml. A
    LeaderWorkerSet gives two, "<stem>:leader" and "<stem>:worker" (its last worker), their args expanded with the
    LWS variables as the kubelet would."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for path in sorted(GOLDEN_OUTPUTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(doc, dict) or doc.get("kind") not in ("Deployment", "LeaderWorkerSet"):
                continue
            if doc["kind"] == "LeaderWorkerSet":
                tpl = doc["spec"]["leaderWorkerTemplate"]
                roles = [("leader", tpl["leaderTemplate"], 0), ("worker", tpl["workerTemplate"], tpl["size"] - 1)]
                for role, pod, index in roles:
                    for c in pod["spec"]["containers"]:
                        if c["name"] in ENGINES:
                            args = expand([str(a) for a in c["args"]], lws_env(doc, index))
                            out.append((f"{path.stem}:{role}", c["name"], {**c, "args": args}))
                continue
            pod = doc["spec"]["template"]["spec"]
            for c in pod["containers"]:
                if c["name"] in ENGINES:
                    out.append((path.stem, c["name"], c))
    return out
