"""Fuzzing `model inspect` with mutated model files: valid small artifacts (a GGUF with a vocabulary and a tensor
table, a safetensors file, a Hugging Face directory with config.json, an index, its shards and tokenizer.json) whose
bytes are then overwritten, truncated or given huge length fields. Every case must give a Model or exit 2 naming the
file (InspectError), never anything else. Shared by tests/test_fuzz_files.py and bench/fuzz_files.py.
"""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from ib_testkit import gguf_files

_HUGE = [2**63 - 1, 2**64 - 1, 2**62, 2**40, 2**32, 2**31, 10**9, 0, 1]


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> Path:
    header, offset, widths = {}, 0, {"F32": 4, "BF16": 2, "I8": 1}
    for name, (dtype, shape) in tensors.items():
        n = widths[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return path


def seeds(root: Path) -> dict[str, Path]:
    """The valid artifacts mutated: name -> the path to inspect."""
    root.mkdir(parents=True, exist_ok=True)
    out = {
        "gguf": gguf_files.llama3_8b_q4_k_m(
            root / "seed.gguf", n_tokens=512, n_merges=200, n_embd=256, n_ff=512, n_layer=2
        )
    }
    out["safetensors"] = _safetensors(root / "seed.safetensors", {"w": ("F32", [4, 8]), "b": ("BF16", [8])})
    hf = root / "hf"
    hf.mkdir(exist_ok=True)
    (hf / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "max_position_embeddings": 2048,
                "quantization_config": {"quant_method": "gptq", "bits": 4},
                "torch_dtype": "float16",
            }
        )
    )
    _safetensors(hf / "model-00001.safetensors", {"model.layers.0.self_attn.q_proj.qweight": ("I8", [8, 64])})
    _safetensors(hf / "model-00002.safetensors", {"lm_head.weight": ("BF16", [64, 32])})
    (hf / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "metadata": {"total_size": 4608},
                "weight_map": {
                    "model.layers.0.self_attn.q_proj.qweight": "model-00001.safetensors",
                    "lm_head.weight": "model-00002.safetensors",
                },
            }
        )
    )
    vocab = {f"t{i}": i for i in range(32)}
    (hf / "tokenizer.json").write_text(
        json.dumps(
            {
                "model": {"type": "BPE", "vocab": vocab, "merges": ["t t1"]},
                "added_tokens": [{"id": 32, "content": "<s>"}],
            }
        )
    )
    out["hf"] = hf
    return out


HF_FILES = ("config.json", "model.safetensors.index.json", "model-00001.safetensors", "tokenizer.json")


@dataclass(frozen=True)
class Mutation:
    seed: str
    file: str
    """For the Hugging Face directory: which of its files is mutated."""
    edits: tuple[tuple[int, bytes], ...]
    """(offset, bytes written there): a byte offset when at least 0, else minus a fraction of the file in 1/1000ths
    (the header's counts and lengths lie in the first few KiB, so most offsets are drawn there)."""
    truncate: int | None
    """Keep this many 1/1000ths of the file."""


@st.composite
def mutations(draw: st.DrawFn) -> Mutation:
    seed = draw(st.sampled_from(["gguf", "safetensors", "hf"]))
    file = draw(st.sampled_from(HF_FILES)) if seed == "hf" else ""
    piece = st.one_of(
        st.binary(min_size=1, max_size=8),
        st.sampled_from(_HUGE).map(lambda n: struct.pack("<Q", n)),
        st.sampled_from(_HUGE).map(lambda n: struct.pack("<Q", n)[:4]),
        st.sampled_from(
            [
                b"[[[[[[[[",
                b"99999999999999999999999999999999999999999999",
                b'"..',
                b"/..",
                b"\xff\xfe",
                b"{}",
                b"null",
                b"-1",
                b"1e999",
            ]
        ),
    )
    offset = st.one_of(st.integers(0, 600), st.integers(0, 1024).map(lambda n: 4 * n), st.integers(-999, -1))
    edits = tuple(draw(st.lists(st.tuples(offset, piece), min_size=0, max_size=4)))
    truncate = draw(st.one_of(st.none(), st.integers(0, 999)))
    return Mutation(seed, file, edits, truncate)


def apply(mutation: Mutation, seeded: dict[str, Path], work: Path) -> Path:
    """A copy of the seed with the mutation applied, under ``work``; the path to inspect."""
    src = seeded[mutation.seed]
    if work.exists():
        shutil.rmtree(work)
    if src.is_dir():
        shutil.copytree(src, work)
        target, result = work / mutation.file, work
    else:
        work.mkdir(parents=True)
        target = result = work / src.name
        shutil.copyfile(src, target)
    data = bytearray(target.read_bytes())
    size = len(data)
    for where, piece in mutation.edits:
        at = min(where, size) if where >= 0 else size * -where // 1000
        data[at : at + len(piece)] = piece
    if mutation.truncate is not None:
        del data[len(data) * mutation.truncate // 1000 :]
    target.write_bytes(bytes(data))
    return result
