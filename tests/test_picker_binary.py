"""The endpoint picker's configuration (picker.py) as the real picker reads it: the epp binary that e2e/build-picker
builds (cmd/epp of the Inference Extension v1.5.0) started with each engine's --config-text, with and without
adapters. It decodes the EndpointPickerConfig strictly (an unknown field fails its start), instantiates every plugin
(the scorers, the metrics source, the extractor with the engine's metric names: an unparsable metric spec fails it)
and logs that the configuration loaded, before it reaches for the API server: here an address where none listens,
so it stops right after (the e2e tests run it against a real one)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from inference_backend import picker, routing
from inference_backend.decision import NO_ADAPTERS, Adapters, Decision, ResolvedAdapter
from inference_backend.engines import REGISTRY
from inference_backend.engines.card import EngineCard

CACHE = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
EPP = CACHE / "bin" / f"epp-{routing.PICKER_VERSION}"
NOWHERE = """apiVersion: v1
kind: Config
clusters: [{name: nowhere, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: nowhere, user: {token: none}}]
contexts: [{name: nowhere, context: {cluster: nowhere, user: nowhere}}]
current-context: nowhere
"""
ADAPTER = Adapters((ResolvedAdapter("sql", "hf://acme/sql-lora", 16),), 16)
CASES = [(c, a) for c in REGISTRY for a in (NO_ADAPTERS, ADAPTER) if c.lora.serves or not a.items]


@pytest.fixture(scope="module")
def epp() -> Path:
    if not EPP.is_file():
        msg = f"{EPP} missing: run e2e/build-picker"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return EPP


@pytest.mark.parametrize(
    ("card", "adapters"), CASES, ids=[f"{c.name}{'-adapters' if a.items else ''}" for c, a in CASES]
)
def test_the_real_picker_loads_each_engines_configuration(
    epp: Path, card: EngineCard, adapters: Adapters, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(NOWHERE)
    decision = Decision(backend=card.name, reasons=(), prefix_cache=True, adapters=adapters)
    args = [str(epp), "--pool-name", "p", "--pool-namespace", "ns", "--tracing=false", "--enable-pprof=false"]
    args += ["--metrics-endpoint-auth=false", "--config-text", picker.config_text(card, decision)]
    res = subprocess.run(
        args,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = [json.loads(ln) for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("{")]
    said = [ln.get("msg") for ln in lines]
    assert "loaded configuration from file/text successfully" in said, (res.stdout + res.stderr)[-3000:]
    mapping = [ln for ln in lines if ln.get("msg") == "Registered engine mapping" and ln.get("engine") == card.name]
    assert mapping, "the extractor registered the engine's metric names"
    # it stopped where it needs the API server, not before
    assert res.returncode != 0 and "Failed to create controller manager" in said
