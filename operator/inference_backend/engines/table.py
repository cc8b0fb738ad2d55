"""The engine table of docs/selection.md, made from the registry's cards.

``python -m inference_backend.engines.table`` prints it; tests/test_engine_cards.py fails when the doc differs.
"""

from __future__ import annotations

from inference_backend.engines import REGISTRY
from inference_backend.engines.card import EngineCard

HEADER = (
    "| engine | version | formats | accelerators (min. compute; GPU vendors) | batching (best first) | "
    "prefix cache | speculation | multi-GPU | multi-node |\n|---|---|---|---|---|---|---|---|---|"
)


def _row(c: EngineCard) -> str:
    accel = ", ".join(sorted(c.accelerators))
    if "gpu" in c.accelerators and c.min_compute != (0, 0):
        accel += f" ({c.min_compute[0]}.{c.min_compute[1]}+; {', '.join(sorted(c.devices))})"
    batching = ", ".join(c.batching) + "".join(f" (auto on {a}: {b})" for a, b in sorted(c.auto_batching.items()))
    cells = (
        c.name,
        c.version,
        ", ".join(sorted(c.formats)),
        accel,
        batching,
        "yes" if c.prefix_cache else "no",
        ", ".join(sorted(c.speculative)) or "-",
        "yes" if c.multi_gpu else "no",
        "yes" if c.multi_node else "no",
    )
    return "| " + " | ".join(cells) + " |"


def markdown() -> str:
    return "\n".join([HEADER, *(_row(c) for c in REGISTRY)])


if __name__ == "__main__":
    print(markdown())
