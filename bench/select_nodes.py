"""Time one `select` against a large cluster (default 5,000 nodes).

Node facts are grouped into hardware classes once (the operator keeps them in a kopf index), so the cost of a
selection grows with the number of classes, not of nodes. Prints figures; asserts nothing.

    .venv/bin/python -m bench.select_nodes [--nodes 5000] [--repeat 50]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from ib_testkit.factories import MODELS, node, spec
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


def make_nodes(n: int, seed: int = 7) -> list[dict]:  # type: ignore[type-arg]
    rnd = random.Random(seed)
    nodes = []
    for i in range(n):
        gpu, count = rnd.choice(KINDS)
        nodes.append(node(f"node-{i:05d}", gpu, count, cpu=rnd.choice(["16", "32", "96"]), memory="256Gi",
                          ready=rnd.random() > 0.02, unschedulable=rnd.random() < 0.01))  # fmt: skip
    return nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    nodes = make_nodes(args.nodes)
    t0 = time.perf_counter()
    cluster = group_nodes(nodes)
    grouping_ms = (time.perf_counter() - t0) * 1000
    print(f"nodes: {args.nodes}, hardware classes: {len(cluster)}, grouping once: {grouping_ms:.1f} ms")
    for name, raw in SPECS.items():
        s = spec(**raw)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            decision = select(s, cluster, MODELS)
            times.append((time.perf_counter() - t0) * 1000)
        p = decision.placement
        where = p.describe() if p else "-"
        print(f"select [{name}]: median {statistics.median(times):.2f} ms, max {max(times):.2f} ms "
              f"-> {decision.backend} on {where}")  # fmt: skip


if __name__ == "__main__":
    main()
