"""Export a Hugging Face causal LM to ONNX with KV-cache inputs and outputs.

    python -m inference_backend.runners.onnx.export --model HF_DIR --output ONNX_DIR [--opset 18]

Graph interface (L = layers):
  inputs   input_ids [batch, seq] int64, attention_mask [batch, past+seq] int64 (0 = left padding),
           position_ids [batch, seq] int64, past_key_{i} / past_value_{i} [batch, kv_heads, past, head_dim]
  outputs  logits [batch, seq, vocab],
           present_key_{i} / present_value_{i} [batch, kv_heads, past+seq, head_dim]
The output directory gets model.onnx (+ external data for big models), config.json, the tokenizer files and
ib_onnx.json describing the interface. Needs torch + transformers (the `pytorch` extra), not at serve time.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, DynamicCache

META_FILE = "ib_onnx.json"


class FlatKVWrapper(torch.nn.Module):
    """Takes the past KV as flat tensors and returns logits followed by the flat present KV."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.num_layers = model.config.get_text_config().num_hidden_layers

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        *past: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        cache = DynamicCache(config=self.model.config)
        for i in range(self.num_layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
        )
        flat: list[torch.Tensor] = []
        for layer in out.cache.layers:
            flat += [layer.keys, layer.values]
        return (out.logits, *flat)


def kv_shape(config: Any) -> tuple[int, int, int]:
    c = config.get_text_config()
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return c.num_hidden_layers, heads, head_dim


def export(model_dir: str, out_dir: str, opset: int = 18) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()  # type: ignore[no-untyped-call]
    layers, heads, head_dim = kv_shape(config)
    batch, past, seq = 2, 3, 4
    inputs: list[torch.Tensor] = [
        torch.ones(batch, seq, dtype=torch.long),
        torch.ones(batch, past + seq, dtype=torch.long),
        torch.arange(past, past + seq).repeat(batch, 1),
    ]
    names = ["input_ids", "attention_mask", "position_ids"]
    out_names = ["logits"]
    axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
    }
    for i in range(layers):
        for kind in ("key", "value"):
            inputs.append(torch.zeros(batch, heads, past, head_dim))
            names.append(f"past_{kind}_{i}")
            out_names.append(f"present_{kind}_{i}")
            axes[f"past_{kind}_{i}"] = {0: "batch", 2: "past"}
            axes[f"present_{kind}_{i}"] = {0: "batch", 2: "total"}
    with torch.inference_mode():
        torch.onnx.export(
            FlatKVWrapper(model),
            tuple(inputs),
            str(out / "model.onnx"),
            input_names=names,
            output_names=out_names,
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    config.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    for extra in ("generation_config.json",):
        if (Path(model_dir) / extra).exists():
            shutil.copy(Path(model_dir) / extra, out / extra)
    meta = {"num_layers": layers, "kv_heads": heads, "head_dim": head_dim, "format": "ib-flat-kv-v1"}
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--output", required=True, help="directory to write model.onnx, config and tokenizer to")
    p.add_argument("--opset", type=int, default=18)
    a = p.parse_args()
    print(export(a.model, a.output, a.opset))


if __name__ == "__main__":
    main()
