"""Every engine container of the golden outputs (tests/data/output/*.yaml) passes its engine's FAST check.

llama.cpp: the pinned build's flag list; TGI: the 3.3.7 launcher contract (args and env); our runners: their own
parsers; vLLM: all golden arg lists through vLLM 0.33.0's parser and checks in one harness call.
"""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.rendered import golden_containers

from tests.contracts.llama_flags import check_llama_server_args
from tests.contracts.test_runners_contract import parse_runner_args
from tests.contracts.tgi import check_tgi_args
from tests.contracts.vllm import VllmArgsRejected, parse_vllm_args_many

GOLDEN = golden_containers()
IDS = [f"{stem}:{engine}" for stem, engine, _ in GOLDEN]
VLLM = [(stem, c) for stem, engine, c in GOLDEN if engine == "vllm"]


def test_every_engine_has_golden_containers() -> None:
    assert {engine for _, engine, _ in GOLDEN} == {"vllm", "tgi", "llamacpp", "pytorch", "onnxruntime"}


@pytest.mark.parametrize(("stem", "engine", "container"), [g for g in GOLDEN if g[1] != "vllm"], ids=[
    i for i, g in zip(IDS, GOLDEN, strict=True) if g[1] != "vllm"])  # fmt: skip
def test_golden_container_passes_the_fast_check(stem: str, engine: str, container: dict[str, Any]) -> None:
    args = [str(a) for a in container["args"]]
    if engine == "llamacpp":
        assert container["command"] == ["/app/llama-server"]
        assert check_llama_server_args(args) == []
    elif engine == "tgi":
        env = {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}
        assert check_tgi_args(args, env) == []
        assert "-p" not in args
    else:
        ns = parse_runner_args(engine, args)
        assert ns.port == 8000 and ns.model.startswith("/models")


@pytest.fixture(scope="module")
def vllm_results() -> dict[str, dict[str, Any] | VllmArgsRejected]:
    results = parse_vllm_args_many([[str(a) for a in c["args"]] for _, c in VLLM])
    return {stem: r for (stem, _), r in zip(VLLM, results, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("stem", [stem for stem, _ in VLLM])
def test_golden_vllm_container_is_accepted_by_vllm(stem: str, vllm_results: dict[str, Any]) -> None:
    r = vllm_results[stem]
    assert not isinstance(r, VllmArgsRejected), str(r)
    container = dict(VLLM)[stem]
    assert container["command"] == ["vllm", "serve"]
    assert r["engine_args"]["model"] == container["args"][0]
