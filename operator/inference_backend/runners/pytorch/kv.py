"""Helpers around transformers' DynamicCache: per-layer (keys, values) lists <-> cache objects.

KV tensors are [batch, kv_heads, seq, head_dim]. Keeping these helpers in one place limits what depends on
the cache internals of the pinned transformers version.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache

KV = list[tuple[torch.Tensor, torch.Tensor]]


def to_list(cache: Any) -> KV:
    return [(layer.keys, layer.values) for layer in cache.layers]


def from_list(kv: KV, config: Any) -> DynamicCache:
    cache = DynamicCache(config=config)
    for i, (k, v) in enumerate(kv):
        cache.update(k, v, i)
    return cache


def truncate(cache: Any, length: int) -> None:
    """Keep the first `length` positions (in place)."""
    for layer in cache.layers:
        if layer.keys is not None and layer.keys.shape[-2] > length:
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]


def slice_kv(kv: KV, n: int) -> KV:
    return [(k[..., :n, :], v[..., :n, :]) for k, v in kv]


def left_pad(kv: KV, length: int) -> KV:
    out = []
    for k, v in kv:
        pad = length - k.shape[-2]
        if pad:
            shape = (*k.shape[:-2], pad, k.shape[-1])
            k = torch.cat([k.new_zeros(shape), k], dim=-2)
            v = torch.cat([v.new_zeros(shape), v], dim=-2)
        out.append((k, v))
    return out


def cat_rows(parts: list[KV]) -> KV:
    layers = range(len(parts[0]))
    return [(torch.cat([p[i][0] for p in parts]), torch.cat([p[i][1] for p in parts])) for i in layers]


def select_rows(kv: KV, rows: torch.Tensor, start: int = 0) -> KV:
    return [(k[rows, :, start:, :], v[rows, :, start:, :]) for k, v in kv]
