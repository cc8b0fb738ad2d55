"""bench/genai_random.py's way to a 7B int4/int8 genai model in bounded memory builds, on the tiny shape, the graph
genai's model builder makes from float weights with `is_symmetric=false` (same nodes, MatMulNBits attributes and
zero points; the LM head, which the builder quantizes itself, symmetric as in `-p int4`), computes with exactly the
codes written into the checkpoint, and serves (issue 16 item 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from ib_testkit.genai_models import build_genai
from ib_testkit.runners import complete
from safetensors.numpy import load_file

from bench.bench_model import PRESETS
from bench.genai_random import build, olive_checkpoint


def _nodes(model: Path) -> list[tuple[str, dict[str, Any], bool]]:
    """(op type, MatMulNBits attributes, has zero points) of every node, in graph order."""
    g = onnx.load(str(model / "model.onnx"), load_external_data=False).graph
    out = []
    for n in g.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} if n.op_type == "MatMulNBits" else {}
        out.append((n.op_type, attrs, n.op_type == "MatMulNBits" and len(n.input) > 3 and bool(n.input[3])))
    return out


@pytest.fixture(scope="module")
def olive(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("olive")
    out = {}
    for bits in (4, 8):
        ckpt, model = root / f"olive-int{bits}", root / f"genai-int{bits}"
        olive_checkpoint(PRESETS["tiny"], ckpt, bits)
        info = build(ckpt, model, bits, 16 * 2**30)
        assert info["returncode"] == 0 and 0 < info["peakRssBytes"] < info["addressSpaceCapBytes"]
        out[bits] = ckpt, model
    return out


@pytest.mark.parametrize("bits", [4, 8])
def test_the_olive_build_is_the_builders_asymmetric_graph(
    bits: int, olive: dict[int, tuple[Path, Path]], models: dict[str, Path], tmp_path: Path
) -> None:
    ref = build_genai(models["tiny"], tmp_path / "float", f"int{bits}", "cpu", extra_options=("is_symmetric=false",))
    ours, theirs = _nodes(olive[bits][1]), _nodes(ref)
    assert [n[:2] for n in ours] == [n[:2] for n in theirs]
    matmuls = [(a, b) for a, b in zip(ours, theirs, strict=True) if a[0] == "MatMulNBits"]
    assert len(matmuls) == 5 * PRESETS["tiny"].layers + 1 and all(a[1]["bits"] == bits for a, _ in matmuls)
    assert all(a[2] and b[2] for a, b in matmuls[:-1]) and not matmuls[-1][0][2]  # LM head: symmetric


def test_the_model_computes_with_the_codes_written(olive: dict[int, tuple[Path, Path]]) -> None:
    ckpt, model = olive[4]
    written: dict[str, np.ndarray] = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        written |= load_file(str(f))
    built = {t.name: t for t in onnx.load(str(model / "model.onnx")).graph.initializer}
    qkv = onnx.numpy_helper.to_array(built["model.layers.0.attn.qkv_proj.MatMulNBits.qweight"])
    p = "model.layers.0.self_attn."
    expected = np.concatenate([written[p + f"{x}_proj.qweight"] for x in "qkv"])
    assert qkv.reshape(expected.shape).tobytes() == expected.tobytes()
    down = onnx.numpy_helper.to_array(built["model.layers.1.mlp.down_proj.MatMulNBits.scales"])
    assert np.allclose(down, written["model.layers.1.mlp.down_proj.scales"].astype(np.float32).reshape(-1))


@pytest.mark.parametrize("bits", [4, 8])
def test_the_built_model_serves(bits: int, olive: dict[int, tuple[Path, Path]], start_server: Any) -> None:
    srv = start_server("onnx", ["--model", str(olive[bits][1]), "--served-model-name", "tiny"])
    with httpx.Client() as client:
        reply = complete(client, srv.url, [1, 40, 41, 42], 6, ignore_eos=True)
    assert len(reply["choices"][0]["token_ids"]) == 6 and reply["usage"]["completion_tokens"] == 6
