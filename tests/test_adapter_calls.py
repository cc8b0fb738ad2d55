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
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ib_testkit import ROOT, free_port
from inference_backend.controller.adapters import LOAD_ADAPTER, UNLOAD_ADAPTER, EngineCall, adapter_calls
from inference_backend.controller.engine_http import EngineHttp
from inference_backend.controller.execute import call_engines, replicas
from inference_backend.pods import summarize
from inference_backend.status import Replica, ServedAdapters, adapters_entry, served_adapters

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


@pytest.mark.parametrize(
    ("replicas", "overdue", "errors", "condition"),
    [
        ((), False, {}, (None, "NoReplica", "no ready replica has answered GET /v1/models yet")),
        (
            (_r("p0", a=A, b=B), _r("p1", a=A, b=B, old="/adapters/old")),
            False,
            {},
            (True, "Loaded", "every ready replica (2) serves the 2 adapter(s) of spec.adapters"),
        ),
        (
            (_r("p0", a=A), _r("p1", a=A, b=B)),
            False,
            {},
            (False, "Loading", "p0 lacks b (its adapters sidecar fetches and loads them)"),
        ),
        # past the deadline: what the pod's sidecar said of it
        (
            (_r("p1"), _r("p0", a=A)),
            True,
            {"p0": {"b": "fetching s3://x/b/: rank 64 above the limit 16"}},
            (
                False,
                "AdapterMissing",
                "p0 lacks b; p1 lacks a, b, past the deadline; p0: b: fetching s3://x/b/: rank 64 above the limit 16 "
                "(spec.adapters)",
            ),
        ),
    ],
)
def test_adapters_loaded_condition(
    replicas: tuple[Replica, ...], overdue: bool, errors: dict[str, dict[str, str]], condition: tuple[Any, ...]
) -> None:
    served = ServedAdapters(("a", "b"), replicas, overdue, errors)
    assert served.condition() == condition
    assert adapters_entry(served.replicas) == [
        {"pod": r.pod, "adapters": sorted(r.adapters)} for r in sorted(replicas, key=lambda r: r.pod)
    ]


def test_an_adapter_missing_past_the_deadline_is_a_warning_event() -> None:
    from inference_backend.controller import events

    missing = ServedAdapters(("a",), (_r("p0"),), True, {"p0": {"a": "fetching s3://x/a/: 403"}}).condition()
    loading = ServedAdapters(("a",), (_r("p0"),)).condition()
    for (_, reason, message), posted in ((missing, 1), (loading, 0)):
        st = {"conditions": [{"type": "AdaptersLoaded", "status": "False", "reason": reason, "message": message}]}
        got = events.reconciled(None, None, None, 0, st, events.placement(st))
        assert got == [events.Event("Warning", "AdapterMissing", message)] * posted


def test_pod_summary_keeps_its_address_and_readiness() -> None:
    pod = {
        "metadata": {"name": "p0", "namespace": "ns"},
        "status": {"phase": "Running", "podIP": "10.1.0.7", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    got = summarize(pod)
    assert got is not None and (got.ip, got.ready) == ("10.1.0.7", True)
    pending = summarize({"metadata": {"name": "p1"}, "status": {"phase": "Pending"}})
    assert pending is not None and (pending.ip, pending.ready) == (None, False)


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


def _report(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/adapters", timeout=5) as r:
        return json.load(r)  # type: ignore[no-any-return]


def _until(port: int, check: Any, timeout: float = 120) -> dict[str, Any]:
    deadline, last = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        try:
            last = _report(port)
        except OSError:
            last = {}
        if last and check(last):
            return last
        time.sleep(0.5)
    raise AssertionError(f"sidecar never got there: {last}")


@pytest.mark.slow
def test_sidecar_fetches_loads_and_unloads_on_a_real_runner(runner: tuple[str, Path], tmp_path: Path) -> None:
    """`inference-backend adapter sync` as the pod runs it: the ConfigMap's list from a file, the adapters fetched
    from a real S3 (moto) with the fetch step's checks, loaded and unloaded on the real runner's endpoints."""
    from ib_testkit.stores import S3Server, put_objects

    url, root = runner
    files = [(f"{n}/{f.name}", f.read_bytes()) for n in ("sql", "poems") for f in sorted((root / n).iterdir())]
    s3 = S3Server().start()
    try:
        put_objects(s3.endpoint, "adapters", files)
        config, fetched = tmp_path / "adapters.json", tmp_path / "fetched"

        def want(*entries: dict[str, Any]) -> None:
            (tmp_path / "next.json").write_text(json.dumps({"adapters": list(entries)}))
            (tmp_path / "next.json").replace(config)  # atomic, as the kubelet swaps the mounted file

        sql = {"name": "sql", "uri": "s3://adapters/sql/", "path": str(fetched / "sql"), "rank": 4}
        poems = {"name": "poems", "uri": "s3://adapters/poems/", "path": str(fetched / "poems")}
        wrong = {"name": "wrong", "uri": "s3://adapters/poems/", "path": str(fetched / "wrong"), "rank": 4}
        want(sql)
        port = free_port()
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_ENDPOINT_URL": s3.endpoint,
            "AWS_REGION": "us-east-1",
        }
        argv = [str(ROOT / ".venv" / "bin" / "inference-backend"), "adapter", "sync", str(config), "--engine", url]
        argv += ["--served-name", "tiny", "--port", str(port), "--interval", "0.5", "--max-rank", "16"]
        log = (tmp_path / "sidecar.log").open("w")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            # whatever the runner served before (the executor test left poems), it ends with exactly sql, fetched
            got = _until(port, lambda r: r["served"] == {"sql": sql["path"]})
            assert got["ready"] and got["errors"] == {}
            assert (fetched / "sql" / "adapter_config.json").exists()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5) as r:
                assert r.status == 200
            # added: fetched and loaded; one whose declared rank differs from its file's: refused by the fetch
            # step's check, named, and the others load
            want(sql, poems, wrong)
            got = _until(port, lambda r: set(r["served"]) == {"sql", "poems"} and "wrong" in r["errors"])
            assert "rank" in got["errors"]["wrong"], got
            body = json.dumps({"model": "poems", "prompt": [1, 5, 9], "max_tokens": 3}).encode()
            req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as reply:
                assert json.loads(reply.read())["model"] == "poems"
            # removed: unloaded (the runner answers 404 for it), the other stays
            want(poems)
            _until(port, lambda r: r["served"] == {"poems": poems["path"]} and r["errors"] == {})
            body = json.dumps({"model": "sql", "prompt": [1, 5, 9], "max_tokens": 3}).encode()
            req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=60)
            assert err.value.code == 404
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    finally:
        s3.stop()
