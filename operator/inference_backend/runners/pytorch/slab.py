"""The running batch's KV cache, preallocated: a decode step writes one column in place instead of concatenating.

Per layer, keys and values live in buffers of [row capacity, kv heads, column capacity, head dim]. Batch row r is
row r of every buffer. The live columns are [start, end): every row's cached tokens end at column end - 1 (rows
are left-padded), and `valid` [rows, columns] marks the columns that hold a real token (the attention mask).
A decode step writes column `end` of every row, then `end` moves on; a joining sequence's prefilled KV is copied
into a free row; a leaving row is overwritten by the last row. Buffers are reallocated (the live window copied
over) only when rows or columns run out, with headroom, so that is rare. Padding columns hold zeros or an old
row's finite values: they are masked, and never NaN.

SlabCache is the transformers Cache the model sees during a decode step: its layers write into the slab and
return views of the live window (no copies). Only the full-attention cache API is implemented (update, lengths).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

KV = list[tuple[torch.Tensor, torch.Tensor]]
MIN_HEADROOM = 64  # free columns left after the live window when buffers are (re)allocated
MAX_GROUPS = 4  # row groups attention may be split into (groups())
MAX_CUTS = 32  # candidate group boundaries: every row up to this many rows, evenly spaced ones beyond
GROUP_COST = 96  # one more group's fixed cost, in row-columns of KV read (8 layers' SDPA calls ~ 96 x 2.6 us here)


class Slab:
    def __init__(self, device: torch.device, max_rows: int | None = None) -> None:
        self.device = device
        self.max_rows = max_rows
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=device)
        self.rows = 0
        self.start = 0
        self.end = 0
        self.cache = SlabCache(self)
        self._groups: list[tuple[int, int, int]] | None = None

    @property
    def width(self) -> int:
        return self.end - self.start

    def join(self, kvs: list[KV]) -> None:
        """Copy each prefilled KV ([1, heads, n, dim] per layer) into a new row, right-aligned at column end."""
        longest = max(kv[0][0].shape[-2] for kv in kvs)
        rows = self.rows + len(kvs)
        cap, cols = self.valid.shape
        if self.rows == 0 and rows <= cap and longest + 1 < cols:  # an empty batch: place the window anywhere
            self.start = self.end = min(cols - 1, longest + _margin(longest))
        if rows > cap or longest > self.end or self.end >= cols:
            self._relayout(rows, max(self.width, longest), kvs[0])
        end = self.end
        for j, kv in enumerate(kvs):
            row = self.rows + j
            n = kv[0][0].shape[-2]
            for i, (k, v) in enumerate(kv):
                self.keys[i][row, :, end - n : end] = k[0]
                self.values[i][row, :, end - n : end] = v[0]
            self.valid[row] = False
            self.valid[row, end - n : end] = True
            self.start = min(self.start, end - n)
        self.rows = rows
        self._groups = None

    def step(self) -> torch.Tensor:
        """Before a decode step: room for one more column; returns the 2-D mask [rows, width + 1] of the step."""
        if self.end >= self.valid.shape[1]:
            self._relayout(self.rows, self.width, None)
        self.valid[: self.rows, self.end] = True
        return self.valid[: self.rows, self.start : self.end + 1]

    def advance(self) -> None:
        """After a decode step: every row's new token is cached at column end."""
        self.end += 1

    def remove(self, gone: list[int]) -> None:
        """Drop rows; taking them in descending order, the last row moves into each hole."""
        for r in sorted(gone, reverse=True):  # rows above r are already settled, so `last` is never a gone row
            last = self.rows - 1
            if r != last:
                for buf in (*self.keys, *self.values):
                    buf[r, :, self.start : self.end] = buf[last, :, self.start : self.end]
                self.valid[r] = self.valid[last]
            self.rows -= 1
        if self.rows == 0:
            self.start = self.end = 0
        elif gone:
            used = self.valid[: self.rows, self.start : self.end].any(0)
            self.start += int(used.nonzero()[0])  # drop columns that are padding in every row
        self._groups = None

    def _relayout(self, rows: int, width: int, like: KV | None) -> None:
        """New buffers for `rows` rows and `width` live columns, with headroom on both sides (the left for longer
        prompts joining later, the right for decode steps); the live window is copied over."""
        end = width + _margin(width)
        cols = end + max(MIN_HEADROOM, width // 2)
        cap = self.valid.shape[0]
        if rows > cap:  # grow by doubling, up to the batch limit
            cap = max(rows, min(2 * cap, self.max_rows or 2 * cap))
        old = list(zip(self.keys, self.values, strict=True)) or like or []
        keys = [k.new_zeros((cap, k.shape[1], cols, k.shape[3])) for k, _ in old]
        values = [v.new_zeros((cap, v.shape[1], cols, v.shape[3])) for _, v in old]
        valid = torch.zeros(cap, cols, dtype=torch.bool, device=self.device)
        n, w, s, e = self.rows, self.width, self.start, self.end
        if n:
            for i in range(len(self.keys)):
                keys[i][:n, :, end - w : end] = self.keys[i][:n, :, s:e]
                values[i][:n, :, end - w : end] = self.values[i][:n, :, s:e]
            valid[:n, end - w : end] = self.valid[:n, s:e]
        self.keys, self.values, self.valid = keys, values, valid
        self.start, self.end = (end - w if n else end), end
        self._groups = None

    def groups(self) -> list[tuple[int, int, int]]:
        """Rows split into consecutive groups for attention, each (first row, row after the last, first column any
        of its rows uses): a group reads only its own rows' window, so rows much shorter than the longest skip the
        padding columns. Chosen to minimise the KV read (rows x columns) plus GROUP_COST per group, at most
        MAX_GROUPS; recomputed only when rows join or leave (every row gains one column per step, so the choice
        holds in between). Rows that join together are placed longest first (TorchBackend._join), which makes
        groups pay off."""
        if self._groups is None:
            self._groups = _groups(self._first_columns())
        return self._groups

    def _first_columns(self) -> list[int]:
        live = self.valid[: self.rows, self.start : self.end]
        return [self.start + c for c in live.to(torch.uint8).argmax(1).tolist()]


def _groups(first: list[int]) -> list[tuple[int, int, int]]:
    """The cheapest split of rows 0..n-1 (first[r]: row r's first used column) into at most MAX_GROUPS consecutive
    groups; a group costs its rows x (columns from its smallest first column to a common end) + GROUP_COST. Exact up
    to MAX_CUTS rows; a larger batch is cut only at MAX_CUTS evenly spaced rows (O(MAX_GROUPS x MAX_CUTS^2) either
    way, so a join into a batch of hundreds stays cheap)."""
    n = len(first)
    if n == 0:
        return []
    cuts = list(range(n + 1)) if n <= MAX_CUTS else sorted({n * i // MAX_CUTS for i in range(MAX_CUTS + 1)})
    mins = [min(first[a:b]) for a, b in itertools.pairwise(cuts)]  # per chunk between candidate cuts
    top, m = max(first), len(mins)
    inf = float("inf")
    best = [[inf] * (m + 1) for _ in range(MAX_GROUPS + 1)]  # best[g][j]: chunks [0, j) in g groups
    back = [[0] * (m + 1) for _ in range(MAX_GROUPS + 1)]  # where that last group starts
    best[0][0] = 0
    for g in range(1, MAX_GROUPS + 1):
        for j in range(1, m + 1):
            low = top
            for i in range(j - 1, -1, -1):  # the last group is chunks [i, j); `low` its smallest first column
                low = min(low, mins[i])
                cost = best[g - 1][i] + (cuts[j] - cuts[i]) * (top + 1 - low) + GROUP_COST
                if cost < best[g][j]:
                    best[g][j], back[g][j] = cost, i
    g = min(range(1, MAX_GROUPS + 1), key=lambda k: best[k][m])  # the fewest groups among equally cheap splits
    bounds, j = [m], m
    while g:
        j = back[g][j]
        bounds.append(j)
        g -= 1
    rows = [cuts[c] for c in reversed(bounds)]
    return [(a, b, min(first[a:b])) for a, b in itertools.pairwise(rows)]


def _margin(width: int) -> int:
    return width // 4 + 16


class SlabLayer(CacheLayerMixin):  # type: ignore[no-untyped-call]
    is_sliding = False

    def __init__(self, slab: Slab, index: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.slab, self.index = slab, index
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        s = self.slab
        q = key_states.shape[-2]
        keys, values = s.keys[self.index], s.values[self.index]
        keys[: s.rows, :, s.end : s.end + q] = key_states
        values[: s.rows, :, s.end : s.end + q] = value_states
        return keys[: s.rows, :, s.start : s.end + q], values[: s.rows, :, s.start : s.end + q]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.slab.width + query_length, 0

    def get_seq_length(self) -> int:
        return self.slab.width

    def get_max_length(self) -> int:
        return -1


class SlabCache(Cache):
    def __init__(self, slab: Slab) -> None:
        super().__init__(layers=[])
        self.layers: list[Any] = []  # declared here: mypy cannot see Cache's where transformers is not installed
        self.slab = slab

    def bind(self) -> SlabCache:
        """One layer object per model layer (made once the slab has buffers)."""
        if len(self.layers) != len(self.slab.keys):
            self.layers = [SlabLayer(self.slab, i) for i in range(len(self.slab.keys))]
        return self
