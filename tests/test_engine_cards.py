"""The engine registry is the one place engines are described: complete cards, equal to the API's Literal, and no
engine named by its string outside engines/ (and the runners) except the API's Literal and the CRD generator."""

from __future__ import annotations

import dataclasses
import io
import tokenize
import typing
from pathlib import Path

import pytest
from ib_testkit.factories import spec
from inference_backend.api.common import Format
from inference_backend.api.inferencebackend import Backend, Engine
from inference_backend.decision import InvalidSpec
from inference_backend.engines import CARDS, ENGINES, NAMES, REGISTRY, VERSIONS, card, check_spec, rules
from inference_backend.engines.card import EngineCard

PACKAGE = Path(__file__).resolve().parents[1] / "operator" / "inference_backend"
MODEL = {"uri": "hf://org/repo", "parameters": "7B"}
ALLOWED = {PACKAGE / "api" / "inferencebackend.py", PACKAGE / "crdgen.py"}


def _flatten(literal: object) -> list[str]:
    out: list[str] = []
    for arg in typing.get_args(literal):
        out.extend(_flatten(arg) if typing.get_args(arg) else [arg])
    return out


def test_registry_equals_the_api_literal_in_order() -> None:
    assert tuple(_flatten(Engine)) == NAMES
    assert tuple(_flatten(Backend)) == ("auto", *NAMES)


def test_literal_disagreeing_with_the_registry_is_caught() -> None:
    assert tuple(_flatten(typing.Literal["vllm", "tgi"])) != NAMES


@pytest.mark.parametrize("engine", NAMES)
def test_every_card_is_complete(engine: str) -> None:
    c = card(engine)
    assert c.missing() == [], f"{engine}'s card lacks {c.missing()}"
    assert c.name == engine and ENGINES[engine] is c.render and VERSIONS[engine] == c.version
    assert c.batching and set(c.batching) <= {"continuous", "dynamic", "static"}
    assert c.speculative <= {"draft", "ngram"} and c.accelerators <= {"gpu", "cpu"}
    for acc, profile in c.profiles.items():
        assert profile.provenance.split(":")[0] in ("measured", "published", "estimate"), (engine, acc)


def test_a_card_lacking_a_field_is_reported() -> None:
    c = REGISTRY[0]
    assert "summary" in dataclasses.replace(c, summary="").missing()
    assert "formats" in dataclasses.replace(c, formats=frozenset()).missing()
    assert "images[cpu]" in dataclasses.replace(c, accelerators=frozenset({"gpu", "cpu"})).missing()
    assert "profiles[gpu]" in dataclasses.replace(c, profiles={}).missing()
    a = c.autoscaling
    assert "autoscaling.signals" in dataclasses.replace(c, autoscaling=dataclasses.replace(a, signals={})).missing()
    assert (
        "autoscaling.cold_start" in dataclasses.replace(c, autoscaling=dataclasses.replace(a, cold_start="")).missing()
    )
    fewer = dataclasses.replace(a, signals={"queueDepth": a.signals["queueDepth"]}, lacks="")
    assert "autoscaling.lacks" in dataclasses.replace(c, autoscaling=fewer).missing(), "a missing signal says why"
    nameless = dataclasses.replace(a, signals={"ttft": dataclasses.replace(a.signals["ttft"], source="")})
    assert "autoscaling.signals[ttft]" in dataclasses.replace(c, autoscaling=nameless).missing()
    # auto_batching names a strategy the engine has, on an accelerator it runs on
    assert "auto_batching[gpu]" in dataclasses.replace(c, auto_batching={"gpu": "speculative"}).missing()
    assert "auto_batching[cpu]" in dataclasses.replace(c, auto_batching={"cpu": c.batching[0]}).missing()


def test_every_card_field_is_required() -> None:
    """No defaults: a new engine module cannot forget a field silently (the dataclass refuses to build)."""
    for f in dataclasses.fields(EngineCard):
        assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, f.name


def test_card_lookup_names_the_registered_engines() -> None:
    with pytest.raises(KeyError, match="registered: vllm"):
        card("nope")
    assert list(CARDS) == list(NAMES)


def test_gpu_only_rule_is_made_from_the_cards() -> None:
    gpu_only = [c.name for c in REGISTRY if c.gpu_required]
    for engine in NAMES:
        s = spec(model=MODEL, backend=engine, hardware={"accelerator": "cpu"})
        if engine in gpu_only:
            with pytest.raises(InvalidSpec, match=r"hardware\.accelerator cannot be cpu") as e:
                check_spec(s)
            assert e.value.field == "spec.hardware.accelerator" and engine in e.value.message
        else:
            check_spec(s)


def test_quantized_kv_rule_is_made_from_the_cards() -> None:
    owners = {c.name for c in REGISTRY if {"q8_0", "q4_0"} <= c.kv_dtypes}
    assert owners, "some engine has the block-quantized KV cache types"
    for engine in ("auto", *NAMES):
        s = spec(model=MODEL, backend=engine, kvCache={"dtype": "q8_0"})
        if engine == "auto" or engine in owners:
            check_spec(s)
        else:
            with pytest.raises(InvalidSpec) as e:
                check_spec(s)
            assert e.value.field == "spec.kvCache.dtype"


def test_rules_follow_a_changed_registry() -> None:
    """A sixth GPU-only engine joins the CEL rule without any edit outside its card."""
    extra = dataclasses.replace(REGISTRY[0], name="newengine")
    gpu_rule = next(r for r in rules.spec_rules((*REGISTRY, extra)) if r.field == "spec.hardware.accelerator")
    assert "'newengine'" in gpu_rule.cel and "newengine" in gpu_rule.message


# "pytorch" is both an engine and a weight format (spec.model.format); as a format it may appear anywhere.
SCANNED = [n for n in NAMES if n not in _flatten(Format)]


def _engine_strings(path: Path) -> list[str]:
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING:
            for name in SCANNED:
                if f'"{name}"' in tok.string or f"'{name}'" in tok.string or tok.string.strip("\"'") == name:
                    found.append(f"{path.relative_to(PACKAGE)}:{tok.start[0]}: {tok.string}")
    return found


def test_no_engine_named_by_its_string_outside_engines() -> None:
    assert SCANNED and _engine_strings(PACKAGE / "engines" / "vllm.py"), "the scan finds engine strings"
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).parts
        if rel[0] in ("engines", "runners") or path in ALLOWED:
            continue
        found += _engine_strings(path)
    assert found == []


def test_the_docs_engine_table_is_made_from_the_cards() -> None:
    from inference_backend.engines.table import markdown

    doc = (PACKAGE.parents[1] / "docs" / "selection.md").read_text()
    between = doc.split("<!-- engine-table:start -->\n")[1].split("\n<!-- engine-table:end -->")[0]
    assert between == markdown(), "docs/selection.md's engine table is stale: python -m inference_backend.engines.table"
