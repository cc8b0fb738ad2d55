"""The TGI launcher contract data is generated, consistent, and check_tgi_args rejects what clap would."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.contracts.tgi import check_tgi_args, tgi_contract

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    path = ROOT / "hack/tgi_flags_from_source.py"
    spec = importlib.util.spec_from_file_location("tgi_flags_from_source", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_json_is_regenerated_from_saved_source() -> None:
    gen = _generator()
    assert (ROOT / "tests/contracts/data/tgi-3.3.7-launcher.json").read_text(encoding="utf-8") == gen.render()


def test_contract_has_the_flags_we_render() -> None:
    flags = {f["long"]: f for f in tgi_contract()["flags"]}
    for name in (
        "--model-id",
        "--port",
        "--hostname",
        "--max-input-tokens",
        "--max-total-tokens",
        "--max-batch-prefill-tokens",
        "--max-batch-total-tokens",
        "--max-concurrent-requests",
        "--num-shard",
        "--quantize",
        "--dtype",
        "--kv-cache-dtype",
        "--speculate",
        "--trust-remote-code",
        "--cuda-memory-fraction",
        "--huggingface-hub-cache",
    ):
        assert name in flags, name
    assert flags["--port"]["short"] == "-p"
    assert flags["--port"]["env"] == "PORT"
    assert flags["--kv-cache-dtype"]["choices"] == ["fp8_e4m3fn", "fp8_e5m2"]
    assert "compressed-tensors" in flags["--quantize"]["choices"]
    assert "fp8" in flags["--quantize"]["choices"]
    assert flags["--trust-remote-code"]["takes_value"] is False
    assert flags["--sharded"]["choices"] == ["true", "false"]
    env = tgi_contract()["env_vars"]
    assert env["PREFIX_CACHING"]["verified"] and env["ATTENTION"]["verified"]


def test_valid_args_pass() -> None:
    args = [
        "--model-id",
        "/models/llama",
        "--port",
        "8080",
        "--hostname",
        "0.0.0.0",
        "--max-input-tokens=4095",
        "--max-total-tokens",
        "4096",
        "--quantize",
        "awq",
        "--kv-cache-dtype",
        "fp8_e5m2",
        "--trust-remote-code",
        "--cors-allow-origin",
        "a",
        "--cors-allow-origin",
        "b",
    ]
    assert check_tgi_args(args, {"PREFIX_CACHING": "1", "ATTENTION": "flashinfer"}) == []


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--swap-space", "4"], {}, "unknown flag '--swap-space'"),
        (["--max-num-seqs", "4"], {}, "unknown flag"),
        (["-p", "8080"], {}, "render the long form '--port'"),
        (["--port"], {}, "requires a value"),
        (["--port", "--model-id", "x"], {}, "--port requires a value"),
        (["--kv-cache-dtype", "fp8"], {}, "invalid value 'fp8'"),
        (["--quantize", "int4"], {}, "--quantize: invalid value"),
        (["--trust-remote-code=true"], {}, "boolean flag"),
        (["--port", "1", "--port", "2"], {}, "more than once"),
        (["meta-llama/x"], {}, "positional"),
        ([], {"KV_CACHE_DTYPE": "fp8"}, "env KV_CACHE_DTYPE"),
        ([], {"ATTENTION": "flash"}, "env ATTENTION"),
        ([], {"USE_PREFIX_CACHING": "1"}, "not verified"),
    ],
)
def test_invalid_args_are_reported(args: list[str], env: dict[str, str], needle: str) -> None:
    errors = check_tgi_args(args, env)
    assert any(needle in e for e in errors), errors
