"""Representative specs for our own runners (PyTorch runner, ONNX Runtime server), rendered by the real renderers.

Used by tests/contracts/test_runners_contract.py (fast: the runners' own argument parsers) and by
tests/runners/test_contract.py (starts the servers from these args). ``localize`` is the one place where rendered
args are changed to run here: the values of --model/--draft-model (in-pod weight directories) -> local
directories, --host -> 127.0.0.1, --port -> a free port. Nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inference_backend.api.model import ModelSpec

from ib_testkit.factories import MODELS, node
from ib_testkit.rendered import Rendered, render_case

TINY_TOKENIZER = {"family": "ib-tiny", "vocabSize": 320}
RUNNER_MODELS: dict[str, ModelSpec] = {
    "tiny": ModelSpec.model_validate(
        {
            "uri": "pvc://runner-models/tiny",
            "format": "safetensors",
            "architecture": "LlamaForCausalLM",
            "parameters": "1M",
            "dtype": "float32",
            "contextLength": 256,
            "tokenizer": TINY_TOKENIZER,
        }
    ),
    "tiny-draft": ModelSpec.model_validate(
        {
            "uri": "pvc://runner-models/draft",
            "format": "safetensors",
            "architecture": "LlamaForCausalLM",
            "parameters": "0.5M",
            "dtype": "float32",
            "contextLength": 256,
            "tokenizer": TINY_TOKENIZER,
        }
    ),
    "tiny-onnx": ModelSpec.model_validate(
        {
            "uri": "pvc://runner-models/tiny-onnx",
            "format": "onnx",
            "architecture": "LlamaForCausalLM",
            "parameters": "1M",
            "dtype": "float32",
            "contextLength": 256,
        }
    ),
    "gpt-1b": ModelSpec.model_validate(
        {
            "uri": "s3://research-models/gpt-1b/",
            "format": "safetensors",
            "architecture": "GPT2LMHeadModel",
            "parameters": "1.2B",
            "dtype": "bfloat16",
            "contextLength": 2048,
            "tokenizer": {"family": "gpt2", "vocabSize": 50257},
        }
    ),
}
CPU3 = node("cpu", cpu="3", memory="16Gi")  # -> --threads 2

# name -> (engine, spec body, nodes). The "serve-" cases are the ones tests/runners/test_contract.py starts.
CASES: dict[str, tuple[str, dict[str, Any], list[dict[str, Any]]]] = {
    "serve-pytorch-cpu-dynamic": (
        "pytorch",
        {
            "backend": "pytorch",
            "model": {"modelRef": "tiny", "servedName": "tiny"},
            "hardware": {"accelerator": "cpu"},
            "batching": {"strategy": "dynamic", "maxBatchSize": 8, "maxWaitMillis": 5},
            "kvCache": {"memoryFraction": 0.5},
        },
        [CPU3],
    ),
    "serve-pytorch-cpu-draft-continuous": (
        "pytorch",
        {
            "backend": "pytorch",
            "model": {"modelRef": "tiny", "servedName": "tiny"},
            "hardware": {"accelerator": "cpu"},
            "batching": {"strategy": "continuous", "maxBatchSize": 4, "maxBatchTokens": 512},
            "speculativeDecoding": {"draftModelRef": "tiny-draft", "numSpeculativeTokens": 3},
        },
        [CPU3],
    ),
    "serve-onnx-cpu-dynamic": (
        "onnxruntime",
        {
            "backend": "onnxruntime",
            "model": {"modelRef": "tiny-onnx", "servedName": "tiny"},
            "hardware": {"accelerator": "cpu"},
            "batching": {"strategy": "dynamic", "maxBatchSize": 8, "maxWaitMillis": 5},
            "kvCache": {"memoryFraction": 0.5},
        },
        [CPU3],
    ),
    "serve-onnx-cpu-static-noprefix": (
        "onnxruntime",
        {
            "backend": "onnxruntime",
            "model": {"modelRef": "tiny-onnx", "servedName": "tiny"},
            "hardware": {"accelerator": "cpu"},
            "batching": {"strategy": "static", "maxBatchSize": 2, "maxWaitMillis": 50},
            "prefixCache": {"enabled": False},
        },
        [CPU3],
    ),
    "pytorch-gpu-static-noprefix": (
        "pytorch",
        {
            "backend": "pytorch",
            "model": {"modelRef": "gpt-1b"},
            "batching": {"strategy": "static", "maxBatchSize": 16, "maxBatchTokens": 4096},
            "prefixCache": {"enabled": False},
        },
        [node("g", "l4")],
    ),
    "pytorch-hf-gpu-continuous": (
        "pytorch",
        {"backend": "pytorch", "model": {"modelRef": "llama-3-2-1b"}, "batching": {"maxBatchSize": 32}},
        [node("g", "a10g")],
    ),
    "onnx-gpu-continuous-falls-back": (
        "onnxruntime",
        {
            "backend": "onnxruntime",
            "model": {
                "uri": "s3://models/phi-3-mini-4k/model.onnx",
                "parameters": "3.8B",
                "dtype": "float16",
                "contextLength": 4096,
            },
            "batching": {"maxBatchSize": 8, "maxWaitMillis": 10},
        },
        [node("g", "l4")],
    ),
}


def render_runner_case(name: str) -> Rendered:
    engine, body, nodes = CASES[name]
    return render_case(body, *nodes, models={**MODELS, **RUNNER_MODELS}, engine=engine)


def localize(args: Sequence[str], dirs: Mapping[str, str], *, port: int, host: str = "127.0.0.1") -> list[str]:
    """Substitute the values of --model/--draft-model (by the flag: ``dirs["--model"]``, ...), --host and --port."""
    values = {**dirs, "--host": host, "--port": str(port)}
    out = list(args)
    for i in range(1, len(out)):
        if out[i - 1] in values:
            out[i] = values[out[i - 1]]
    return out
