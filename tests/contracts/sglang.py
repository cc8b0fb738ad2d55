"""Check `python -m sglang.launch_server` args against the real SGLang (pinned version) without a GPU or a model.

``parse_sglang_args(args)`` runs hack/sglang_parse_args.py with the python of the SGLang venv built by
hack/sglang-venv ($IB_CACHE/venv-sglang-<version>): SGLang's own prepare_server_args (its argparse
parser), then ServerArgs.resolve_once (the resolution pipeline) and check_server_args, against a
config-only stand-in for a model that is not a local directory. Returns the parsed and resolved values
or raises SglangArgsRejected with SGLang's error. Without the venv it skips (fails under
IB_REQUIRE_CONTRACTS=1).
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
HARNESS = ROOT / "hack" / "sglang_parse_args.py"
SGLANG_VERSION = "0.5.23"
MARK = "@@SGLANG_PARSE_ARGS@@"


class SglangArgsRejected(Exception):
    def __init__(self, args: Sequence[str], result: dict[str, Any]) -> None:
        super().__init__(f"sglang {SGLANG_VERSION} rejected {list(args)} at {result['stage']}: {result['error']}")
        self.args_ = list(args)
        self.stage: str = result["stage"]
        self.error: str = result["error"]
        self.returncode: int = result.get("returncode", 0)


def sglang_venv(version: str = SGLANG_VERSION) -> Path:
    cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
    return cache / f"venv-sglang-{version}"


def sglang_python(version: str = SGLANG_VERSION) -> Path:
    """The venv's python; skips (or fails under IB_REQUIRE_CONTRACTS=1) if the venv is not built."""
    venv = sglang_venv(version)
    require((venv / ".complete").exists(), f"SGLang {version} venv missing at {venv} (run hack/sglang-venv)")
    return venv / "bin" / "python"


def _run(payload: Any, timeout: float) -> list[dict[str, Any]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    proc = subprocess.run(
        [str(sglang_python()), str(HARNESS)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    results = [json.loads(line[len(MARK) :]) for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if not results:
        raise RuntimeError(f"sglang_parse_args.py crashed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    if len(results) == 1:
        results[0].setdefault("returncode", proc.returncode)
    return results


def parse_sglang_args(args: Sequence[str], *, timeout: float = 300) -> dict[str, Any]:
    """Parse, resolve and check ``args`` (what follows `python -m sglang.launch_server`) with SGLang itself.

    Returns {"args": raw parsed fields, "resolved": resolved fields, "stand_ins": {...},
    "sglang_version": ...}; raises SglangArgsRejected if SGLang rejects them.
    """
    (result,) = _run(list(args), timeout)
    if not result["ok"]:
        raise SglangArgsRejected(args, result)
    return result


def parse_sglang_args_many(
    arg_lists: Sequence[Sequence[str]], *, timeout: float = 600
) -> list[dict[str, Any] | SglangArgsRejected]:
    """Like parse_sglang_args for many lists in one SGLang import; rejections are returned, not raised."""
    results = _run([list(a) for a in arg_lists], timeout)
    out: list[dict[str, Any] | SglangArgsRejected] = []
    for args, result in zip(arg_lists, results, strict=True):
        out.append(result if result["ok"] else SglangArgsRejected(args, result))
    return out
