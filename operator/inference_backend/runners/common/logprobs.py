"""Token logprobs in OpenAI's two reply shapes.

Chat completions: `choice.logprobs = {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}`
with exactly `top_logprobs` alternatives. Completions (legacy): `choice.logprobs = {tokens, token_logprobs,
top_logprobs: [{token: logprob}], text_offset}`, where each top dict also holds the chosen token (so up to
`logprobs` + 1 entries, as OpenAI documents; keyed by text, so of tokens with the same text the likelier stays)
and text_offset counts characters from the start of the completion.
A token's text is its own decoding (special tokens kept); `bytes` are that text's UTF-8 bytes. A logprob that is
not finite (a probability that underflows to 0) is written as -9999.0, as vLLM does: JSON has no -Infinity.
"""

from __future__ import annotations

import math
from typing import Any

from inference_backend.runners.common.engine import TokenLogprob

FLOOR = -9999.0


def _num(value: float) -> float:
    return value if math.isfinite(value) else FLOOR


class LogprobFormat:
    def __init__(self, tokenizer: Any, chat: bool) -> None:
        self.tokenizer = tokenizer
        self.chat = chat
        self.texts: dict[int, str] = {}
        self.offset = 0  # completions: characters of the completion so far

    def text(self, tid: int) -> str:
        if tid not in self.texts:
            self.texts[tid] = str(self.tokenizer.decode([tid], skip_special_tokens=False))
        return self.texts[tid]

    def empty(self) -> dict[str, Any]:
        if self.chat:
            return {"content": []}
        return {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}

    def extend(self, into: dict[str, Any], ids: list[int], lps: list[TokenLogprob]) -> dict[str, Any]:
        """Append these tokens' logprobs to a reply object made by empty(); returns it."""
        for tid, lp in zip(ids, lps, strict=True):
            text = self.text(tid)
            if self.chat:
                entry = self._chat_entry(text, lp.logprob)
                entry["top_logprobs"] = [self._chat_entry(self.text(a), v) for a, v in lp.top]
                into["content"].append(entry)
            else:
                into["tokens"].append(text)
                into["token_logprobs"].append(_num(lp.logprob))
                top: dict[str, float] = {}
                for a, v in [*lp.top, (tid, lp.logprob)]:  # tokens with the same text: the likelier one stays
                    top.setdefault(self.text(a), _num(v))
                into["top_logprobs"].append(top)
                into["text_offset"].append(self.offset)
                self.offset += len(text)
        return into

    @staticmethod
    def _chat_entry(text: str, logprob: float) -> dict[str, Any]:
        return {"token": text, "logprob": _num(logprob), "bytes": list(text.encode("utf-8", "surrogatepass"))}
