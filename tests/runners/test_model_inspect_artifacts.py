"""`model inspect` on artifacts the real tools wrote: transformers' save_pretrained (a Llama and a Mixtral-style MoE),
the ONNX runner's exporter and llama.cpp's convert_hf_to_gguf.py (bench/gguf_convert.py). Expected values come from
the torch modules (their parameters), not from any file.

Needs the runners venv (torch, transformers, onnx). The GGUF is read with llama.cpp's in-tree gguf-py (the source
of the gguf package, which the runners venv does not pin), by running the CLI with it on PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit.llama_server import llama_cpp_source

from bench import bench_model

ROOT = Path(__file__).resolve().parents[2]


def inspect(path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "inference_backend.cli", "model", "inspect", str(path), "--uri", "s3://m/x"]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr
    return dict(yaml.safe_load(res.stdout)["spec"])


def torch_facts(directory: Path) -> tuple[int, int, Any]:
    """(parameters, routed-expert parameters, config) of the saved model, loaded by transformers."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory)
    total = sum(p.numel() for p in model.parameters())
    routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    return total, routed, model.config


def test_llama_saved_by_transformers(models: dict[str, Path]) -> None:
    total, _, config = torch_facts(models["tiny"])
    got = inspect(models["tiny"])
    expected = {
        "format": "safetensors",
        "architecture": "LlamaForCausalLM",
        "dtype": "float32",
        "contextLength": config.max_position_embeddings,
        "layers": config.num_hidden_layers,
        "attentionHeads": config.num_attention_heads,
        "kvHeads": config.num_key_value_heads,
        "headDim": config.hidden_size // config.num_attention_heads,
    }
    assert {k: got.get(k) for k in expected} == expected
    assert _count(got["parameters"]) == total
    assert got["tokenizer"]["vocabSize"] == config.vocab_size
    assert "experts" not in got and "activeParameters" not in got


def test_mixtral_moe_saved_by_transformers(tmp_path: Path) -> None:
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    MixtralForCausalLM(config).save_pretrained(tmp_path / "mix")
    total, routed, _ = torch_facts(tmp_path / "mix")
    got = inspect(tmp_path / "mix")
    assert routed > 0
    assert _count(got["parameters"]) == total
    assert _count(got["activeParameters"]) == total - routed + routed // 4 * 2
    assert (got["experts"], got["activeExpertsPerToken"], got["layers"], got["kvHeads"]) == (4, 2, 2, 2)


def test_onnx_export_and_gguf_conversion_are_the_same_model(models: dict[str, Path], tmp_path: Path) -> None:
    total, _, config = torch_facts(models["tiny"])
    hf = inspect(models["tiny"])
    onnx = inspect(models["onnx"])
    assert onnx["format"] == "onnx" and onnx["layers"] == config.num_hidden_layers
    # the exporter shares identical initializers (the all-ones norm weights): at most those are missing
    norms = (2 * config.num_hidden_layers + 1) * config.hidden_size
    assert total - norms <= _count(onnx["parameters"]) <= total
    assert onnx["tokenizer"] == hf["tokenizer"]

    src = llama_cpp_source()
    if not (src / "convert_hf_to_gguf.py").exists():
        pytest.skip(f"no llama.cpp source at {src}: run hack/build-llama-server")
    m = bench_model.PRESETS["tiny"]
    made = bench_model.make_safetensors(m, tmp_path / m.name)
    gguf_file = bench_model.convert_gguf(made, tmp_path / "tiny-f32.gguf", m.dtype)
    path = os.pathsep.join([str(src / "gguf-py"), *filter(None, [os.environ.get("PYTHONPATH")])])
    got = inspect(gguf_file, env={**os.environ, "PYTHONPATH": path})
    want = inspect(made)
    assert got["format"] == "gguf" and got["quantization"] == "f32" and got["dtype"] == "float32"
    assert _count(got["parameters"]) == m.parameters() == _count(want["parameters"])
    for key in ("layers", "attentionHeads", "kvHeads", "headDim", "contextLength"):
        assert got[key] == want[key], key
    # llama.cpp copies the token strings: the vocabulary hash is the same in both formats
    assert got["tokenizer"]["vocabHash"] == want["tokenizer"]["vocabHash"]
    assert got["tokenizer"]["vocabSize"] == want["tokenizer"]["vocabSize"] == m.vocab


def _count(text: str) -> int:
    from inference_backend.quantity import parse_parameters

    return parse_parameters(text)
