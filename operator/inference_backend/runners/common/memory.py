"""KV budget arithmetic shared by both runners (no heavy imports)."""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
"""The container's memory limit: cgroup v2's memory.max, or cgroup v1's memory.limit_in_bytes (a node with cgroup v1,
as the e2e real nodes: without it a pod's runner sized its KV cache to the host's RAM, past its own limit)."""


def host_memory_bytes(limits: tuple[Path, ...] = CGROUP_LIMITS) -> int:
    """Physical RAM, or the container's cgroup memory limit (v2 or v1) when that is lower ("max", or v1's huge
    unlimited value, is no limit)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in limits:
        try:
            limit = path.read_text().strip()
        except OSError:
            continue
        if limit.isdigit():
            total = min(total, int(limit))
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
