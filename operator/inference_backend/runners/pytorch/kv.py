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
