"""Both servers start from the container args the engine renderers produce and answer a request.

The args come from engines.pytorch.container / engines.onnxruntime.container for the "serve-" specs of
ib_testkit/runner_cases.py. Substituted, by runner_cases.localize only: the values of --model/--draft-model
(in-pod directories -> the tiny models made here; the ONNX cases run with both formats the server reads),
--host (-> 127.0.0.1) and --port (-> a free port); the rendered command (ib-pytorch-runner /
ib-onnxruntime-server, console scripts of those modules) runs as `python -m inference_backend.runners.<pytorch|onnx>`.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from ib_testkit.runner_cases import CASES, localize, render_runner_case
from ib_testkit.runners import Server, free_port
from inference_backend.runners.onnx.args import build_parser as onnx_parser
from inference_backend.runners.pytorch.args import build_parser as pytorch_parser

SERVE = [name for name in CASES if name.startswith("serve-")]
# the ONNX server's cases start with both formats it serves: our exporter's and onnxruntime-genai's
RUNS = [(name, key) for name in SERVE for key in (("tiny",) if CASES[name][0] == "pytorch" else ("onnx", "genai"))]
MODULES = {"pytorch": "pytorch", "onnxruntime": "onnx"}
COMMANDS = {"pytorch": ("ib-pytorch-runner",), "onnxruntime": ("ib-onnxruntime-server",)}


@pytest.mark.parametrize(("name", "model"), RUNS)
def test_rendered_args_start_the_server(name: str, model: str, models: dict[str, Path], tmp_path: Path) -> None:
    engine = CASES[name][0]
    r = render_runner_case(name)
    assert r.container.command == COMMANDS[engine]
    dirs = {"--model": str(models[model]), "--draft-model": str(models["draft"])}
    port = free_port()
    args = localize(r.args, dirs, port=port)
    parser = pytorch_parser() if engine == "pytorch" else onnx_parser()
    parsed = parser.parse_args(args)
    s = r.spec
    assert parsed.enable_prefix_caching is s.prefix_cache.enabled and parsed.port == port
    srv = Server(MODULES[engine], args, tmp_path / "server.log")
    try:
        srv.wait_ready()
        models_list = httpx.get(srv.url + "/v1/models").json()["data"]
        assert models_list[0]["id"] == s.model.served_name == "tiny"
        assert models_list[0]["max_model_len"] == 256
        body = {"model": "tiny", "prompt": "hello world", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
        reply = httpx.post(srv.url + "/v1/completions", json=body, timeout=60).json()
        assert reply["usage"]["completion_tokens"] == 4
    finally:
        srv.stop()
