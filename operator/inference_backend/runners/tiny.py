"""Tiny random-weight causal LMs with a locally trained tokenizer, for tests and benchmarks (no downloads).

python -m inference_backend.runners.tiny OUT_DIR [--layers 2] [--seed 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

_TEXT = """
the a an of to in and is was for on with as by at from that this it be are or not have has had
model server token batch cache prefix decode prompt request reply queue speed fast slow small large
red green blue cat dog fox bird tree river stone cloud light night day time world hello question answer
"""
WORDS = _TEXT.split()


def corpus(n: int = 400) -> list[str]:
    import random

    rnd = random.Random(1234)
    lines = []
    for _ in range(n):
        words = [rnd.choice(WORDS) for _ in range(rnd.randint(4, 14))]
        lines.append(" ".join(words).capitalize() + rnd.choice([".", "!", "?", ", 42.", " 7"]))
    return lines


def make_tokenizer(out: Path, vocab_size: int = 320) -> int:
    """Train a byte-level BPE on a generated corpus; save as a transformers tokenizer. Returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    fast.save_pretrained(out)
    return len(fast)


def make_model(out: Path, layers: int = 2, seed: int = 0, hidden: int = 64, vocab_size: int = 320) -> Path:
    """Save a random LlamaForCausalLM (float32) plus the tiny tokenizer in `out`."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    vocab = make_tokenizer(out, vocab_size)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        # Large init spreads the logits so greedy choices are never near-ties (robust exact comparisons).
        initializer_range=0.5,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()  # type: ignore[arg-type]
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    model.save_pretrained(out)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    a = p.parse_args()
    print(make_model(a.out, a.layers, a.seed, a.hidden))


if __name__ == "__main__":
    main()
