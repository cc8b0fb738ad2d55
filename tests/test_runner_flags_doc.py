"""docs/runners.md "Flags (exact)" lists every flag of both runners' parsers, and each numeric default it states
(the limits: body size, stop, messages, deadline, drain, queue, batching) is the parser's (issue 16 item 2)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from inference_backend.runners.onnx.args import build_parser as onnx_parser
from inference_backend.runners.pytorch.args import build_parser as pytorch_parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "runners.md"


def _table() -> dict[str, str]:
    """flag -> the default column, for the rows of the shared flags table."""
    text = DOC.read_text().split("## Flags (exact)", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `--") else []
        flags = re.findall(r"`(--[a-z-]+)", cells[0] if cells else "")
        parts = cells[1].split(" / ") if cells else []  # `--host` / `--port` | 0.0.0.0 / 8000
        for i, flag in enumerate(flags):
            rows[flag] = parts[i] if len(parts) == len(flags) else cells[1]
    return rows


def _doc_flags() -> set[str]:
    return set(re.findall(r"`(--[a-z][a-z-]+)", DOC.read_text()))


@pytest.mark.parametrize("build", [pytorch_parser, onnx_parser], ids=["pytorch", "onnx"])
def test_every_flag_documented_with_its_default(build: object) -> None:
    parser = build()  # type: ignore[operator]
    documented, table = _doc_flags(), _table()
    numeric = 0
    for action in parser._actions:
        for flag in (o for o in action.option_strings if o.startswith("--") and o != "--help"):
            assert flag in documented, f"{flag} is not in docs/runners.md"
        flag = next((o for o in action.option_strings if o in table), None)
        if flag is None or isinstance(action.default, bool) or not isinstance(action.default, int | float):
            continue
        stated = re.match(r"`?([0-9.]+)", table[flag])
        assert stated, f"{flag}: the documented default {table[flag]!r} is not the parser's {action.default}"
        assert float(stated.group(1)) == float(action.default), (flag, table[flag], action.default)
        numeric += 1
    assert numeric >= 10  # the limits and batching flags were all compared
