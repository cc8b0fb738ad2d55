"""Time `select` against large clusters and show that its cost and the status it writes do not grow with the nodes.

Nodes are labelled the way real clusters label them (ib_testkit.gfd: full GFD + NFD labels with their per-node
timestamp and kernel build, a tainted GKE pool, CPU nodes in two zones). Node facts are grouped into hardware
classes once (the operator keeps them in a kopf index); per-node labels stay out of the class, so the number of
classes, the selection time and the size of the reasons stay flat while the node count grows. Prints figures;
asserts nothing.

    .venv/bin/python -m bench.select_nodes [--nodes 100,1000,5000] [--repeat 50] [--synthetic]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from ib_testkit.factories import MODELS, node, spec
from ib_testkit.gfd import real_cluster
from inference_backend.facts import group_nodes
from inference_backend.selection import select

KINDS = [("h100", 8), ("a100-40", 8), ("l4", 1), ("l4", 4), ("a10g", 1), ("t4", 1), (None, 0)]
SPECS = {
    "8B auto + draft": {
        "model": {"modelRef": "llama-3-1-8b"},
        "speculativeDecoding": {"draftModelRef": "llama-3-2-1b"},
    },
    "70B concurrency 32": {"model": {"modelRef": "llama-3-1-70b"}, "objectives": {"concurrency": 32}},
    "GGUF on CPU": {"model": {"modelRef": "llama-3-2-3b-gguf"}, "hardware": {"accelerator": "cpu"}},
}


def make_nodes(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """The synthetic factory nodes (GFD labels without per-node labels)."""
    rnd = random.Random(seed)
    nodes = []
    for i in range(n):
        gpu, count = rnd.choice(KINDS)
        nodes.append(
            node(
                f"node-{i:05d}",
                gpu,
                count,
                cpu=rnd.choice(["16", "32", "96"]),
                memory="256Gi",
                ready=rnd.random() > 0.02,
                unschedulable=rnd.random() < 0.01,
            )
        )
    return nodes


def run(n: int, repeat: int, synthetic: bool) -> None:
    nodes = make_nodes(n) if synthetic else real_cluster(n)
    t0 = time.perf_counter()
    cluster = group_nodes(nodes)
    grouping_ms = (time.perf_counter() - t0) * 1000
    print(f"nodes: {n}, hardware classes: {len(cluster)}, grouping once: {grouping_ms:.1f} ms")
    for name, raw in SPECS.items():
        s = spec(**raw)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            decision = select(s, cluster, MODELS)
            times.append((time.perf_counter() - t0) * 1000)
        p = decision.placement
        where = p.describe() if p else "-"
        status = len(json.dumps(decision.to_status().model_dump(mode="json", by_alias=True, exclude_none=True)))
        reasons = sum(len(r) for r in decision.reasons)
        print(
            f"  select [{name}]: median {statistics.median(times):.2f} ms, max {max(times):.2f} ms; reasons "
            f"{len(decision.reasons)} lines / {reasons} chars, status.decision {status} bytes "
            f"-> {decision.backend} on {where}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", default="100,1000,5000", help="comma-separated node counts")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--synthetic", action="store_true", help="factory nodes instead of real-GFD-labelled ones")
    args = parser.parse_args()
    for n in (int(x) for x in args.nodes.split(",")):
        run(n, args.repeat, args.synthetic)


if __name__ == "__main__":
    main()
