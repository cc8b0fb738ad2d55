"""The decoder graph of an onnxruntime-genai model, with the LM head applied to each row's last position only.

As genai's model builder writes it, the decoder computes logits at every input position: a batched prefill of
16 prompts of 32 tokens computes 512 rows of logits, of which genai reads 16 (each row's last prompt token). Here
the LM head's input (the final norm's output, [batch, seq, hidden]) is first gathered at

    index[b] = min(sum(attention_mask[b]) - 1, seq - 1)

which is each row's last prompt token in a prefill from an empty cache with right padding (genai's layout, and
the only multi-token append the server makes) and position 0 in a decode step (seq = 1). The logits output
becomes [batch, 1, vocab]; genai reads that shape as the last-position logits (tested: the same tokens, padded
rows included). On the 30M bench model this is about a fifth of a 16 x 32 prefill's CPU time (bench/peers_onnx).

The rewritten graph (no weights: they stay in the model's external data file) is handed to genai in memory
(og.Config.add_model_data), so a read-only model directory is fine. A graph whose logits do not come straight
from a MatMul / MatMulNBits over a [batch, seq, hidden] input, or that lacks the inputs this needs, is served as it
ships (last_position_head returns None).
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

HEADS = ("MatMul", "MatMulNBits")
MIN_OPSET = 13  # ReduceSum with axes as an input; GatherND batch_dims (12)
P = "ib_last_position/"


def last_position_head(model_file: Path, mask_input: str, logits_output: str) -> bytes | None:
    """The serialized graph with the head on each row's last position, or None when the graph is not one this
    rewrite knows (then serve it unchanged)."""
    model = onnx.load(str(model_file), load_external_data=False)
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    inputs = {i.name for i in graph.input}
    head = next((n for n in graph.node if logits_output in n.output), None)
    out = next((o for o in graph.output if o.name == logits_output), None)
    if opset < MIN_OPSET or mask_input not in inputs or head is None or out is None or head.op_type not in HEADS:
        return None
    dims = out.type.tensor_type.shape.dim
    if len(dims) != 3 or any(n.name.startswith(P) for n in graph.node):
        return None
    hidden = head.input[0]
    nodes = [
        helper.make_node("Cast", [mask_input], [P + "mask"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", [P + "mask", P + "axis1"], [P + "len"], keepdims=1),  # [batch, 1]
        helper.make_node("Sub", [P + "len", P + "one"], [P + "last"]),
        helper.make_node("Shape", [hidden], [P + "shape"]),
        helper.make_node("Gather", [P + "shape", P + "one"], [P + "seq"]),  # scalar
        helper.make_node("Sub", [P + "seq", P + "one"], [P + "seq_last"]),
        helper.make_node("Min", [P + "last", P + "seq_last"], [P + "index"]),  # [batch, 1]
        helper.make_node("GatherND", [hidden, P + "index"], [P + "rows"], batch_dims=1),  # [batch, hidden]
        helper.make_node("Unsqueeze", [P + "rows", P + "axis1"], [P + "hidden"]),  # [batch, 1, hidden]
    ]
    graph.initializer.extend(
        [
            helper.make_tensor(P + "axis1", TensorProto.INT64, [1], [1]),
            helper.make_tensor(P + "one", TensorProto.INT64, [], [1]),
        ]
    )
    at = list(graph.node).index(head)
    for k, node in enumerate(nodes):
        graph.node.insert(at + k, node)
    head.input[0] = P + "hidden"
    dims[1].Clear()
    dims[1].dim_value = 1
    return bytes(model.SerializeToString())
