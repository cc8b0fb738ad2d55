"""The long fuzz run: N specs generated from the CRD's schema (default 10,000) against garbage node lists, each
checked by ib_testkit.fuzz.run_case (pydantic and the CRD agree; select/render never raise; children valid); half
the cases carry hostile text in one string field of the spec (ib_testkit.fuzz.hostile_strings), and no rendered
child may let the kubelet expand a variable (ib_testkit.fuzz.expansion_leaks).

    python -m bench.fuzz [--cases N] [--seed S]

Prints the counts (cases, crashes, admitted, refused by pydantic and why, CLI exit statuses, children rendered)
as JSON; exit 1 when any case crashed. Cases come from hypothesis's generators (no
shrinking: the first failures are printed as they are).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ib_testkit.fuzz import (
    Crash,
    backends,
    cel_messages,
    child_name_problems,
    crd_string_fields,
    expansion_leaks,
    hostile_strings,
    node_lists,
    run_case,
    set_path,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args(argv)
    cel = cel_messages()
    fields = crd_string_fields()
    counts: Counter[str] = Counter(
        {"crashes": 0, "expansion leaks": 0, "invalid child names": 0}
    )  # printed even when 0
    failures: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:

        @settings(
            max_examples=args.cases,
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
            phases=["generate"],
        )
        @given(backends(), node_lists(), st.one_of(st.none(), st.tuples(st.sampled_from(fields), hostile_strings())))
        def case(body: dict, nodes: dict, hostile: tuple[str, str] | None) -> None:  # type: ignore[type-arg]
            counts["cases"] += 1
            if hostile is not None:
                counts["cases with hostile text in a string field"] += 1
                body["spec"] = set_path(body["spec"], *hostile)
            try:
                outcome = run_case(body, nodes, Path(tmp), cel)
            except Crash as exc:
                counts["crashes"] += 1
                if len(failures) < 5:
                    failures.append(f"{exc}\n  spec: {json.dumps(body)[:2000]}\n  nodes: {json.dumps(nodes)[:1000]}")
                return
            counts["admitted by pydantic" if outcome.pydantic_ok else "refused by pydantic"] += 1
            counts["structurally valid"] += outcome.structural_ok
            counts[f"select exit {outcome.select_rc}"] += 1
            counts[f"render exit {outcome.render_rc}"] += 1
            counts["children rendered"] += len(outcome.children)
            problems = child_name_problems(outcome.children)
            counts["invalid child names"] += len(problems)
            leaks = expansion_leaks(outcome.children)
            counts["expansion leaks"] += len(leaks)
            if leaks and len(failures) < 5:
                failures.append(f"expansion: {leaks[:2]}\n  spec: {json.dumps(body)[:2000]}")

        random.seed(args.seed)
        case()
    counts["seconds"] = round(time.perf_counter() - started)
    print(json.dumps(dict(sorted(counts.items())), indent=1))
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if counts["crashes"] or counts["invalid child names"] or counts["expansion leaks"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
