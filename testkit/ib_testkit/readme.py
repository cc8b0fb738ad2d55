"""The shell commands the README shows, as a reader would type them: tests/test_readme_commands.py checks that each
one is run by a test or the demo, and e2e/test_install.py runs the "Install" section's against the API server."""

from __future__ import annotations

import re
import shlex

from ib_testkit import ROOT

README = ROOT / "README.md"
FENCE = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.M | re.S)


def section(title: str) -> str:
    """The README's text under `## title`, up to the next `## ` heading."""
    text = README.read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if m is None:
        raise AssertionError(f"README.md has no section '## {title}'")
    return m.group(1)


def commands(text: str | None = None) -> list[str]:
    """Every command of the ```sh blocks of text (default: the whole README): continuation lines joined, comments
    and surrounding blanks removed, whitespace collapsed."""
    text = README.read_text() if text is None else text
    out: list[str] = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(" ".join(shlex.quote(w) for w in words))
    return out
