"""The flag parsers import nothing heavy and document every flag (runs in the light `make unit` venv too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from inference_backend.runners.onnx.args import build_parser as onnx_parser
from inference_backend.runners.pytorch.args import build_parser as pytorch_parser

ROOT = Path(__file__).parents[2]
COMMON = {
    "--model",
    "--served-model-name",
    "--host",
    "--port",
    "--dtype",
    "--batching",
    "--max-batch-size",
    "--max-batch-tokens",
    "--max-wait-ms",
    "--max-model-len",
    "--max-queue",
    "--kv-cache-memory-fraction",
    "--enable-prefix-caching",
    "--threads",
    "--max-body-bytes",
    "--max-stop-sequences",
    "--max-stop-chars",
    "--max-messages",
    "--max-n",
    "--max-logprobs",
    "--request-timeout",
    "--shutdown-timeout",
    "--chat-template",
}


def _flags(parser: object) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}  # type: ignore[attr-defined]


def test_flag_sets() -> None:
    pytorch_only = {
        "--device",
        "--draft-model",
        "--num-speculative-tokens",
        "--prepack-weights",
        "--no-prepack-weights",
        "--fused-forward",
        "--no-fused-forward",
        "--huge-pages",
        "--no-huge-pages",
    }
    assert COMMON | pytorch_only <= _flags(pytorch_parser())
    assert COMMON | {"--providers"} <= _flags(onnx_parser())
    assert "--no-enable-prefix-caching" in _flags(onnx_parser())


def test_defaults_and_choices() -> None:
    p = pytorch_parser().parse_args(["--model", "m"])
    assert (p.port, p.batching, p.device, p.enable_prefix_caching) == (8000, "continuous", "auto", False)
    assert (
        p.prepack_weights and not pytorch_parser().parse_args(["--model", "m", "--no-prepack-weights"]).prepack_weights
    )
    assert p.fused_forward and not pytorch_parser().parse_args(["--model", "m", "--no-fused-forward"]).fused_forward
    o = onnx_parser().parse_args(["--model", "m", "--enable-prefix-caching"])
    assert (o.port, o.batching, o.enable_prefix_caching, o.genai_runtime) == (8000, "dynamic", True, "auto")
    assert onnx_parser().parse_args(["--model", "m", "--batching", "continuous"]).batching == "continuous"
    with pytest.raises(SystemExit):
        onnx_parser().parse_args(["--model", "m", "--genai-runtime", "cuda"])
    with pytest.raises(SystemExit):
        pytorch_parser().parse_args(["--model", "m", "--kv-cache-memory-fraction", "1.5"])
    limits = (p.max_body_bytes, p.max_stop_sequences, p.max_stop_chars, p.max_messages)
    assert limits == (8 * 2**20, 16, 256, 1024) and (p.request_timeout, p.shutdown_timeout) == (600.0, 20.0)
    with pytest.raises(SystemExit):
        onnx_parser().parse_args(["--model", "m", "--request-timeout", "-1"])


@pytest.mark.parametrize("kind", ["pytorch", "onnx"])
def test_args_module_imports_nothing_heavy(kind: str) -> None:
    code = (
        f"import sys; from inference_backend.runners.{kind}.args import build_parser; "
        "build_parser().format_help(); "
        "heavy = {'torch', 'transformers', 'onnxruntime', 'fastapi', 'numpy', 'uvicorn'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    env = {"PYTHONPATH": str(ROOT / "operator")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("kind", ["pytorch", "onnx"])
def test_help_documents_every_flag(kind: str) -> None:
    parser = pytorch_parser() if kind == "pytorch" else onnx_parser()
    for action in parser._actions:
        assert action.help, action.option_strings
