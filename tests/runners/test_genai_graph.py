"""onnx/genai_graph.py: the builder's decoder graph with the LM head on each row's last position gives the logits
of the graph as it ships (right-padded prefill rows included, then decode steps), for fp32, fp16 and int4; a graph
the rewrite does not know is left alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from inference_backend.runners.onnx.genai_graph import last_position_head
from onnx import TensorProto, helper

og = pytest.importorskip("onnxruntime_genai")
PAD = 0
TOL = {"fp32": 1e-4, "int4": 1e-3, "fp16": 2e-2}


@pytest.fixture(scope="module")
def builds(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from ib_testkit.genai_models import build_genai

    root = tmp_path_factory.mktemp("genai-graph")
    out = {"fp32": models["genai"]}
    out.update({p: build_genai(models["tiny"], root / f"tiny-genai-{p}", p) for p in ("fp16", "int4")})
    return out


def load(model_dir: Path, rewrite: bool) -> Any:
    cfg = og.Config(str(model_dir))
    cfg.clear_providers()
    cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": 1}}}}))
    if rewrite:
        head = last_position_head(model_dir / "model.onnx", "attention_mask", "logits")
        assert head is not None
        cfg.add_model_data("model.onnx", head)
    return og.Model(cfg)


def logits_per_step(model: Any, ids: np.ndarray, steps: int) -> list[np.ndarray]:
    """The [rows, vocab] logits after the prefill and after each greedy decode step."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=ids.shape[1] + steps + 1, batch_size=ids.shape[0], do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(ids)
    out = [gen.get_logits().reshape(ids.shape[0], -1).astype(np.float32)]
    for _ in range(steps):
        gen.generate_next_token()
        gen.get_next_tokens()
        out.append(gen.get_logits().reshape(ids.shape[0], -1).astype(np.float32))
    return out


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int4"])
def test_last_position_head_keeps_the_logits(precision: str, builds: dict[str, Path]) -> None:
    rng = np.random.default_rng(1)
    ids = rng.integers(4, 300, (4, 11)).astype(np.int32)
    ids[1, 6:] = PAD  # right padding, as the server lays out prompts of different lengths
    ids[3, 2:] = PAD
    shipped = logits_per_step(load(builds[precision], False), ids, 5)
    rewritten = logits_per_step(load(builds[precision], True), ids, 5)
    for step, (a, b) in enumerate(zip(shipped, rewritten, strict=True)):
        np.testing.assert_allclose(b, a, atol=TOL[precision], rtol=0, err_msg=f"{precision} step {step}")
        assert (a.argmax(-1) == b.argmax(-1)).all(), step
    graph = onnx.load_from_string(last_position_head(builds[precision] / "model.onnx", "attention_mask", "logits"))
    assert graph.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 1


def test_unknown_graphs_are_left_alone(builds: dict[str, Path], tmp_path: Path) -> None:
    assert last_position_head(builds["fp32"] / "model.onnx", "no_such_mask", "logits") is None
    x = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", 4])
    graph = helper.make_graph([helper.make_node("Identity", ["h"], ["logits"])], "g", [x], [y])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert last_position_head(path, "attention_mask", "logits") is None  # logits not from a MatMul
