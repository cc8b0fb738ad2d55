"""The shape of the operator package (the import layers themselves are import-linter's, in `make lint`): one module
calls the API during a reconcile, control modules stay short, and the README's layer list names every module."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
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


def test_the_formatter_owns_the_layout() -> None:
    """No line overrules ruff format (a data table that must stay aligned says so with a ``# fmt: off`` block)."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    marked = [
        f"{path}:{i}"
        for path in tracked.stdout.split()
        if (ROOT / path).exists()
        for i, line in enumerate((ROOT / path).read_text().splitlines(), 1)
        if line.rstrip().endswith("# fmt: skip")
    ]
    assert marked == []


MAX_FUNCTION_LINES = 80
"""A longer function is split by role (CONTRIBUTING.md, "Functions stay under 80 lines")."""


def _long_functions(package: Path) -> list[str]:
    """``file:name (N lines)`` for each function of ``package`` longer than MAX_FUNCTION_LINES, from its ``def`` line
    to its last (docstring included, decorators not); the runners' subpackages aside (checked in their own
    environment)."""
    long = []
    for path in sorted(package.rglob("*.py")):
        if "runners" in path.relative_to(package).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(package).as_posix()}:{node.name} ({lines} lines)")
    return long


def test_functions_are_at_most_80_lines() -> None:
    assert _long_functions(PACKAGE) == [], f"over {MAX_FUNCTION_LINES} lines: split by role"


def test_the_function_length_check_reports_each_long_function(tmp_path: Path) -> None:
    """Methods, async and nested functions count, signature to last line; 80 lines pass, 81 do not; runners/ is
    left out."""

    def body(n: int, indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(n))

    pkg = tmp_path / "pkg"
    (pkg / "runners").mkdir(parents=True)
    (pkg / "mod.py").write_text(
        "def fits():\n"
        + body(79, "    ")
        + "class C:\n    async def long(self):\n"
        + body(80, "        ")
        + "def outer():\n    def inner():\n"
        + body(80, "        ")
        + "    return inner\n"
    )
    (pkg / "runners" / "r.py").write_text("def runner():\n" + body(100, "    "))
    assert sorted(_long_functions(pkg)) == [
        "mod.py:inner (81 lines)",
        "mod.py:long (81 lines)",
        "mod.py:outer (83 lines)",
    ]


def test_every_name_imported_from_the_package_exists() -> None:
    """e2e/, bench/, hack/ and testkit/ import names of inference_backend and ib_testkit that the unit tests never
    import: a module moved or a name dropped must not break them unnoticed (modules that need the runners'
    environment, torch and the like, are left to it)."""
    missing = []
    for path in sorted(p for d in ("e2e", "bench", "hack", "testkit") for p in (ROOT / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                continue
            if not node.module.startswith(("inference_backend", "ib_testkit")):
                continue
            try:
                module = importlib.import_module(node.module)
            except ModuleNotFoundError as exc:
                if (exc.name or "").startswith(("inference_backend", "ib_testkit")):
                    missing.append(f"{path.relative_to(ROOT)}: {node.module}")
                continue  # an optional dependency of that module
            for alias in node.names:
                if not hasattr(module, alias.name) and importlib.util.find_spec(f"{node.module}.{alias.name}") is None:
                    missing.append(f"{path.relative_to(ROOT)}: {node.module}.{alias.name}")
    assert missing == []
