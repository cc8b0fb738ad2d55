"""docs/troubleshooting.md names every condition and Event reason the operator sets, so it cannot drift.

The reasons are read from the operator's source by their call sites (not from a list kept by hand): the reason
argument of `_condition`, `_pod_condition`, `PodProblem`, `ReconcileFailure` and `kube.event`, the CamelCase strings
assigned to a variable named `reason`, and the `(bool, "Reason", message)` tuples condition helpers return.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "operator/inference_backend"
DOC = ROOT / "docs/troubleshooting.md"
CAMEL = re.compile(r"^(?=.*[a-z])[A-Z][A-Za-z]+$")  # OOMKilled, CRDMissing, InvalidSpec
# call name -> index of its reason argument
REASON_ARG = {"_condition": 2, "_pod_condition": 1, "PodProblem": 0, "ReconcileFailure": 0, "event": 2, "Event": 1}


def _strings(node: ast.AST) -> set[str]:
    return {
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and CAMEL.match(n.value)
    }


def operator_reasons() -> dict[str, str]:
    """Every reason string the operator writes, with the file:line of one place that writes it."""
    found: dict[str, str] = {}
    for path in sorted([*PACKAGE.glob("*.py"), *PACKAGE.glob("controller/*.py")]):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            hits: set[str] = set()
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                index = REASON_ARG.get(name)
                if index is not None and len(node.args) > index:
                    arg = node.args[index]
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and CAMEL.match(arg.value):
                        hits.add(arg.value)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "reason" for t in node.targets):
                hits |= _strings(node.value)
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 3:
                first, second = node.value.elts[0], node.value.elts[1]
                if isinstance(first, ast.Constant) and isinstance(first.value, bool):
                    hits |= _strings(second)
            for reason in hits:
                found.setdefault(reason, f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")
    return found


def test_the_extractor_finds_the_reasons_it_must() -> None:
    reasons = operator_reasons()
    for known in (
        "InsufficientCapacity",
        "Unschedulable",
        "ImagePullBackOff",
        "CrashLoopBackOff",
        "OOMKilled",
        "ChildConflict",
        "InvalidSpec",
        "Unsatisfiable",
        "CRDMissing",
        "ProgressDeadlineExceeded",
        "ScalerMissing",
        "NotRequested",
        "Selected",
        "ReconcileError",
    ):
        assert known in reasons, known


def test_every_reason_is_documented() -> None:
    doc = DOC.read_text()
    missing = {r: where for r, where in operator_reasons().items() if f"`{r}`" not in doc}
    assert not missing, f"reasons the operator sets that docs/troubleshooting.md does not name: {missing}"
