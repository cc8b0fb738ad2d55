"""Regenerate the side-by-side example of docs/engines.md from a golden file (between the EXAMPLE markers).

Run: .venv/bin/python hack/engines_doc_example.py [golden-input-stem]
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from golden import INPUTS, decide  # noqa: E402
from inference_backend.render import render_result  # noqa: E402

BEGIN, END = "<!-- EXAMPLE BEGIN (hack/engines_doc_example.py) -->", "<!-- EXAMPLE END -->"


def example(stem: str) -> str:
    path = INPUTS / f"{stem}.yaml"
    ib, decision = decide(path)
    container = render_result(ib, decision).objects[0]["spec"]["template"]["spec"]["containers"][0]  # type: ignore[arg-type]
    shown = {k: container[k] for k in ("image", "command", "args", "env", "resources") if k in container}
    spec = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    rendered = yaml.dump(shown, sort_keys=False, width=200, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    return (
        f"<table><tr><th>spec: tests/data/input/{stem}.yaml</th><th>rendered container: "
        f"tests/data/output/{stem}.yaml</th></tr>\n<tr><td>\n\n```yaml\n{spec}\n```\n\n</td><td>\n\n"
        f"```yaml\n{rendered}```\n\n</td></tr></table>"
    )


def main() -> int:
    stem = sys.argv[1] if len(sys.argv) > 1 else "vllm-gpu-draft"
    doc = ROOT / "docs" / "engines.md"
    text = doc.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    doc.write_text(f"{head}{BEGIN}\n{example(stem)}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
