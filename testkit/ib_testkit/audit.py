"""Reading the kube-apiserver's audit log (JSON lines) in the e2e tests."""

from __future__ import annotations

import json
from typing import Any


def audit_event(line: str | bytes, keep: str = "system:serviceaccount:") -> dict[str, Any] | None:
    """One audit event, or None for a line the apiserver wrote as invalid JSON.

    The admission fuzz tests send the apiserver garbage field names; it echoes them into the audit log's
    messages, and some come out as escapes Python's decoder refuses. Those lines are skipped, unless they
    mention ``keep`` (a service account's requests, which the tests count): those must never be dropped."""
    try:
        event = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        if keep and keep in text:
            raise
        return None
    return event if isinstance(event, dict) else None
