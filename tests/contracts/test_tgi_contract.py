"""Every rendered TGI container passes the text-generation-launcher 3.3.7 flag contract with zero errors.

Specs on GPU nodes -> select -> engines.tgi.container -> check_tgi_args(args, env) against
tests/contracts/data/tgi-3.3.7-launcher.json (clap's flag table: unknown flags, values, enums, repeats, short
flags, enum-valued env vars and the non-flag env vars such as PREFIX_CACHING). The launcher itself cannot run
here (GPU image); see docs/engine-flags/tgi-3.3.7.md for what that table is built from.
"""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import node
from ib_testkit.rendered import render_case
from inference_backend.decision import InvalidSpec

from tests.contracts.tgi import check_tgi_args

L8 = {"modelRef": "llama-3-1-8b"}
L70 = {"modelRef": "llama-3-1-70b"}


def _quantized(q: str) -> dict[str, Any]:
    return {
        "uri": f"hf://acme/llama-70b-{q}",
        "architecture": "LlamaForCausalLM",
        "parameters": "70.6B",
        "dtype": "float16",
        "contextLength": 8192,
        "quantization": q,
    }


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "basic": ({"model": L8, "backend": "tgi"}, [node("g", "h100")]),
    "ngram": (
        {
            "model": L8,
            "backend": "tgi",
            "speculativeDecoding": {"method": "ngram", "numSpeculativeTokens": 3},
            "kvCache": {"memoryFraction": 0.85},
        },
        [node("g", "l4")],
    ),
    "tp2-kvfp8": (
        {
            "model": L70,
            "backend": "tgi",
            "kvCache": {"dtype": "fp8"},
            "batching": {"maxBatchSize": 48, "maxBatchTokens": 8192},
        },
        [node("g", "h100", 8)],
    ),
    "tp8": ({"model": L70, "backend": "tgi"}, [node("g", "a100-40", 8)]),
    "awq": ({"model": _quantized("awq"), "backend": "tgi"}, [node("g", "h100")]),
    "gptq-noprefix": (
        {
            "model": _quantized("gptq"),
            "backend": "tgi",
            "prefixCache": {"enabled": False},
            "objectives": {"concurrency": 100},
        },
        [node("g", "h100")],
    ),
    "fp8": ({"model": {**L70, "quantization": "fp8"}, "backend": "tgi"}, [node("g", "h100", 8)]),
    "bitsandbytes-auto": ({"model": {**_quantized("bitsandbytes"), "dtype": "bfloat16"}}, [node("g", "h100", 2)]),
    "small-prefill": (
        {
            "model": {**L8, "servedName": "llama"},
            "backend": "tgi",
            "batching": {"maxBatchSize": 4, "maxBatchTokens": 1024},
        },
        [node("g", "h100")],
    ),
    "extra-args-env": (
        {
            "model": L8,
            "backend": "tgi",
            "engine": {
                "extraArgs": ["--max-waiting-tokens", "10"],
                "env": [{"name": "ATTENTION", "value": "flashdecoding"}],
            },
        },
        [node("g", "h100")],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rendered_container_passes_the_launcher_contract(name: str) -> None:
    body, nodes = CASES[name]
    r = render_case(body, *nodes, engine="tgi")
    assert r.container.command == ("text-generation-launcher",)
    assert check_tgi_args(r.args, r.env) == []
    assert "-p" not in r.args and "--prometheus-port" not in r.args
    args, s, d = r.args, r.spec, r.decision
    assert d.model is not None and d.placement is not None

    def value(flag: str) -> str | None:
        return args[args.index(flag) + 1] if flag in args else None

    assert value("--port") == "8000" and value("--hostname") == "0.0.0.0"
    assert value("--max-total-tokens") == str(d.model.context_length)
    assert value("--cuda-memory-fraction") == f"{s.kv_cache.memory_fraction:g}"
    n = d.placement.gpus_per_replica
    assert value("--num-shard") == (str(n) if n > 1 else None)
    q = d.model.quantization
    assert value("--quantize") == (q if q in ("awq", "gptq", "fp8", "bitsandbytes") else None)
    assert value("--kv-cache-dtype") == ("fp8_e4m3fn" if s.kv_cache.dtype == "fp8" else None)
    sd = s.speculative_decoding
    assert value("--speculate") == (str(sd.num_speculative_tokens) if sd is not None else None)
    assert value("--max-batch-size") == (str(s.batching.max_batch_size) if s.batching.max_batch_size else None)
    assert r.env["PREFIX_CACHING"] == ("1" if s.prefix_cache.enabled else "0")


def test_cases_cover_shards_quantizations_and_speculation() -> None:
    rs = [render_case(b, *n, engine="tgi") for b, n in CASES.values()]
    assert {r.decision.placement.gpus_per_replica for r in rs if r.decision.placement} >= {1, 2, 8}
    assert {str(r.decision.model.quantization) for r in rs if r.decision.model} >= {
        "awq",
        "gptq",
        "fp8",
        "bitsandbytes",
    }


# ---- negative ---------------------------------------------------------------------------------------------------


def test_short_port_fails_the_check() -> None:
    body, nodes = CASES["basic"]
    r = render_case(body, *nodes, engine="tgi")
    errors = check_tgi_args([*r.args, "-p", "8000"], r.env)
    assert "short flag '-p' used: render the long form '--port'" in errors
    assert "--port given more than once" in errors


def test_unknown_flag_fails_the_check() -> None:
    body, nodes = CASES["basic"]
    r = render_case(body, *nodes, engine="tgi")
    errors = check_tgi_args([*r.args, "--swap-space", "4"], r.env)
    assert "unknown flag '--swap-space' (not a text-generation-launcher 3.3.7 flag)" in errors


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["-p", "9000"], "-p (same flag as --port)"),
        (["--max-batch-size", "8"], "--max-batch-size"),
        (["--num-shard=4"], "--num-shard"),
    ],
)
def test_renderer_refuses_extra_args_repeating_its_flags(extra: list[str], named: str) -> None:
    body = {"model": L70, "backend": "tgi", "batching": {"maxBatchSize": 8}, "engine": {"extraArgs": extra}}
    with pytest.raises(InvalidSpec, match=r"spec\.engine\.extraArgs") as info:
        render_case(body, node("g", "h100", 8))
    assert named in str(info.value)


def test_renderer_refuses_env_that_sets_a_rendered_flag() -> None:
    body = {"model": L8, "backend": "tgi", "engine": {"env": [{"name": "MAX_TOTAL_TOKENS", "value": "9"}]}}
    with pytest.raises(InvalidSpec, match=r"spec.engine.env\[0\]"):
        render_case(body, node("g", "h100"))
