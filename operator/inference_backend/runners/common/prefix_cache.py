"""A small LRU of prompt-prefix KV caches keyed by token-id prefixes cut at block boundaries.

After a prompt is prefilled, its KV is registered under every block-aligned prefix (16, 32, ... tokens); the
entries are views of one tensor set, so they share memory. A later prompt looks up its longest block-aligned
proper prefix and only prefills the rest. Values are opaque to this module (torch tensors or numpy arrays):
`slicer(kv, n)` cuts a stored value down to its first n tokens.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any


class PrefixCache:
    def __init__(
        self,
        capacity_tokens: int,
        slicer: Callable[[Any, int], Any],
        block: int = 16,
        metrics: Any = None,
    ) -> None:
        self.capacity = capacity_tokens
        self.block = block
        self.slicer = slicer
        self.metrics = metrics
        self._entries: collections.OrderedDict[tuple[int, ...], Any] = collections.OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: list[int], space: int = 0) -> tuple[int, Any]:
        """Longest cached block-aligned prefix shorter than the prompt: (its length, KV) or (0, None). ``space``
        keeps KV computed differently apart (a LoRA adapter's: its k/v projections differ from the base model's)."""
        with self._lock:
            if self.metrics is not None:
                self.metrics.prefix_queries.inc(len(tokens))
            top = (len(tokens) - 1) // self.block * self.block
            for n in range(top, 0, -self.block):
                key = (space, *tokens[:n])
                kv = self._entries.get(key)
                if kv is not None:
                    self._entries.move_to_end(key)
                    if self.metrics is not None:
                        self.metrics.prefix_hits.inc(n)
                    return n, kv
            return 0, None

    def store(self, tokens: list[int], kv: Any, space: int = 0) -> None:
        """Register the KV of `tokens` (at least len(tokens) positions) under each block-aligned prefix."""
        top = len(tokens) // self.block * self.block
        if top == 0 or top > self.capacity:
            return
        with self._lock:
            for n in range(self.block, top + 1, self.block):
                key = (space, *tokens[:n])
                if key in self._entries:
                    self._entries.move_to_end(key)
                    continue
                self._entries[key] = self.slicer(kv, n)
                self._tokens += n
            while self._tokens > self.capacity and self._entries:
                key, _ = self._entries.popitem(last=False)
                self._tokens -= len(key) - 1
