"""Helpers shared by the tests, the benchmarks (bench/) and the hack/ scripts; not part of the product.

The distribution `inference-backend-testkit` (testkit/pyproject.toml) is installed in editable mode next to the
product by `make venv` and hack/runners-venv, so ``import ib_testkit`` works everywhere without path edits:

    factories      v1 Node dicts, specs, the model registry of the tests
    golden         render a golden input (tests/data/input) as `inference-backend render` does
    rendered       spec + nodes -> selection -> one engine's container (contract tests, bench/profile_render.py)
    runner_cases   representative specs for our runners, rendered, and their local mapping
    runners        start our runners as subprocesses and send them requests (tests/runners, bench/runners.py)
    llama_server   the cached llama-server build: paths, pins, start/stop with rendered args
    kwok_nodes     the fake KWOK node classes of the local control plane (e2e/nodes/*.yaml, bench/operator_scale.py)
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
"""The repository this package is used from (it is only ever installed editable, from testkit/)."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the servers the tests and benchmarks start listen there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
