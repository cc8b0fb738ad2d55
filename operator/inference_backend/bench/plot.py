"""bench.png: TTFT p50/p99 and output tokens/s against concurrency or request rate (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

X_LABELS = {"concurrency": "concurrency", "rate": "request rate (req/s)", "sweep": "request rate (req/s)"}


def plot(doc: Mapping[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = sorted(doc["steps"], key=lambda s: s["target"])
    kind = steps[0]["kind"] if steps else "concurrency"
    x = [s["target"] for s in steps]
    fig, (lat, tput) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, style in (("p50", "o-"), ("p99", "s--")):
        y = [s["ttftMs"][key] for s in steps]
        lat.plot(
            [a for a, b in zip(x, y, strict=True) if b is not None],
            [b for b in y if b is not None],
            style,
            label=f"TTFT {key}",
        )
    lat.set_ylabel("time to first token (ms)")
    lat.legend()
    tput.plot(x, [s["outputTokensPerSecond"] for s in steps], "o-", color="tab:green", label="output tokens/s")
    tput.set_ylabel("output tokens/s")
    for ax in (lat, tput):
        ax.set_xlabel(X_LABELS.get(kind, kind))
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        if kind == "concurrency":
            ax.set_xticks(x)
    errored = [s for s in steps if s["errored"]]
    note = f"  ({len(errored)} step(s) with errors)" if errored else ""
    fig.suptitle(f"{doc['model']} at {doc['url']}{note}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
