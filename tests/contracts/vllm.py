"""Check `vllm serve` args against the real vLLM (pinned version) without a GPU or a model.

``parse_vllm_args(args)`` runs hack/vllm_parse_args.py with the python of the vLLM venv built by
hack/vllm-venv ($IB_CACHE/venv-vllm-<version>): vLLM's own `vllm serve` parser and validation, then
AsyncEngineArgs.from_cli_args and the no-model config checks. Returns the parsed result or raises
VllmArgsRejected with vLLM's error. Without the venv it skips (fails under IB_REQUIRE_CONTRACTS=1).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.contracts.conftest import require

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "hack" / "vllm_parse_args.py"
VLLM_VERSION = "0.33.0"
MARK = "@@VLLM_PARSE_ARGS@@"


class VllmArgsRejected(Exception):
    def __init__(self, args: Sequence[str], result: dict[str, Any]) -> None:
        super().__init__(f"vllm {VLLM_VERSION} rejected {list(args)} at {result['stage']}: {result['error']}")
        self.args_ = list(args)
        self.stage: str = result["stage"]
        self.error: str = result["error"]
        self.returncode: int = result.get("returncode", 0)


def vllm_venv(version: str = VLLM_VERSION) -> Path:
    cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
    return cache / f"venv-vllm-{version}"


def vllm_python(version: str = VLLM_VERSION) -> Path:
    """The venv's python; skips (or fails under IB_REQUIRE_CONTRACTS=1) if the venv is not built."""
    venv = vllm_venv(version)
    require((venv / ".complete").exists(), f"vLLM {version} venv missing at {venv} (run hack/vllm-venv)")
    return venv / "bin" / "python"


def _run(payload: Any, timeout: float) -> list[dict[str, Any]]:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    proc = subprocess.run(
        [str(vllm_python()), str(HARNESS)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    results = [json.loads(line[len(MARK) :]) for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if not results:
        raise RuntimeError(f"vllm_parse_args.py crashed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    if len(results) == 1:
        results[0].setdefault("returncode", proc.returncode)
    return results


def parse_vllm_args(args: Sequence[str], *, timeout: float = 600) -> dict[str, Any]:
    """Parse/validate ``args`` (what follows `vllm serve`) with vLLM itself.

    Returns {"args": namespace, "engine_args": AsyncEngineArgs fields, "checks": {...},
    "vllm_version": ...}; raises VllmArgsRejected if vLLM rejects them.
    """
    (result,) = _run(list(args), timeout)
    if not result["ok"]:
        raise VllmArgsRejected(args, result)
    return result


def parse_vllm_args_many(
    arg_lists: Sequence[Sequence[str]], *, timeout: float = 900
) -> list[dict[str, Any] | VllmArgsRejected]:
    """Like parse_vllm_args for many lists in one vLLM process; rejections are returned, not raised."""
    results = _run([list(a) for a in arg_lists], timeout)
    out: list[dict[str, Any] | VllmArgsRejected] = []
    for args, result in zip(arg_lists, results, strict=True):
        out.append(result if result["ok"] else VllmArgsRejected(args, result))
    return out
