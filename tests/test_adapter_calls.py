"""LoRA adapters loaded and unloaded on the serving replicas while they serve: the pure plan
(controller.adapters.adapter_calls, a table), the adapters a replica serves read from its /v1/models in vLLM's shape
(status.served_adapters), and the executor (controller.execute.replicas and call_engines) against a real PyTorch
runner process started with VLLM_ALLOW_RUNTIME_LORA_UPDATING (it needs the runners venv: torch, peft)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ib_testkit import ROOT, free_port
from inference_backend.controller.adapters import LOAD_ADAPTER, UNLOAD_ADAPTER, EngineCall, adapter_calls
from inference_backend.controller.engine_http import EngineHttp
from inference_backend.controller.execute import call_engines, replicas
from inference_backend.status import Replica, adapters_entry, served_adapters

A, B = "/adapters/a", "/adapters/b"


def _r(pod: str, **adapters: str) -> Replica:
    return Replica(pod, f"http://{pod}:8000", adapters)


def _calls(wanted: dict[str, str], *reps: Replica) -> list[tuple[str, str, dict[str, Any]]]:
    return [(c.pod, c.path, c.body) for c in adapter_calls(wanted, reps)]


@pytest.mark.parametrize(
    ("wanted", "served", "calls"),
    [
        # nothing to do: every replica serves what is wanted, from the wanted path
        ({"a": A}, {"p0": {"a": A}, "p1": {"a": A}}, []),
        ({}, {"p0": {}}, []),
        # an adapter added to spec.adapters: loaded on every replica that lacks it
        (
            {"a": A, "b": B},
            {"p1": {"a": A}, "p0": {"a": A, "b": B}},
            [("p1", LOAD_ADAPTER, {"lora_name": "b", "lora_path": B})],
        ),
        # one removed: unloaded where served
        ({}, {"p0": {"a": A}}, [("p0", UNLOAD_ADAPTER, {"lora_name": "a"})]),
        # a new replica (nothing loaded): every adapter, in name order
        (
            {"b": B, "a": A},
            {"p0": {}},
            [
                ("p0", LOAD_ADAPTER, {"lora_name": "a", "lora_path": A}),
                ("p0", LOAD_ADAPTER, {"lora_name": "b", "lora_path": B}),
            ],
        ),
        # its uri changed: loaded in place
        ({"a": B}, {"p0": {"a": A}}, [("p0", LOAD_ADAPTER, {"lora_name": "a", "lora_path": B, "load_inplace": True})]),
        # replaced: the unload first (it frees the engine's slot), pods in name order
        (
            {"b": B},
            {"p1": {"a": A}, "p0": {"b": B}},
            [("p1", UNLOAD_ADAPTER, {"lora_name": "a"}), ("p1", LOAD_ADAPTER, {"lora_name": "b", "lora_path": B})],
        ),
    ],
)
def test_adapter_calls(
    wanted: dict[str, str], served: dict[str, dict[str, str]], calls: list[tuple[str, str, dict[str, Any]]]
) -> None:
    assert _calls(wanted, *(_r(pod, **a) for pod, a in served.items())) == calls
    assert all(c.url == f"http://{c.pod}:8000" for c in adapter_calls(wanted, [_r(p, **a) for p, a in served.items()]))


def test_served_adapters_read_vllm_and_runner_model_lists() -> None:
    # vLLM 0.33.0's /v1/models with two adapters (show_available_models: root the path, parent the base)
    vllm = {
        "object": "list",
        "data": [
            {"id": "llama", "object": "model", "root": "/models/llama", "parent": None, "max_model_len": 8192},
            {"id": "sql", "object": "model", "root": "/adapters/sql", "parent": "llama"},
            {"id": "poems", "object": "model", "root": "/adapters/poems", "parent": "llama"},
        ],
    }
    assert served_adapters(vllm, "llama") == {"sql": "/adapters/sql", "poems": "/adapters/poems"}
    assert served_adapters({"data": []}, "llama") == {}
    assert served_adapters({"data": [{"id": "other", "parent": "x"}]}, "llama") == {}
    entry = adapters_entry([_r("p1", b=B), _r("p0", b=B, a=A)])
    assert entry == [{"pod": "p0", "adapters": ["a", "b"]}, {"pod": "p1", "adapters": ["b"]}]


# ---- the executor against a real runner ---------------------------------------------------------------------------


def _runners_python() -> Path:
    req = ROOT / "hack" / "runners-requirements.txt"
    cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
    venv = cache / f"venv-runners-{hashlib.sha256(req.read_bytes()).hexdigest()[:12]}"
    if not (venv / ".installed").exists():
        pytest.skip(f"no runners venv at {venv} (hack/runners-venv)")
    return venv / "bin" / "python"


MAKE = """
import sys
from pathlib import Path
from inference_backend.runners.tiny import make_model
from ib_testkit.lora import make_adapter
root = Path(sys.argv[1])
base = make_model(root / "base", layers=2, seed=0)
make_adapter(base, root / "sql", 1, 4, ["q_proj", "v_proj"])
make_adapter(base, root / "poems", 2, 8, ["q_proj", "v_proj", "o_proj"])
"""


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    python = _runners_python()
    root = tmp_path_factory.mktemp("runner-lora")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT / 'testkit'}"}
    subprocess.run([str(python), "-c", MAKE, str(root)], env=env, check=True, capture_output=True, timeout=600)
    port = free_port()
    args = ["--model", str(root / "base"), "--served-model-name", "tiny", "--adapter", f"sql={root / 'sql'}"]
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "true"
    log = (root / "runner.log").open("w")
    proc = subprocess.Popen(
        [str(python), "-m", "inference_backend.runners.pytorch", *args, "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.3)
        else:
            raise RuntimeError((root / "runner.log").read_text()[-3000:])
        yield url, root
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_executor_brings_a_real_runner_to_the_wanted_adapters(runner: tuple[str, Path]) -> None:
    url, root = runner
    sql, poems = str(root / "sql"), str(root / "poems")
    engines = EngineHttp()

    async def served() -> list[Replica]:
        return await replicas([("pod-0", url), ("gone", "http://127.0.0.1:1")], "tiny", engines)

    async def converge(wanted: dict[str, str]) -> tuple[list[EngineCall], list[str]]:
        calls = list(adapter_calls(wanted, await served()))
        return calls, await call_engines(calls, engines)

    now = asyncio.run(served())
    assert now == [Replica("pod-0", url, {"sql": sql})]  # the pod that does not answer is left out
    # spec.adapters went from [sql] to [poems]: sql unloaded, poems loaded, no restart
    calls, failed = asyncio.run(converge({"poems": poems}))
    assert [(c.path, c.body["lora_name"]) for c in calls] == [(UNLOAD_ADAPTER, "sql"), (LOAD_ADAPTER, "poems")]
    assert failed == [] and asyncio.run(served())[0].adapters == {"poems": poems}
    assert asyncio.run(converge({"poems": poems})) == ([], [])  # converged: nothing more to do
    # its uri changed: loaded in place from the new path
    calls, failed = asyncio.run(converge({"poems": sql}))
    assert [c.body.get("load_inplace") for c in calls] == [True] and failed == []
    assert asyncio.run(served())[0].adapters == {"poems": sql}
    body = json.dumps({"model": "poems", "prompt": [1, 5, 9], "max_tokens": 3}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as reply:
        assert json.loads(reply.read())["model"] == "poems"
    # a path the engine cannot load: reported, one line naming the pod and the adapter, nothing else changed
    calls, failed = asyncio.run(converge({"poems": sql, "bad": str(root / "nowhere")}))
    assert len(failed) == 1 and failed[0].startswith("pod-0: /v1/load_lora_adapter bad: 400"), failed
    assert asyncio.run(served())[0].adapters == {"poems": sql}
