"""Tiny random-weight llama-architecture GGUF models for booting the real llama-server.

The models are valid GGUF files written with the ``gguf`` package (pinned in mk/engines.mk): llama
architecture, F32/F16 tensors, and an embedded GPT-2 style byte-level BPE tokenizer (256 byte tokens,
a few merges, ``<|endoftext|>`` as BOS/EOS). Their output is noise, but llama-server loads them, fills
its slots and generates real tokens. A target and a draft written with the same ``n_vocab``/``seed``
share the exact same vocabulary, which is what llama.cpp checks before it accepts ``--model-draft``
(common/speculative.cpp: same vocab type, same BOS/EOS handling, token texts equal).

Head size is ``n_embd // n_head``; keep it a multiple of 32 so q8_0/q4_0 KV caches (block size 32) work.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# Extra merged tokens on top of the 256 byte tokens: (left, right) in byte-level unicode form.
_MERGES: list[tuple[str, str]] = [
    ("Ġ", "t"),
    ("h", "e"),
    ("Ġ", "a"),
    ("i", "n"),
    ("Ġt", "he"),
    ("e", "r"),
    ("o", "n"),
    ("Ġ", "s"),
    ("r", "e"),
    ("Ġ", "w"),
    ("a", "t"),
    ("e", "n"),
    ("Ġ", "o"),
    ("Ġ", "c"),
    ("i", "s"),
    ("o", "r"),
    ("e", "s"),
    ("Ġ", "b"),
    ("a", "n"),
    ("l", "l"),
]
EOS_TEXT = "<|endoftext|>"


def _bytes_to_unicode() -> list[str]:
    """GPT-2's reversible byte -> printable unicode mapping, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    out: dict[int, int] = {b: b for b in printable}
    n = 0
    for b in range(256):
        if b not in out:
            out[b] = 256 + n
            n += 1
    return [chr(out[b]) for b in range(256)]


def tiny_vocab(n_vocab: int | None = None) -> tuple[list[str], list[int], list[str], int]:
    """Return (tokens, token_types, merges, eos_id). ``n_vocab`` pads with unused control tokens."""
    tokens = _bytes_to_unicode()
    merges: list[str] = []
    for left, right in _MERGES:
        merges.append(f"{left} {right}")
        tokens.append(left + right)
    types = [1] * len(tokens)  # NORMAL
    eos_id = len(tokens)
    tokens.append(EOS_TEXT)
    types.append(3)  # CONTROL
    if n_vocab is not None:
        if n_vocab < len(tokens):
            raise ValueError(f"n_vocab must be >= {len(tokens)}")
        while len(tokens) < n_vocab:
            tokens.append(f"<|unused_{len(tokens)}|>")
            types.append(5)  # UNUSED
    return tokens, types, merges, eos_id


def write_tiny_llama_gguf(
    path: str | Path,
    *,
    n_layer: int = 2,
    n_embd: int = 128,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 256,
    n_vocab: int | None = 320,
    n_ctx_train: int = 4096,
    seed: int = 0,
    f16: bool = False,
    name: str = "ib-tiny-llama",
) -> Path:
    """Write a random-weight llama GGUF to ``path`` and return it.

    ``seed`` only drives the weights; the vocabulary depends on ``n_vocab`` alone, so a target and a
    draft with the same ``n_vocab`` are vocab-compatible whatever their seeds and depths.
    """
    import gguf  # the package, not llama.cpp's in-tree copy

    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must be divisible by n_head, and n_head by n_head_kv")
    head_dim = n_embd // n_head
    tokens, types, merges, eos_id = tiny_vocab(n_vocab)
    vocab = len(tokens)
    rng = np.random.default_rng(seed)
    dtype = np.float16 if f16 else np.float32

    def w(*shape: int) -> np.ndarray:
        # numpy shape is (rows=out, cols=in); gguf stores it reversed as ggml's ne = [in, out]
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)  # norms stay F32

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eos_id)
    writer.add_eos_token_id(eos_id)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)

    writer.add_tensor("token_embd.weight", w(vocab, n_embd))
    for i in range(n_layer):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones(n_embd))
        writer.add_tensor(p + "attn_q.weight", w(n_head * head_dim, n_embd))
        writer.add_tensor(p + "attn_k.weight", w(n_head_kv * head_dim, n_embd))
        writer.add_tensor(p + "attn_v.weight", w(n_head_kv * head_dim, n_embd))
        writer.add_tensor(p + "attn_output.weight", w(n_embd, n_head * head_dim))
        writer.add_tensor(p + "ffn_norm.weight", ones(n_embd))
        writer.add_tensor(p + "ffn_gate.weight", w(n_ff, n_embd))
        writer.add_tensor(p + "ffn_up.weight", w(n_ff, n_embd))
        writer.add_tensor(p + "ffn_down.weight", w(n_embd, n_ff))
    writer.add_tensor("output_norm.weight", ones(n_embd))
    writer.add_tensor("output.weight", w(vocab, n_embd))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_target_and_draft(directory: str | Path, *, n_vocab: int = 320) -> tuple[Path, Path]:
    """A 2-layer target and a 1-layer draft sharing one vocabulary (for ``-md``)."""
    directory = Path(directory)
    target = write_tiny_llama_gguf(directory / "tiny-target.gguf", n_layer=2, n_vocab=n_vocab, seed=1)
    draft = write_tiny_llama_gguf(
        directory / "tiny-draft.gguf", n_layer=1, n_vocab=n_vocab, seed=2, name="ib-tiny-llama-draft"
    )
    return target, draft
