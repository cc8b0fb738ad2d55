"""The one error of model inspection: a message that names the file (the CLI prints it and exits 2); and the JSON
reader every format shares, which raises it."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any


class InspectError(ValueError):
    """The artifact cannot be read as a model: missing, corrupt or of an unknown format. The message names the file."""


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; InspectError naming the file when it cannot be read or is not an object."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InspectError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise InspectError(f"{path}: not a JSON object")
    return doc


def import_extra(module: str, path: Path, what: str) -> Any:
    """``module`` from the ``inspect`` extra; InspectError naming the file and the install command when absent."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise InspectError(f"{path}: reading {what} needs the {module} package: pip install "
                           "'inference-backend[inspect]'") from exc  # fmt: skip
