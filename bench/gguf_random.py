"""Write a random-weight GGUF at a real Llama shape (default Llama-2-7B) in Q8_0 or llama.cpp's Q4_K_M mix.

    PYTHONPATH=LLAMA_CPP_DIR/gguf-py python -m bench.gguf_random OUT.gguf --type q8_0|q4_k_m

The file is written with the gguf package (llama.cpp's own gguf-py, as bench/gguf_convert.py uses), tensor by
tensor, so memory stays at one tensor. gguf-py quantizes Q8_0 but not the K-quants, and quantizing 6.7B random floats
in numpy would take longer than measuring them; the blocks are therefore random bytes in each type's block layout
(ggml-common.h) with the scale fields set to finite fp16 values, weights of the usual ~0.02 magnitude. Speed does
not depend on the values. Q4_K_M is llama.cpp's mix (llama_tensor_get_type): Q6_K for output.weight and for
attn_v/ffn_down of the layers `use_more_bits` picks, Q4_K elsewhere; norms stay F32.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Shape:
    vocab: int = 32000
    hidden: int = 4096
    layers: int = 32
    heads: int = 32
    kv_heads: int = 32
    ffn: int = 11008
    context: int = 4096

    def parameters(self) -> int:
        head_dim = self.hidden // self.heads
        attn = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * head_dim
        per_layer = attn + 3 * self.hidden * self.ffn + 2 * self.hidden
        return self.layers * per_layer + 2 * self.vocab * self.hidden + self.hidden


LLAMA2_7B = Shape()
SMALL = Shape(vocab=32000, hidden=256, layers=2, heads=4, kv_heads=4, ffn=512, context=2048)  # smoke tests
# (block elements, block bytes, byte offsets of fp16 scale fields and the value each is set to)
BLOCKS: dict[str, tuple[int, int, tuple[tuple[int, float], ...]]] = {
    "Q8_0": (32, 34, ((0, 0.02 / 74),)),  # d, then 32 int8 (std ~74)
    "Q4_K": (256, 144, ((0, 0.02 / 8 / 32), (2, 0.02 / 8 / 32))),  # d, dmin, 12 scale bytes, 128 nibble bytes
    "Q6_K": (256, 210, ((208, 0.02 / 18 / 32),)),  # ql 128, qh 64, 16 int8 scales, d
}
FILE_TYPES = {"q8_0": 7, "q4_k_m": 15}  # llama_ftype: LLAMA_FTYPE_MOSTLY_Q8_0, LLAMA_FTYPE_MOSTLY_Q4_K_M


def _more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's use_more_bits (src/llama-quant.cpp)."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def tensor_types(shape: Shape, ftype: str) -> list[tuple[str, tuple[int, int] | tuple[int], str]]:
    """(name, numpy shape (out, in), ggml type) of every tensor, in file order."""
    head_dim = shape.hidden // shape.heads
    kv = shape.kv_heads * head_dim

    def q(name: str, layer: int | None = None) -> str:
        if ftype == "q8_0":
            return "Q8_0"
        if name == "output" or (
            name in ("attn_v", "ffn_down") and layer is not None and _more_bits(layer, shape.layers)
        ):
            return "Q6_K"
        return "Q4_K"

    out: list[tuple[str, Any, str]] = [("token_embd.weight", (shape.vocab, shape.hidden), q("token_embd"))]
    for i in range(shape.layers):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (shape.hidden,), "F32"),
            (b + "attn_q.weight", (shape.hidden, shape.hidden), q("attn_q", i)),
            (b + "attn_k.weight", (kv, shape.hidden), q("attn_k", i)),
            (b + "attn_v.weight", (kv, shape.hidden), q("attn_v", i)),
            (b + "attn_output.weight", (shape.hidden, shape.hidden), q("attn_output", i)),
            (b + "ffn_norm.weight", (shape.hidden,), "F32"),
            (b + "ffn_gate.weight", (shape.ffn, shape.hidden), q("ffn_gate", i)),
            (b + "ffn_up.weight", (shape.ffn, shape.hidden), q("ffn_up", i)),
            (b + "ffn_down.weight", (shape.hidden, shape.ffn), q("ffn_down", i)),
        ]
    out += [("output_norm.weight", (shape.hidden,), "F32"), ("output.weight", (shape.vocab, shape.hidden), q("output"))]
    return out


def random_blocks(rng: np.random.Generator, rows: int, cols: int, qtype: str) -> np.ndarray:
    elements, size, scales = BLOCKS[qtype]
    data = rng.integers(0, 256, size=(rows, cols // elements, size), dtype=np.uint8)
    for offset, value in scales:
        data[:, :, offset : offset + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
    return data.reshape(rows, -1)


def vocabulary(n: int) -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style: <unk>, <s>, </s>, the 256 byte tokens, then distinct words."""
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    types = [2, 3, 3, *([6] * 256)]  # UNKNOWN, CONTROL, BYTE
    tokens += [f"\u2581w{i}" for i in range(n - len(tokens))]
    types += [1] * (n - len(types))  # NORMAL
    return tokens, [-float(i) for i in range(n)], types


def write(path: Path, ftype: str, shape: Shape = LLAMA2_7B, seed: int = 0) -> dict[str, Any]:
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"random-llama-{shape.parameters() / 1e9:.1f}b-{ftype}")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(shape.hidden // shape.heads)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(shape.vocab)
    w.add_file_type(FILE_TYPES[ftype])
    tokens, scores, types = vocabulary(shape.vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    layout = tensor_types(shape, ftype)
    weight_bytes = 0
    for name, dims, qtype in layout:
        if qtype == "F32":
            w.add_tensor_info(name, dims, np.dtype(np.float32), 4 * dims[0])
            continue
        elements, size, _ = BLOCKS[qtype]
        nbytes = dims[0] * dims[1] // elements * size
        weight_bytes += nbytes
        w.add_tensor_info(
            name,
            (dims[0], dims[1] // elements * size),
            np.dtype(np.uint8),
            nbytes,
            raw_dtype=gguf.GGMLQuantizationType[qtype],
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _name, dims, qtype in layout:
        if qtype == "F32":
            w.write_tensor_data(np.ones(dims, dtype=np.float32))
        else:
            w.write_tensor_data(random_blocks(rng, dims[0], dims[1], qtype))
    w.close()
    return {
        "path": str(path),
        "type": ftype,
        "parameters": shape.parameters(),
        "fileBytes": path.stat().st_size,
        "gguf": getattr(gguf, "__version__", "llama.cpp gguf-py"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--type", choices=sorted(FILE_TYPES), default="q8_0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--small", action="store_true", help="a tiny shape (smoke tests)")
    a = p.parse_args()
    print(write(a.out, a.type, SMALL if a.small else LLAMA2_7B, seed=a.seed))


if __name__ == "__main__":
    main()
