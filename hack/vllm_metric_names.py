"""Print the Prometheus metrics vLLM defines, as JSON on one line: {name: {"type", "buckets"}}.

Run with the python of the vLLM venv (hack/vllm-venv). Reads vLLM's own source without importing vLLM (which
would pull in torch): every `self._counter_cls/_gauge_cls/_histogram_cls(name="vllm:...")` call in
vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py, the `(name, doc)` lists the spec-decode counters
are built from, and each histogram's default buckets (the family it passes to `histogram_buckets`, whose values
come from executing vllm/v1/metrics/buckets.py, a module with no vLLM imports). Used by
tests/contracts/test_runner_metrics_contract.py.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import runpy
from pathlib import Path
from typing import Any

TYPES = {"_counter_cls": "counter", "_gauge_cls": "gauge", "_histogram_cls": "histogram"}


def _const(node: ast.AST | None) -> Any:
    return node.value if isinstance(node, ast.Constant) else None


def _families(tree: ast.AST) -> dict[str, str]:
    """variable name -> bucket family, from `x = histogram_buckets("family", ...)`."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Name) and func.id == "histogram_buckets" and node.value.args:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = _const(node.value.args[0])
    return out


def metrics(source: str, buckets: dict[str, Any]) -> dict[str, dict[str, Any]]:
    tree = ast.parse(source)
    families = _families(tree)
    found: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TYPES:
            kw = {k.arg: k.value for k in node.keywords}
            name = _const(kw.get("name"))
            if isinstance(name, str) and name.startswith("vllm:"):
                b = kw.get("buckets")
                family = families.get(b.id) if isinstance(b, ast.Name) else None
                found[name] = {"type": TYPES[node.func.attr], "buckets": buckets.get(family) if family else None}
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "counter_specs" for t in node.targets
        ):
            for elt in node.value.elts if isinstance(node.value, ast.List) else ():
                name = _const(elt.elts[0]) if isinstance(elt, ast.Tuple) else None
                if isinstance(name, str) and name.startswith("vllm:"):
                    found[name] = {"type": "counter", "buckets": None}
    return found


def main() -> None:
    spec = importlib.util.find_spec("vllm")  # locates the package; runs nothing of it
    assert spec is not None and spec.submodule_search_locations, "vllm is not installed in this python"
    root = Path(next(iter(spec.submodule_search_locations))) / "v1"
    defaults = runpy.run_path(str(root / "metrics" / "buckets.py"))["_STATIC_FAMILY_DEFAULTS"]
    buckets = {k: [float(x) for x in v] for k, v in defaults.items()}
    found: dict[str, dict[str, Any]] = {}
    for rel in ("metrics/loggers.py", "spec_decode/metrics.py"):
        found.update(metrics((root / rel).read_text(), buckets))
    print(json.dumps(found, sort_keys=True))


if __name__ == "__main__":
    main()
