"""Regenerate the side-by-side examples (spec | rendered container) from golden files, between the markers:
the one of docs/engines.md, and one per engine in README.md. A unit test keeps README.md up to date.

Run: .venv/bin/python hack/engines_doc_example.py [golden-input-stem]     (docs/engines.md)
     .venv/bin/python hack/engines_doc_example.py --readme                 (README.md)
"""

from __future__ import annotations

import sys

import yaml
from ib_testkit import ROOT
from ib_testkit.golden import INPUTS, decide
from inference_backend.render import render_result

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


README_BEGIN, README_END = "<!-- ENGINES BEGIN (hack/engines_doc_example.py --readme) -->", "<!-- ENGINES END -->"
README_EXAMPLES = {
    "vLLM": "vllm-gpu-draft",
    "TGI": "tgi-ngram",
    "SGLang": "sglang-gpu-draft",
    "llama.cpp": "llamacpp-cpu-draft",
    "ONNX Runtime server": "onnxruntime-gpu-s3",
    "PyTorch runner": "pytorch-gpu-hf-continuous",
}


def readme_section() -> str:
    return "\n\n".join(f"### {engine}\n{example(stem)}" for engine, stem in README_EXAMPLES.items())


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def main() -> int:
    if sys.argv[1:] == ["--readme"]:
        readme = ROOT / "README.md"
        readme.write_text(replace_between(readme.read_text(), README_BEGIN, README_END, readme_section()))
        return 0
    stem = sys.argv[1] if len(sys.argv) > 1 else "vllm-gpu-draft"
    doc = ROOT / "docs" / "engines.md"
    text = doc.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    doc.write_text(f"{head}{BEGIN}\n{example(stem)}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
