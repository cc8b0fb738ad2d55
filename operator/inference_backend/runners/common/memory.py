"""KV budget arithmetic shared by both runners (no heavy imports)."""

from __future__ import annotations

import os
from pathlib import Path


def host_memory_bytes() -> int:
    """Physical RAM, or the cgroup (v2) limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, elem_size: int) -> int:
    return 2 * num_layers * num_kv_heads * head_dim * elem_size


def kv_budget_tokens(total_bytes: int, fraction: float, weight_bytes: int, bytes_per_token: int) -> int:
    """Tokens of KV that fit in fraction * total memory once the weights are in. Raises when none fit."""
    budget = int(total_bytes * fraction) - weight_bytes
    if budget <= 0:
        raise ValueError(
            f"--kv-cache-memory-fraction {fraction} of {total_bytes / 2**30:.1f} GiB leaves no room for "
            f"the KV cache after {weight_bytes / 2**30:.2f} GiB of weights; raise it"
        )
    return budget // bytes_per_token
