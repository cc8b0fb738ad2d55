"""Plot bench/operator_scale.py's JSON as PNG: apply-to-Deployment latency (while creating, and for single changes
once all are settled), time to reconcile all, operator peak memory and API requests per InferenceBackend, each
against the number of InferenceBackends, one line per node count.

    .venv/bin/python -m bench.plot_operator_scale bench/results/operator-scale.json [-o OUT.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

PANELS: list[tuple[str, str, Any]] = [
    ("apply-to-Deployment p99 while creating (ms)", "target 1,000 ms", lambda p: p["applyToDeploymentMs"]["p99"]),
    (
        "p99 of single changes once all are settled (ms)",
        "target 1,000 ms",
        lambda p: p.get("applyOnLoadedMs", {}).get("p99"),
    ),
    ("time to every status (s)", "", lambda p: p["allStatusesS"]),
    ("operator peak memory (MiB)", "target 300 MB", lambda p: p["operatorPeakMiB"]),
    ("API requests per InferenceBackend", "", lambda p: p["apiRequestsPerBackend"]),
    ("API writes on a no-op resync", "target 0", lambda p: p["noopResync"]["apiWrites"]),
]
TARGETS = {"target 1,000 ms": 1000.0, "target 300 MB": 300e6 / 2**20, "target 0": 0.0}


def plot(result: dict[str, Any], out: Path) -> None:
    points = result["points"]
    node_counts = sorted({p["nodes"] for p in points})
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (title, target, value) in zip(axes.flat, PANELS, strict=True):
        for n in node_counts:
            series = sorted((p["backends"], value(p)) for p in points if p["nodes"] == n and value(p) is not None)
            ax.plot([b for b, _ in series], [v for _, v in series], marker="o", label=f"{n:,} nodes")
        if target:
            ax.axhline(TARGETS[target], color="red", linestyle="--", linewidth=1, label=target)
        ax.set_title(title)
        ax.set_xlabel("InferenceBackends")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    rate = points[0]["ratePerS"] if points else 0
    fig.suptitle(
        f"inference-backend operator at scale ({result['machine']['cpus']} cores, "
        f"InferenceBackends created at {rate:g}/s; {result['started']})"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", type=Path)
    parser.add_argument("-o", "--out", type=Path)
    args = parser.parse_args()
    out = args.out or args.json.with_suffix(".png")
    plot(json.loads(args.json.read_text()), out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
