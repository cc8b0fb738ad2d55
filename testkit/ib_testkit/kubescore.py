"""kube-score (github.com/zegl/kube-score, built by e2e/build-binaries from the Go module proxy) and the security
checks the tests assert on its findings (tests/test_kube_score.py says which and why; tests/test_chart_values.py
scores every values branch of the chart)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path
from typing import Any

CACHE = os.environ.get("IB_CACHE", os.path.expanduser("~/.cache/inference-backend"))
SECURITY = {
    "container-security-context-privileged",
    "container-security-context-user-group-id",
    "container-security-context-readonlyrootfilesystem",
    "container-seccomp-profile",
    "container-image-tag",
    "pod-networkpolicy",
}
NOT_RENDERED = {"pod-networkpolicy"}
ROOT_ONLY = {"container-security-context-user-group-id", "container-security-context-readonlyrootfilesystem"}


def binary(name: str) -> str | None:
    """The newest cached build of ``name`` ($IB_CACHE/bin/NAME-vX), or None."""
    found = sorted(glob.glob(f"{CACHE}/bin/{name}-*"))
    return found[-1] if found else None


KUBE_SCORE = binary("kube-score")


def score(paths: list[Path]) -> list[dict[str, Any]]:
    """kube-score's JSON (v2) for the files: one entry per object, each with its checks."""
    assert KUBE_SCORE is not None, "kube-score is required in CI: run e2e/build-binaries kube-score"
    res = subprocess.run(
        [
            KUBE_SCORE,
            "score",
            "-o",
            "json",
            "--kubernetes-version",
            "v1.36",
            "--enable-optional-test",
            "container-seccomp-profile",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.stdout, res.stderr
    return list(json.loads(res.stdout))


def critical(objects: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(object, check id, container, comment) of every critical finding of a security check."""
    out = []
    for obj in objects:
        name = f"{obj['type_meta']['kind']} {obj['object_meta']['name']}"
        for check in obj["checks"]:
            cid = check["check"]["id"]
            if cid not in SECURITY or check["grade"] != 1:  # grades: 0 skipped, 1 critical, 5 warning, 10 ok
                continue
            for c in check.get("comments") or [{"path": "", "summary": ""}]:
                if not str(c.get("summary") or "").startswith("Skipped"):
                    out.append((name, cid, c.get("path") or "", c.get("summary") or ""))
    return out
