"""Run an engine's own argument parser, in that engine's cached venv, on rendered args (no GPU, no model).

One harness script per engine (hack/<engine>_parse_args.py) reads a JSON case (a list of args) or a list of cases
on stdin and prints one ``<MARK> <json>`` line per case: {"ok": true, ...} or {"ok": false, "stage", "error"}.
tests/contracts/vllm.py and sglang.py are this class with their engine's venv, script, marker and environment.
Without the venv the tests skip (fail under IB_REQUIRE_CONTRACTS=1).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from tests.contracts.conftest import require

ROOT = Path(__file__).resolve().parents[2]


class ArgsRejected(Exception):
    """The engine refused the args; ``stage`` says where (parse, or a later check), ``error`` its message."""

    label = "engine"

    def __init__(self, args: Sequence[str], result: dict[str, Any]) -> None:
        super().__init__(f"{self.label} rejected {list(args)} at {result['stage']}: {result['error']}")
        self.args_ = list(args)
        self.stage: str = result["stage"]
        self.error: str = result["error"]
        self.returncode: int = result.get("returncode", 0)


R = TypeVar("R", bound=ArgsRejected)


class ParserHarness(Generic[R]):
    def __init__(
        self, *, engine: str, version: str, script: str, mark: str, env: Mapping[str, str], rejected: type[R]
    ) -> None:
        self.engine, self.version, self.mark, self.env, self.rejected = engine, version, mark, dict(env), rejected
        self.script = ROOT / "hack" / script

    def venv(self) -> Path:
        cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
        return cache / f"venv-{self.engine}-{self.version}"

    def python(self) -> Path:
        """The venv's python; skips (or fails under IB_REQUIRE_CONTRACTS=1) if the venv is not built."""
        venv = self.venv()
        require(
            (venv / ".complete").exists(),
            f"{self.engine} {self.version} venv missing at {venv} (run hack/{self.engine}-venv)",
        )
        return venv / "bin" / "python"

    def run(self, payload: Any, timeout: float) -> list[dict[str, Any]]:
        proc = subprocess.run(
            [str(self.python()), str(self.script)],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **self.env},
            cwd=ROOT,
        )
        n = len(self.mark)
        results = [json.loads(line[n:]) for line in proc.stdout.splitlines() if line.startswith(self.mark)]
        if not results:
            raise RuntimeError(f"{self.script.name} crashed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        if len(results) == 1:
            results[0].setdefault("returncode", proc.returncode)
        return results

    def parse(self, args: Sequence[str], timeout: float) -> dict[str, Any]:
        (result,) = self.run(list(args), timeout)
        if not result["ok"]:
            raise self.rejected(args, result)
        return result

    def parse_many(self, arg_lists: Sequence[Sequence[str]], timeout: float) -> list[dict[str, Any] | R]:
        """Many arg lists in one process of the engine; rejections are returned, not raised."""
        results = self.run([list(a) for a in arg_lists], timeout)
        return [r if r["ok"] else self.rejected(a, r) for a, r in zip(arg_lists, results, strict=True)]
