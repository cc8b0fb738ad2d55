"""kube-score (github.com/zegl/kube-score, built by e2e/build-binaries from the Go module proxy) on every golden
rendering and on the chart: no critical security finding (issue 14 item 7).

The security checks and the exceptions, each with its reason:
- container-security-context-user-group-id and container-security-context-readonlyrootfilesystem: the engines whose
  pinned images need root (vLLM, TGI, SGLang: their cards' ``run_as`` says why; they also write their kernel and
  compile caches under /root) are exempt; every other container runs as a non-root uid >= 10000 or nobody with a
  read-only root (our runners, llama-server, the fetch init containers, the operator).
- pod-networkpolicy is not rendered: who may call a model server is the site's policy (the namespace's
  NetworkPolicies select the backends by their labels), as KServe and KubeAI leave it.
Reliability checks (probes, replicas, CPU limits, image pull policy) are not security findings and are not asserted.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from inference_backend.engines import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
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


def _binary(name: str) -> str | None:
    found = sorted(glob.glob(f"{CACHE}/bin/{name}-*"))
    return found[-1] if found else None


KUBE_SCORE = _binary("kube-score")
needs = pytest.mark.skipif(KUBE_SCORE is None and not os.environ.get("CI"), reason="no kube-score: e2e/build-binaries")


def score(paths: list[Path]) -> list[dict[str, Any]]:
    """kube-score's JSON (v2) for the files: one entry per object, each with its checks."""
    assert KUBE_SCORE is not None, "kube-score is required in CI: run e2e/build-binaries kube-score"
    res = subprocess.run([KUBE_SCORE, "score", "-o", "json", "--kubernetes-version", "v1.36",
                          "--enable-optional-test", "container-seccomp-profile", *map(str, paths)],
                         capture_output=True, text=True, check=False)  # fmt: skip
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


def _root_engines() -> set[str]:
    return {c.name for c in REGISTRY if c.run_as_user is None}


def _engine(path: Path) -> str:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == "Deployment":
            return str(doc["metadata"]["labels"]["serving.inferencebackend.io/backend"])
    raise AssertionError(f"no Deployment in {path}")


@needs
@pytest.mark.parametrize("path", sorted((ROOT / "tests/data/output").glob("*.yaml")), ids=lambda p: p.stem)
def test_rendered_children_have_no_critical_security_finding(path: Path) -> None:
    root = _engine(path) in _root_engines()
    found = [f for f in critical(score([path])) if f[1] not in NOT_RENDERED]
    # The engine container only: the fetch init containers run as the operator's non-root uid, read-only.
    allowed = [f for f in found if root and f[1] in ROOT_ONLY and not f[2].startswith("fetch-")]
    assert [f for f in found if f not in allowed] == []
    if not root:
        assert not found


@needs
def test_the_chart_has_no_critical_security_finding(tmp_path: Path) -> None:
    helm = _binary("helm")
    assert helm is not None, "helm is required with kube-score: run e2e/build-binaries"
    res = subprocess.run([helm, "template", "ib", str(ROOT / "charts/inference-backend"), "--namespace", "ib-system"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    out = tmp_path / "chart.yaml"
    out.write_text(res.stdout)
    assert [f for f in critical(score([out])) if f[1] not in NOT_RENDERED] == []


@needs
def test_the_checks_asserted_are_kube_scores_own() -> None:
    """The ids above exist in this kube-score (a renamed check would silently stop being asserted)."""
    assert KUBE_SCORE is not None
    listed = subprocess.run([KUBE_SCORE, "list"], capture_output=True, text=True, check=True).stdout
    ids = {line.split(",")[0] for line in listed.splitlines()}
    assert ids >= SECURITY, SECURITY - ids
