"""Render a golden input (tests/data/input/*.yaml) exactly as `inference-backend render` does.

An input is one InferenceBackend (plus optional Models); header comments name the node list and extra model
files, relative to the repository root:
    # nodes: docs/examples/nodes/mixed.yaml
    # models: docs/examples/models.yaml
"""

from __future__ import annotations

from pathlib import Path

from inference_backend.facts import group_nodes
from inference_backend.manifests import load, registry
from inference_backend.render import render_result, to_yaml
from inference_backend.selection import Decision, select

from ib_testkit import ROOT

INPUTS = ROOT / "tests" / "data" / "input"
OUTPUTS = ROOT / "tests" / "data" / "output"


def header(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line.lstrip("# ").partition(":")
        if sep and key in ("nodes", "models"):
            out.setdefault(key, []).append(value.strip())
    return out


def decide(path: Path) -> tuple[object, Decision]:
    h = header(path)
    ibs, models, _ = load(path)
    for extra in h.get("models", []):
        models += load(ROOT / extra)[1]
    nodes = load(ROOT / h["nodes"][0])[2]
    ib = ibs[0]
    return ib, select(ib.spec, group_nodes(nodes), registry(models, ib.metadata.namespace or "default"))


def render_text(path: Path) -> str:
    ib, decision = decide(path)
    assert decision.satisfiable, f"{path.name}: not satisfiable: {decision.reasons[-1]}"
    result = render_result(ib, decision)  # type: ignore[arg-type]
    h = header(path)
    lines = [f"# rendered from tests/data/input/{path.name} on {h['nodes'][0]}: backend {decision.backend}"]
    lines += [f"# unsupported: {u}" for u in result.unsupported]
    return "\n".join(lines) + "\n" + to_yaml(list(result.objects))
