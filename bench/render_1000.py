"""Time to render 1,000 InferenceBackends (selection excluded, then included). Target: under 1 s for render.

Run: .venv/bin/python -m bench.render_1000
"""

from __future__ import annotations

import time

from ib_testkit.golden import INPUTS, decide
from inference_backend.render import render, to_yaml

N = 1000


def main() -> int:
    cases = [decide(p) for p in sorted(INPUTS.glob("*.yaml"))]
    work = [cases[i % len(cases)] for i in range(N)]
    t0 = time.perf_counter()
    for ib, decision in work:
        render(ib, decision)  # type: ignore[arg-type]
    t_render = time.perf_counter() - t0
    t0 = time.perf_counter()
    for ib, decision in work:
        to_yaml(render(ib, decision))  # type: ignore[arg-type]
    t_yaml = time.perf_counter() - t0
    print(
        f"render {N} InferenceBackends ({len(cases)} distinct specs, all engines): {t_render:.3f} s "
        f"({t_render / N * 1e3:.2f} ms each); with YAML serialisation: {t_yaml:.3f} s"
    )
    return 0 if t_render < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
