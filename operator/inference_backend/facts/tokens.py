"""Canonical tokens of accelerator product names: how GFD, device plugins, clouds and people spell one GPU.

``NVIDIA-H100-80GB-HBM3``, ``nvidia-h100-80gb`` and ``H100 80GB`` share the tokens ``h100`` and ``80gb``; ``A10`` and
``A10G`` or ``L40`` and ``L40S`` do not share a model token, so one is never taken for the other (the bug a substring
match has). Pure: no I/O.
"""

from __future__ import annotations

import re

# Words that name the vendor or the product line, not the part: dropped before matching.
NOISE = frozenset(
    {
        "nvidia",
        "tesla",
        "amd",
        "instinct",
        "intel",
        "habana",
        "gpu",
        "graphics",
        "tensor",
        "core",
        "accelerator",
        "module",
        "generation",
        "edition",
    }
)
_SPLIT = re.compile(r"[^a-z0-9]+")
_MEMORY = re.compile(r"^(\d+)(?:g|gb|gib)$")


def tokens(name: str) -> frozenset[str]:
    """Lower-case alphanumeric runs of ``name`` minus the noise words; ``192G`` and ``192GB`` become ``192gb``."""
    out = set()
    for tok in _SPLIT.split(name.lower()):
        if not tok or tok in NOISE:
            continue
        m = _MEMORY.match(tok)
        out.add(f"{m.group(1)}gb" if m else tok)
    return frozenset(out)


def memory_gb(toks: frozenset[str]) -> int | None:
    """The memory size a name spells (``80gb`` -> 80), or None."""
    sizes = [int(t[:-2]) for t in toks if t.endswith("gb") and t[:-2].isdigit()]
    return max(sizes) if sizes else None
