"""Both servers start from the container args the engine renderers produce and answer a request.

RENDERED holds a representative args list per engine; the renderer's output is to be wired in here (the
same parsers, inference_backend.runners.{pytorch,onnx}.args.build_parser, must accept it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from inference_backend.runners.onnx.args import build_parser as onnx_parser
from inference_backend.runners.pytorch.args import build_parser as pytorch_parser

COMMON = ["--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "{port}", "--max-batch-size", "8"]
RENDERED = {
    "pytorch": [*COMMON, "--batching", "dynamic", "--max-wait-ms", "5", "--enable-prefix-caching", "--dtype",
                "float32", "--device", "cpu", "--max-model-len", "256", "--max-queue", "64",
                "--kv-cache-memory-fraction", "0.5", "--threads", "2"],
    "onnx": [*COMMON, "--batching", "dynamic", "--max-wait-ms", "5", "--enable-prefix-caching",
             "--providers", "CUDAExecutionProvider,CPUExecutionProvider", "--max-model-len", "256",
             "--max-queue", "64", "--kv-cache-memory-fraction", "0.5", "--threads", "2"],
}  # fmt: skip


@pytest.mark.parametrize("kind", ["pytorch", "onnx"])
def test_rendered_args_start_the_server(kind: str, models: dict[str, Path], start_server: Any) -> None:
    from conftest import free_port

    model = models["tiny" if kind == "pytorch" else "onnx"]
    args = ["--model", str(model), *(a.format(port=free_port()) for a in RENDERED[kind])]
    parser = pytorch_parser() if kind == "pytorch" else onnx_parser()
    parsed = parser.parse_args(args)
    assert parsed.enable_prefix_caching and parsed.batching == "dynamic"
    # start_server appends its own --host/--port (argparse: the last one wins); keep the rendered ones.
    srv = start_server(kind, args[: args.index("--host")] + args[args.index("--port") + 2 :])
    models_list = httpx.get(srv.url + "/v1/models").json()["data"]
    assert models_list[0]["id"] == "tiny" and models_list[0]["max_model_len"] == 256
    body = {"model": "tiny", "prompt": "hello world", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    reply = httpx.post(srv.url + "/v1/completions", json=body, timeout=60).json()
    assert reply["usage"]["completion_tokens"] == 4
