"""spec.adapters rendered for SGLang 0.5.23 go through SGLang's own parser, resolution pipeline and checks
(hack/sglang_parse_args.py: check_lora_server_args turns --lora-paths NAME=PATH into LoRARefs): each adapter is
served under its name from the path the fetch step fills, --max-lora-rank is the declared limit, and the draft
speculation the selection turned off would indeed have been refused with adapters (check_lora_speculative_
compatibility)."""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import node
from ib_testkit.rendered import Rendered, render_case

from tests.contracts.sglang import SglangArgsRejected, parse_sglang_args_many

pytestmark = pytest.mark.slow

L8 = {"modelRef": "llama-3-1-8b"}
GPU = node("g", "h100")
CASES: dict[str, dict[str, Any]] = {
    "ranked": {
        "model": L8,
        "backend": "sglang",
        "adapters": [
            {"name": "tools", "uri": "hf://acme/tools-lora", "rank": 64},
            {"name": "planner.v2", "uri": "s3://adapters/planner/", "rank": 8},
        ],
    },
    "unranked-with-draft": {
        "model": L8,
        "backend": "sglang",
        "adapters": [{"name": "sql", "uri": "hf://acme/sql"}],
        "speculativeDecoding": {"draftModelRef": "llama-3-2-1b", "numSpeculativeTokens": 3},
    },
    "ngram-kept": {
        "model": L8,
        "backend": "sglang",
        "adapters": [{"name": "sql", "uri": "hf://acme/sql", "rank": 16}],
        "speculativeDecoding": {"method": "ngram", "numSpeculativeTokens": 3},
    },
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, Rendered]:
    return {name: render_case(body, GPU, engine="sglang") for name, body in CASES.items()}


@pytest.fixture(scope="module")
def parsed(rendered: dict[str, Rendered]) -> dict[str, Any]:
    lists = {name: r.args for name, r in rendered.items()}
    # what the selection avoided: the draft speculation (STANDALONE) kept beside the adapters
    draft = render_case({**CASES["unranked-with-draft"], "adapters": []}, GPU, engine="sglang").args
    lora = rendered["unranked-with-draft"].args
    lists["negative: STANDALONE with adapters"] = [*draft, *lora[lora.index("--enable-lora") :]]
    return dict(zip(lists, parse_sglang_args_many(list(lists.values())), strict=True))


@pytest.mark.parametrize("name", list(CASES))
def test_sglang_serves_each_adapter_under_its_name(
    name: str, rendered: dict[str, Rendered], parsed: dict[str, Any]
) -> None:
    r = parsed[name]
    assert not isinstance(r, SglangArgsRejected), str(r)
    resolved = r["resolved"]
    assert resolved["enable_lora"] is True
    refs = {ref["lora_name"]: ref["lora_path"] for ref in resolved["lora_paths"]}
    spec = rendered[name].spec
    assert refs == {a.name: f"/adapters/{a.name}" for a in spec.adapters}
    ranks = [a.rank for a in spec.adapters]
    assert resolved["max_lora_rank"] == (max(ranks) if None not in ranks else None)  # else inferred at load


def test_sglang_refuses_standalone_speculation_with_adapters(
    rendered: dict[str, Rendered], parsed: dict[str, Any]
) -> None:
    assert "--speculative-algorithm" not in rendered["unranked-with-draft"].args
    neg = parsed["negative: STANDALONE with adapters"]
    assert isinstance(neg, SglangArgsRejected) and "STANDALONE" in neg.error
    kept = parsed["ngram-kept"]
    assert not isinstance(kept, SglangArgsRejected) and kept["resolved"]["speculative_algorithm"] == "NGRAM"
