"""The shape of the operator package (the import layers themselves are import-linter's, in `make lint`): one module
calls the API during a reconcile, control modules stay short, and the README's layer list names every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "operator" / "inference_backend"
CONTROLLER = PACKAGE / "controller"
WRITES = {"apply", "hand_off_replicas", "delete", "foreign", "patch_status", "event", "create", "patch", "replace"}
"""The Writer's calls, and the API client's that write."""
CALLERS = {"execute.py", "kube.py"}
"""execute: the one module calling the API during a reconcile; kube: the client itself."""


def _api_calls(path: Path) -> list[str]:
    """``x.apply(...)`` and the like where ``x`` is a writer, the Kube client or a lightkube client."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            receiver = ast.unparse(node.func.value)
            if re.search(r"writer|kube|client", receiver, re.IGNORECASE):
                out.append(f"{path.name}:{node.lineno} {receiver}.{node.func.attr}")
    return out


def test_one_module_calls_the_api_during_a_reconcile() -> None:
    calls = {p.name: _api_calls(p) for p in sorted(CONTROLLER.glob("*.py"))}
    assert calls["execute.py"], "the scan finds the executor's calls"
    elsewhere = [c for name, found in calls.items() if name not in CALLERS for c in found]
    assert elsewhere == [], f"only controller/execute.py calls the API during a reconcile: {elsewhere}"


def test_control_modules_are_at_most_400_lines() -> None:
    long = {p.name: n for p in CONTROLLER.glob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def test_the_readme_layer_list_names_every_module() -> None:
    text = (ROOT / "README.md").read_text()
    design = text[text.index("## Design") : text.index("**Kubernetes client: lightkube.**")]
    named = set(re.findall(r"`([a-z_]+)/?`", design))
    tops = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    tops |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    control = {p.stem for p in CONTROLLER.glob("*.py") if p.stem != "__init__"}
    assert sorted((tops | control) - named) == []
