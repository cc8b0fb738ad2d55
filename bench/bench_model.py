"""The engine-profile bench model: ONE random-weight Llama-architecture model, written in three formats.

    safetensors  PyTorch runner            make_safetensors()  config.json, model.safetensors, tokenizer
    ONNX         our ONNX Runtime server   export_onnx()       the runner's own exporter (runners/onnx/export.py)
    GGUF         llama-server              convert_gguf()      llama.cpp's convert_hf_to_gguf.py (bench/gguf_convert.py)

The shapes live in PRESETS (the one place they are defined). Weights are random (seeded), the tokenizer is a
byte-level BPE trained here on generated text (no downloads), sized to the preset's vocabulary so that every id the
model can produce is a real token with text. Heavy imports (torch, transformers, tokenizers) happen inside functions.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ib_testkit.llama_server import llama_cpp_source

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BenchModel:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    context: int
    dtype: str  # the safetensors dtype, and what every format is served in (float32 on CPU, bfloat16 on GPU)
    init_range: float
    """Weight init std. Large on the small models: logits spread wide, so greedy choices are never near-ties and
    the cross-format token comparison is exact; 0.02 (Llama's own) for the 7B shape (no exact-match claim there)."""
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameters(self) -> int:
        """Parameter count of this shape (untied embeddings, no biases), as LlamaForCausalLM builds it."""
        attn = self.hidden * self.hidden * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        mlp = 3 * self.hidden * self.intermediate
        norms = 2 * self.hidden
        return self.layers * (attn + mlp + norms) + 2 * self.vocab * self.hidden + self.hidden

    def kv_bytes_per_token(self, elem_size: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * elem_size


PRESETS: dict[str, BenchModel] = {
    # CPU profiles on a 2-core machine: ~30M parameters, 128 MB in float32 (see docs/benchmarks-gpu.md, bench/results).
    "cpu": BenchModel(
        "ib-bench-30m",
        hidden=512,
        layers=8,
        heads=8,
        kv_heads=4,
        intermediate=1408,
        vocab=8192,
        context=512,
        dtype="float32",
        init_range=0.5,
    ),
    # The reduced mode of bench/gpu/h200.sh and the tests: the shape of runners/tiny.py's test model.
    "tiny": BenchModel(
        "ib-bench-tiny",
        hidden=64,
        layers=2,
        heads=4,
        kv_heads=2,
        intermediate=128,
        vocab=320,
        context=512,
        dtype="float32",
        init_range=0.5,
    ),
    # Llama-2-7B's architecture (hidden 4096, 32 layers, 32 heads, no GQA, intermediate 11008, vocab 32000), bf16.
    "llama2-7b": BenchModel(
        "ib-bench-llama2-7b",
        hidden=4096,
        layers=32,
        heads=32,
        kv_heads=32,
        intermediate=11008,
        vocab=32000,
        context=4096,
        dtype="bfloat16",
        init_range=0.02,
    ),
}

_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
_WEIGHTS = [12, 9, 8, 8, 7, 7, 6, 6, 4, 4, 3, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1]


def tokenizer_corpus(vocab: int, seed: int = 7) -> list[str]:
    """runners/tiny.py's sentences plus seeded pseudo-words, enough distinct pairs for ``vocab`` BPE merges."""
    from inference_backend.runners.tiny import corpus

    rnd = random.Random(seed)
    lines = corpus()
    for _ in range(max(0, vocab - 320) * 2):
        words = ["".join(rnd.choices(_LETTERS, _WEIGHTS, k=rnd.randint(2, 9))) for _ in range(rnd.randint(4, 14))]
        lines.append(" ".join(words))
    return lines


def make_tokenizer(out: Path, vocab: int) -> int:
    """Byte-level BPE (GPT-2 pre-tokenizer, no prefix space) of exactly ``vocab`` ids, saved for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tokenizer_corpus(vocab), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    if len(fast) != vocab:
        raise RuntimeError(f"the BPE trainer reached {len(fast)} tokens, not {vocab}: enlarge tokenizer_corpus()")
    fast.save_pretrained(out)
    return len(fast)


def llama_skeleton(m: BenchModel, out: Path) -> None:
    """The tokenizer and a bfloat16 LlamaForCausalLM config.json of `m` in `out` (no weights): the part of a
    checkpoint that the shard-by-shard writers (bench/profiles_7b.py, bench/genai_random.py) share."""
    from transformers import LlamaConfig

    out.mkdir(parents=True, exist_ok=True)
    make_tokenizer(out, m.vocab)
    LlamaConfig(
        vocab_size=m.vocab,
        hidden_size=m.hidden,
        intermediate_size=m.intermediate,
        num_hidden_layers=m.layers,
        num_attention_heads=m.heads,
        num_key_value_heads=m.kv_heads,
        max_position_embeddings=m.context,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
        dtype="bfloat16",
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(out)


def make_safetensors(m: BenchModel, out: Path, device: str = "cpu") -> Path:
    """Write the random LlamaForCausalLM (``m.dtype``) and its tokenizer to ``out``; reuse a complete one."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    marker = out / "ib_bench_model.json"
    if marker.exists() and json.loads(marker.read_text()) == asdict(m):
        return out
    out.mkdir(parents=True, exist_ok=True)
    make_tokenizer(out, m.vocab)
    config = LlamaConfig(
        vocab_size=m.vocab,
        hidden_size=m.hidden,
        intermediate_size=m.intermediate,
        num_hidden_layers=m.layers,
        num_attention_heads=m.heads,
        num_key_value_heads=m.kv_heads,
        max_position_embeddings=m.context,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        initializer_range=m.init_range,
        tie_word_embeddings=False,
    )
    dtype = getattr(torch, m.dtype)
    torch.manual_seed(m.seed)
    with torch.device(device):  # the 7B shape is initialised on the GPU (seconds, not minutes on the host)
        model = LlamaForCausalLM._from_config(config, dtype=dtype).eval()  # type: ignore[no-untyped-call]
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0)  # type: ignore[no-untyped-call]
    model.save_pretrained(out)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()  # the servers need the device memory, not this process
    marker.write_text(json.dumps(asdict(m), indent=2) + "\n")
    return out


def export_onnx(hf_dir: Path, out: Path) -> Path:
    """The ONNX Runtime server's model, through the runner's own exporter (float32, KV-cache inputs/outputs)."""
    from inference_backend.runners.onnx.export import export

    marker = out / "ib_bench_model.json"
    source = (hf_dir / "ib_bench_model.json").read_text()
    if marker.exists() and marker.read_text() == source:
        return out
    export(str(hf_dir), str(out))
    marker.write_text(source)
    return out


GGUF_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def convert_gguf(hf_dir: Path, out_file: Path, dtype: str, timeout: float = 900) -> Path:
    """llama.cpp's convert_hf_to_gguf.py on ``hf_dir`` (same dtype, no requantization), via bench/gguf_convert.py."""
    marker = out_file.with_suffix(".json")
    source = (hf_dir / "ib_bench_model.json").read_text()
    if out_file.exists() and marker.exists() and marker.read_text() == source:
        return out_file
    src = llama_cpp_source()
    # the converter and its packages come from the llama.cpp source, before anything the caller has on PYTHONPATH
    pythonpath = [str(src), str(src / "gguf-py"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    cmd = [
        sys.executable,
        "-m",
        "bench.gguf_convert",
        str(hf_dir.resolve()),
        "--outfile",
        str(out_file.resolve()),
        "--outtype",
        GGUF_TYPES[dtype],
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n{(res.stdout + res.stderr)[-4000:]}")
    marker.write_text(source)
    return out_file


def facts(m: BenchModel, hf_dir: Path, onnx_dir: Path | None, gguf: Path | None) -> dict[str, Any]:
    """Parameters (counted from the saved weights), dtype and the bytes of each format, for the provenance."""
    import torch
    from safetensors import safe_open

    params = 0
    for f in sorted(hf_dir.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for key in st.keys():  # noqa: SIM118 (safe_open has no __iter__)
                params += _numel(st.get_slice(key).get_shape())
    out: dict[str, Any] = {
        "name": m.name,
        "shape": asdict(m),
        "parameters": params,
        "parametersFromShape": m.parameters(),
        "dtype": m.dtype,
        "safetensorsBytes": sum(f.stat().st_size for f in hf_dir.glob("*.safetensors")),
        "kvBytesPerTokenF16": m.kv_bytes_per_token(2),
        "kvBytesPerTokenF32": m.kv_bytes_per_token(4),
        "torch": torch.__version__,
    }
    if onnx_dir is not None:
        # model.onnx plus its external data files (named after tensors), not config/tokenizer files
        out["onnxBytes"] = sum(f.stat().st_size for f in onnx_dir.iterdir() if f.suffix not in (".json", ".txt"))
    if gguf is not None:
        out["ggufBytes"] = gguf.stat().st_size
        out["ggufType"] = GGUF_TYPES[m.dtype]
    return out


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
