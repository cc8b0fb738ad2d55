"""The demo's real node (hack/demo): the tiny models it serves, and a completion from each CPU example there.

python hack/demo_real_node.py models NAMESPACE     # make (or reuse) the tiny models, publish them; prints the dir
python hack/demo_real_node.py complete NAMESPACE   # one line per CPU example: its completion through its Service
"""

from __future__ import annotations

import sys

from ib_testkit.demo_node import completions, publish_models
from ib_testkit.real_nodes import tiny_models

if __name__ == "__main__":
    command, namespace = sys.argv[1], sys.argv[2]
    if command == "models":
        print(publish_models(tiny_models(), namespace))
    elif command == "complete":
        for line in completions(namespace):
            print(line, flush=True)
    else:
        sys.exit(f"unknown command {command} (models | complete)")
