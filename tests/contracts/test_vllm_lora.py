"""spec.adapters rendered for vLLM 0.33.0, through vLLM itself: the args through its `vllm serve` parser, its
validation and LoRAConfig (hack/vllm_parse_args.py check_lora), each adapter given at start a LoRAModulePath under
its name, adapters loaded while it serves (every one fetched) absent from the args with the slots rounded up and
the rendered VLLM_ALLOW_RUNTIME_LORA_UPDATING read by vLLM's own vllm/envs.py as on; and the card's LoRA
architectures (engines/vllm_lora.py) equal to the classes of vLLM's model registry that support
LoRA (hack/vllm_lora_archs.py, run in the vLLM venv)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from ib_testkit.factories import node
from ib_testkit.rendered import Rendered, render_case
from inference_backend.engines.vllm_lora import LORA_ARCHITECTURES

from tests.contracts.parser_harness import ROOT
from tests.contracts.vllm import HARNESS, VllmArgsRejected, parse_vllm_args_many

pytestmark = pytest.mark.slow

L8 = {"modelRef": "llama-3-1-8b"}
GPU = node("g", "h100")
CASES: dict[str, dict[str, Any]] = {
    "declared": {
        "model": L8,
        "backend": "vllm",
        "adapters": [
            {"name": "sql", "uri": "hf://acme/sql-lora", "rank": 8},
            {"name": "support.v2", "uri": "s3://adapters/support/", "rank": 20},
        ],
    },
    "undeclared": {
        "model": {**L8, "servedName": "llama"},
        "backend": "vllm",
        "adapters": [{"name": "a", "uri": "hf://acme/a"}],
    },
    "many": {
        "model": L8,
        "backend": "vllm",
        "adapters": [{"name": f"n{i}", "uri": f"hf://acme/n{i}", "rank": 300} for i in range(10)],
    },
    # a volume (pvc://) keeps every adapter in the pod template: --lora-modules at start
    "at start": {
        "model": L8,
        "backend": "vllm",
        "adapters": [
            {"name": "sql", "uri": "hf://acme/sql-lora", "rank": 8},
            {"name": "legal", "uri": "pvc://claims/legal", "rank": 16},
            {"name": "support", "uri": "s3://adapters/support/", "rank": 16},
        ],
    },
}
SWITCH = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


@pytest.fixture(scope="module")
def rendered() -> dict[str, Rendered]:
    return {name: render_case(body, GPU, engine="vllm") for name, body in CASES.items()}


@pytest.fixture(scope="module")
def parsed(rendered: dict[str, Rendered]) -> dict[str, Any]:
    lists = {name: r.args for name, r in rendered.items()}
    args = rendered["declared"].args
    i = args.index("--max-lora-rank")
    lists["negative: a rank vLLM does not take"] = [*args[: i + 1], "20", *args[i + 2 :]]
    return dict(zip(lists, parse_vllm_args_many(list(lists.values())), strict=True))


@pytest.mark.parametrize("name", list(CASES))
def test_vllm_takes_the_adapters(name: str, rendered: dict[str, Rendered], parsed: dict[str, Any]) -> None:
    r = parsed[name]
    assert not isinstance(r, VllmArgsRejected), str(r)
    spec, decision, env = rendered[name].spec, rendered[name].decision, rendered[name].env
    e, lora = r["engine_args"], r["checks"]["lora"]["config"]
    assert e["enable_lora"] is True
    assert lora["max_lora_rank"] == decision.adapters.max_rank
    count = len(spec.adapters)
    if name == "at start":
        modules = {m["name"]: m["path"] for m in r["args"]["lora_modules"]}
        assert set(modules) == {a.name for a in spec.adapters} and SWITCH not in env
        assert lora["max_loras"] == min(count, 8)
    else:  # loaded while it serves: none at start, slots for the count rounded up to a power of two
        assert not r["args"]["lora_modules"] and env[SWITCH] == "True"
        rounded = 1 << (count - 1).bit_length()
        assert lora["max_loras"] == min(rounded, 8)
    assert (lora["max_cpu_loras"] or lora["max_loras"]) >= count


def test_vllm_reads_the_rendered_switch_as_on(rendered: dict[str, Rendered]) -> None:
    """vllm/envs.py of the pinned vLLM parses the value rendered (its run-time LoRA endpoints are mounted then)."""
    value = rendered["declared"].env[SWITCH]
    code = "import vllm.envs as e; print(e.VLLM_ALLOW_RUNTIME_LORA_UPDATING)"
    got = {}
    for v in (value, "0"):
        proc = subprocess.run(
            [str(HARNESS.python()), "-c", code],
            capture_output=True,
            text=True,
            timeout=300,
            env={**HARNESS.env, SWITCH: v},
            cwd=ROOT,
            check=True,
        )
        got[v] = proc.stdout.strip().splitlines()[-1]
    assert got == {value: "True", "0": "False"}


def test_rank_limits(rendered: dict[str, Rendered], parsed: dict[str, Any]) -> None:
    # declared 8 and 20 -> 32 (vLLM's next choice); undeclared -> vLLM's default 16; 300 -> 320
    assert [rendered[n].decision.adapters.max_rank for n in CASES] == [32, 16, 320, 16]
    neg = parsed["negative: a rank vLLM does not take"]
    assert isinstance(neg, VllmArgsRejected) and "max-lora-rank" in neg.error


def test_lora_architectures_are_vllms() -> None:
    python = HARNESS.python()
    proc = subprocess.run(
        [str(python), str(ROOT / "hack" / "vllm_lora_archs.py")],
        capture_output=True,
        text=True,
        timeout=900,
        env={**HARNESS.env},
        cwd=ROOT,
        check=True,
    )
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["version"] == "0.33.0"
    assert set(found["architectures"]) == LORA_ARCHITECTURES
    assert {"LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"} <= LORA_ARCHITECTURES
