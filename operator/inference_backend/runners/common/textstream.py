"""Incremental detokenization with stop strings (held back until they can no longer start a stop string).

lazy: the caller wants the text only at the end (a whole reply): without stop strings to look for, the tokens are
decoded once, at the final push, instead of at every push.
"""

from __future__ import annotations

from typing import Any


class TextStream:
    def __init__(self, tokenizer: Any, stops: list[str], lazy: bool = False) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.lazy = lazy and not stops
        self.decoded = 0  # len(self.ids) when self.text was decoded
        self.holdback = max((len(s) for s in stops), default=1) - 1
        self.ids: list[int] = []
        self.sent = 0  # characters of the decoded text already handed out
        self.text = ""
        self.stopped = False

    def push(self, ids: list[int], final: bool) -> str:
        """Add tokens; return the text that is now safe to send. Sets .stopped when a stop string appeared."""
        self.ids.extend(ids)
        if self.decoded < len(self.ids) and (final or not self.lazy):
            self.text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
            self.decoded = len(self.ids)
        for stop in self.stops:
            at = self.text.find(stop, max(0, self.sent - len(stop)))
            if at >= 0:
                self.text = self.text[:at]
                self.stopped = True
        if self.stopped or final:
            end = len(self.text)
        else:
            end = len(self.text) - self.holdback
            if self.text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the next token
                end = min(end, len(self.text) - 1)
        if end <= self.sent:
            return ""
        out = self.text[self.sent : end]
        self.sent = end
        return out
