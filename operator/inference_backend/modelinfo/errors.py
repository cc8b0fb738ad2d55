"""The one error of model inspection: a message that names the file (the CLI prints it and exits 2); and the JSON
reader every format shares, which raises it."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any


class InspectError(ValueError):
    """The artifact cannot be read as a model: missing, corrupt or of an unknown format. The message names the file."""


MAX_JSON_BYTES = 16 * 2**20
"""config.json and other small JSON files (a config is a few KiB)."""
MAX_JSON_ITEMS = 1_000_000
MAX_INT_DIGITS = 40
"""Integers in the JSON files read (a token id, a byte count) have a few digits; a 5,000-digit one is refused before
Python converts it (beyond 4,300 digits it raises, below it the conversion is quadratic)."""


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def parse_json(raw: bytes, where: str, max_items: int = MAX_JSON_ITEMS) -> Any:
    """JSON from ``raw`` with its size checked before anything is built: at most ``max_items`` values and containers
    (bounded by counting the commas and brackets, strings' included), integers of at most MAX_INT_DIGITS digits, and
    nesting no deeper than Python's recursion limit (about 1,000; a RecursionError is the refusal). InspectError
    naming ``where`` otherwise."""
    items = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
    if items > max_items:
        raise InspectError(f"{where}: about {items} JSON values, more than the {max_items} read (refused unread)")
    try:
        return json.loads(raw, parse_int=_int)
    except RecursionError as exc:
        raise InspectError(f"{where}: JSON nested too deep to read") from exc
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError, as is _int's refusal
        raise InspectError(f"{where}: not valid JSON ({str(exc)[:200]})") from exc


def read_bytes(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, refused unread when larger than ``max_bytes``."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise InspectError(
                f"{path}: {size} bytes, more than the {max_bytes} read from a {path.name} (refused unread)"
            )
        return path.read_bytes()
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES, max_items: int = MAX_JSON_ITEMS) -> dict[str, Any]:
    """A JSON object from ``path``, bounded (``read_bytes``, ``parse_json``); InspectError naming the file when it
    cannot be read, is too large or is not an object."""
    doc = parse_json(read_bytes(path, max_bytes), str(path), max_items)
    if not isinstance(doc, dict):
        raise InspectError(f"{path}: not a JSON object")
    return doc


def import_extra(module: str, path: Path, what: str) -> Any:
    """``module`` from the ``inspect`` extra; InspectError naming the file and the install command when absent."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise InspectError(
            f"{path}: reading {what} needs the {module} package: pip install 'inference-backend[inspect]'"
        ) from exc


_HUB_REPO = re.compile(r"^models--[^/]+--[^/]+$")


def confined(directory: Path, path: Path) -> Path:
    """``path`` (a file of ``directory``) when it resolves inside ``directory``, or inside the Hugging Face hub cache
    repository holding it (a snapshot's files link to ../../blobs); else InspectError: a planted link to
    /proc/self/environ or any file elsewhere is never read."""
    resolved = path.resolve()
    roots = [directory.resolve()]
    for parent in (directory.absolute(), *directory.absolute().parents):
        if _HUB_REPO.match(parent.name):
            roots.append(parent.resolve())
            break
    if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
        raise InspectError(f"{path}: a link to {resolved}, outside {directory}: not read")
    return path
