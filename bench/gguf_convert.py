"""Run llama.cpp's own convert_hf_to_gguf.py, accepting the bench model's locally trained BPE tokenizer.

    PYTHONPATH=LLAMA_CPP_DIR:LLAMA_CPP_DIR/gguf-py python -m bench.gguf_convert HF_DIR --outfile OUT.gguf --outtype f32

The arguments are convert_hf_to_gguf.py's own command line; the converter, its `conversion` package and llama.cpp's
in-tree gguf-py are imported from the llama.cpp source on PYTHONPATH (bench_model.convert_gguf sets it).

The converter identifies a BPE pre-tokenizer by hashing the token ids of a fixed probe text and refuses hashes it
does not know (``NotImplementedError: BPE pre-tokenizer was not recognized``); every tokenizer trained here has a
new hash. This wrapper changes exactly that one decision and nothing else: when the hash is unknown AND the
tokenizer's pre-tokenizer is the plain GPT-2 one (``ByteLevel`` with its regex, no prefix space, which is what
bench/bench_model.make_tokenizer builds), it answers ``gpt-2``, llama.cpp's name for that pre-tokenizer
(src/llama-vocab.cpp LLAMA_VOCAB_PRE_TYPE_GPT2). Any other unknown tokenizer is still refused. Second, the
converter imports sentencepiece before it looks for tokenizer.model (conversion/base.py
_create_vocab_sentencepiece); without that file it falls back to the GPT-2 vocab path anyway, so the wrapper raises
the converter's own FileNotFoundError first and sentencepiece need not be installed. Weights, the Q/K rotary
permutation and all metadata are the converter's own. It runs in the runners venv (it needs torch, transformers,
numpy).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("gguf_convert")


def is_plain_gpt2_pretokenizer(tokenizer_json: dict[str, Any]) -> bool:
    """True for a tokenizer.json whose pre-tokenizer is GPT-2's: ByteLevel, regex on, no prefix space."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    model = tokenizer_json.get("model") or {}
    return (
        model.get("type") == "BPE"
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True) is True
        and pre.get("add_prefix_space") is False
        and tokenizer_json.get("normalizer") is None
    )


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    try:
        import convert_hf_to_gguf  # the converter module (it imports llama.cpp's `conversion` package and gguf-py)
        from conversion.base import TextModel
    except ModuleNotFoundError as e:
        raise SystemExit(f"{e}: the llama.cpp source is not on PYTHONPATH\n\n{__doc__}") from e
    sys.argv = [str(convert_hf_to_gguf.__file__), *argv]  # the converter parses sys.argv itself

    original = TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self: Any, tokenizer: Any) -> str:
        try:
            return str(original(self, tokenizer))
        except NotImplementedError:
            tokenizer_file = Path(self.dir_model) / "tokenizer.json"
            if not is_plain_gpt2_pretokenizer(json.loads(tokenizer_file.read_text(encoding="utf-8"))):
                raise
            log.warning(
                "unknown BPE hash, but %s has the plain GPT-2 pre-tokenizer: tokenizer.ggml.pre = gpt-2", tokenizer_file
            )
            return "gpt-2"

    create_sentencepiece = TextModel._create_vocab_sentencepiece

    def _create_vocab_sentencepiece(self: Any) -> Any:
        path = Path(self.dir_model) / "tokenizer.model"
        if not path.is_file():
            raise FileNotFoundError(f"File not found: {path}")  # the converter's own error, before the import
        return create_sentencepiece(self)

    TextModel.get_vocab_base_pre = get_vocab_base_pre
    TextModel._create_vocab_sentencepiece = _create_vocab_sentencepiece
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main(sys.argv[1:])
