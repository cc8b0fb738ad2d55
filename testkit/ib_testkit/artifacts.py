"""Small model artifacts written with the formats' own libraries, for `inference-backend model inspect` tests.

    hf_dir        config.json + safetensors (safetensors.numpy, optionally sharded with an index) + tokenizer.json
    llama_shapes  the state-dict names and shapes of LlamaForCausalLM (modeling_llama.py), dense
    moe_shapes    the same with Mixtral's sparse MoE block (modeling_mixtral.py: block_sparse_moe.gate,
                  block_sparse_moe.experts.N.w1/w2/w3)
    moe_gguf      a Mixtral-style GGUF (gguf.GGUFWriter; llama arch with ffn_*_exps tensors, expert_count)
    onnx_graph    an ONNX model (onnx.helper) with weight initializers and past_key_N / past_value_N inputs

The heavy counterparts (a model saved by transformers, the runner's ONNX export, llama.cpp's GGUF converter) are in
tests/runners/test_model_inspect_artifacts.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

Shapes = dict[str, tuple[int, ...]]


def llama_shapes(
    hidden: int, layers: int, heads: int, kv_heads: int, inter: int, vocab: int, tie: bool = False
) -> Shapes:
    head_dim = hidden // heads
    out: Shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        }
    if not tie:
        out["lm_head.weight"] = (vocab, hidden)
    return out


def moe_shapes(hidden: int, layers: int, heads: int, kv_heads: int, inter: int, vocab: int, experts: int) -> Shapes:
    out = {k: v for k, v in llama_shapes(hidden, layers, heads, kv_heads, inter, vocab).items() if ".mlp." not in k}
    for i in range(layers):
        p = f"model.layers.{i}.block_sparse_moe."
        out[p + "gate.weight"] = (experts, hidden)
        for e in range(experts):
            out |= {
                f"{p}experts.{e}.w1.weight": (inter, hidden),
                f"{p}experts.{e}.w2.weight": (hidden, inter),
                f"{p}experts.{e}.w3.weight": (inter, hidden),
            }
    return out


def count(shapes: Shapes) -> int:
    return sum(math.prod(s) for s in shapes.values())


def tokenizer_json(tokens: list[str], added: int = 0) -> dict[str, Any]:
    """A BPE tokenizer.json whose vocabulary is ``tokens`` (the last ``added`` of them as added special tokens)."""
    base = tokens[: len(tokens) - added]
    return {
        "version": "1.0",
        "added_tokens": [
            {
                "id": len(base) + i,
                "content": t,
                "special": True,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
            }
            for i, t in enumerate(tokens[len(base) :])
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(base)}, "merges": []},
    }


def hf_dir(
    out: Path,
    config: dict[str, Any],
    shapes: Shapes,
    dtype: str = "bfloat16",
    shards: int = 1,
    tokens: list[str] | None = None,
    tensor_dtypes: dict[str, str] | None = None,
) -> Path:
    """A Hugging Face model directory: config.json, the tensors (zeros) in ``shards`` safetensors files (with
    model.safetensors.index.json when sharded) and, given ``tokens``, a tokenizer.json."""
    from safetensors.numpy import save_file

    np_dtypes = {
        "float32": np.float32,
        "float16": np.float16,
        "bfloat16": np.float16,
        "int32": np.int32,
        "uint8": np.uint8,
        "int8": np.int8,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    names = list(shapes)
    weight_map: dict[str, str] = {}
    for k in range(shards):
        part = names[k::shards]
        fname = "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        arrays = {}
        for n in part:
            kind = (tensor_dtypes or {}).get(n, dtype)
            arrays[n] = np.zeros(shapes[n], dtype=np_dtypes[kind])
            weight_map[n] = fname
        save_file(arrays, str(out / fname))
        if dtype == "bfloat16":  # numpy has no bfloat16: relabel F16 -> BF16 in the header (same byte size)
            _relabel(out / fname, "F16", "BF16", keep={n for n in part if (tensor_dtypes or {}).get(n)})
    if shards > 1:
        total = sum((out / f).stat().st_size for f in set(weight_map.values()))
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    if tokens is not None:
        (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(tokens, added=3), ensure_ascii=False))
    return out


def _relabel(path: Path, old: str, new: str, keep: set[str]) -> None:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    for name, entry in header.items():
        if name != "__metadata__" and entry["dtype"] == old and name not in keep:
            entry["dtype"] = new
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # padded to 8 bytes as safetensors does; data offsets are relative to the data
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n :])


def moe_gguf(
    path: Path,
    *,
    layers: int = 2,
    embd: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ff: int = 96,
    vocab: list[str],
    experts: int = 4,
    used: int = 2,
) -> Path:
    """A Mixtral-style GGUF: llama architecture, F16 weights, ffn_{gate,up,down}_exps tensors of ``experts``."""
    import gguf

    head_dim = embd // heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("ib-tiny-moe")
    w.add_context_length(2048)
    w.add_embedding_length(embd)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_expert_count(experts)
    w.add_expert_used_count(used)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(vocab)
    w.add_token_merges([])

    def t(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=np.float16 if len(shape) > 1 else np.float32)

    w.add_tensor("token_embd.weight", t(len(vocab), embd))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", t(embd))
        w.add_tensor(p + "attn_q.weight", t(heads * head_dim, embd))
        w.add_tensor(p + "attn_k.weight", t(kv_heads * head_dim, embd))
        w.add_tensor(p + "attn_v.weight", t(kv_heads * head_dim, embd))
        w.add_tensor(p + "attn_output.weight", t(embd, heads * head_dim))
        w.add_tensor(p + "ffn_norm.weight", t(embd))
        w.add_tensor(p + "ffn_gate_inp.weight", t(experts, embd))
        w.add_tensor(p + "ffn_gate_exps.weight", t(experts, ff, embd))
        w.add_tensor(p + "ffn_up_exps.weight", t(experts, ff, embd))
        w.add_tensor(p + "ffn_down_exps.weight", t(experts, embd, ff))
    w.add_tensor("output_norm.weight", t(embd))
    w.add_tensor("output.weight", t(len(vocab), embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def onnx_graph(
    path: Path, *, layers: int, kv_heads: int, head_dim: int, shapes: Shapes, dtype: str = "float32"
) -> Path:
    """An ONNX model: ``shapes`` as initializers (plus an int64 shape constant, not a weight) and KV-cache inputs
    past_key_N / past_value_N [batch, kv_heads, past, head_dim]; one Identity node per initializer keeps it valid."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    np_dtype = {"float32": np.float32, "float16": np.float16}[dtype]
    inits = [numpy_helper.from_array(np.zeros(s, dtype=np_dtype), name) for name, s in shapes.items()]
    inits.append(numpy_helper.from_array(np.array([1, -1, 64], dtype=np.int64), "shape_const"))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    for i in range(layers):
        for kind in ("key", "value"):
            inputs.append(
                helper.make_tensor_value_info(
                    f"past_{kind}_{i}", TensorProto.FLOAT, ["batch", kv_heads, "past", head_dim]
                )
            )
    nodes = [helper.make_node("Identity", [init.name], [f"out_{k}"]) for k, init in enumerate(inits)]
    outputs = [
        helper.make_tensor_value_info(f"out_{k}", init.data_type, list(init.dims)) for k, init in enumerate(inits)
    ]
    graph = helper.make_graph(nodes, "ib-tiny", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
