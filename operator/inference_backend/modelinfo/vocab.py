"""Vocabulary identity: the token strings in id order, from a tokenizer.json or a GGUF token list, and their hash.

The hash is sha256 over the JSON array of the token strings in id order (ids without a token are ""), so a
Hugging Face tokenizer.json and the GGUF that llama.cpp's converter makes from it hash alike (the converter copies
the token strings, added tokens included; it pads the list with [PADn] tokens up to the config's vocab_size where
the tokenizer is shorter, and then the hashes differ, as the vocabularies do).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inference_backend.modelinfo.errors import InspectError, read_json

MAX_TOKENIZER_BYTES = 64 * 2**20
"""tokenizer.json is read whole: the largest published ones are about 33 MB (Gemma 3's 262,144 tokens)."""
MAX_TOKENIZER_ITEMS = 4_000_000
"""JSON values in it (Llama 3's 128,256 tokens and 280,147 merge pairs are about 700,000); with the size bound, what
reading it may allocate stays under 1 GiB."""


def vocab_hash(tokens: Sequence[str]) -> str:
    data = json.dumps(list(tokens), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tokenizer_json_tokens(path: Path) -> list[str]:
    """The token strings of a Hugging Face tokenizer.json in id order: the model's vocabulary plus added tokens."""
    doc = read_json(path, MAX_TOKENIZER_BYTES, MAX_TOKENIZER_ITEMS)
    if not isinstance(doc.get("model"), dict):
        raise InspectError(f"{path}: not a tokenizer.json (no 'model' object)")
    by_id: dict[int, str] = {}
    vocab: Any = doc["model"].get("vocab")
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: {token: id}
        for token, i in vocab.items():
            if isinstance(i, int):
                by_id[i] = token
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...] in id order
        for i, entry in enumerate(vocab):
            if isinstance(entry, list) and entry and isinstance(entry[0], str):
                by_id[i] = entry[0]
    else:
        raise InspectError(f"{path}: model.vocab is neither a token map nor a piece list")
    for added in doc.get("added_tokens") or []:
        if isinstance(added, dict) and isinstance(added.get("id"), int) and isinstance(added.get("content"), str):
            by_id[added["id"]] = added["content"]
    if not by_id:
        raise InspectError(f"{path}: the vocabulary is empty")
    if min(by_id) < 0:
        raise InspectError(f"{path}: negative token id {min(by_id)}")
    return [by_id.get(i, "") for i in range(max(by_id) + 1)]
