"""Engine renderers: one module per engine, one signature, ``container(decision, spec, name) -> EngineContainer``.

Pure (no I/O). Layering: api -> facts -> selection -> engines -> render.
"""

from __future__ import annotations

from inference_backend.engines import llamacpp, onnxruntime, pytorch, tgi, vllm
from inference_backend.engines.base import EngineContainer, Renderer

ENGINES: dict[str, Renderer] = {
    "vllm": vllm.container,
    "tgi": tgi.container,
    "llamacpp": llamacpp.container,
    "onnxruntime": onnxruntime.container,
    "pytorch": pytorch.container,
}
VERSIONS: dict[str, str] = {
    "vllm": vllm.VERSION,
    "tgi": tgi.VERSION,
    "llamacpp": llamacpp.VERSION,
    "onnxruntime": onnxruntime.VERSION,
    "pytorch": pytorch.VERSION,
}

__all__ = ["ENGINES", "VERSIONS", "EngineContainer", "Renderer"]
