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

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit.kubescore import KUBE_SCORE, NOT_RENDERED, ROOT_ONLY, SECURITY, critical, score
from ib_testkit.kubescore import binary as _binary
from inference_backend.engines import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
needs = pytest.mark.skipif(KUBE_SCORE is None and not os.environ.get("CI"), reason="no kube-score: e2e/build-binaries")


def _root_engines() -> set[str]:
    return {c.name for c in REGISTRY if c.run_as_user is None}


def _engine(path: Path) -> str:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") in ("Deployment", "LeaderWorkerSet"):
            return str(doc["metadata"]["labels"]["serving.inferencebackend.io/backend"])
    raise AssertionError(f"no workload in {path}")


def _scorable(path: Path, tmp: Path) -> Path:
    """``path`` with each LeaderWorkerSet (a CRD kube-score does not know) as two Deployments of its leader and
    worker templates, so their pods are scored like any other."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    out: list[dict[str, Any]] = []
    for d in docs:
        if d["kind"] != "LeaderWorkerSet":
            out.append(d)
            continue
        lwt = d["spec"]["leaderWorkerTemplate"]
        for role in ("leaderTemplate", "workerTemplate"):
            tpl = lwt[role]
            out.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {**d["metadata"], "name": f"{d['metadata']['name']}-{role[:6]}"},
                    "spec": {
                        "replicas": d["spec"].get("replicas", 1),
                        "selector": {"matchLabels": tpl["metadata"]["labels"]},
                        "template": tpl,
                    },
                }
            )
    target = tmp / path.name
    target.write_text(yaml.safe_dump_all(out))
    return target


@needs
@pytest.mark.parametrize("path", sorted((ROOT / "tests/data/output").glob("*.yaml")), ids=lambda p: p.stem)
def test_rendered_children_have_no_critical_security_finding(path: Path, tmp_path: Path) -> None:
    root = _engine(path) in _root_engines()
    found = [f for f in critical(score([_scorable(path, tmp_path)])) if f[1] not in NOT_RENDERED]
    # The engine container only: the fetch init containers run as the operator's non-root uid, read-only.
    allowed = [f for f in found if root and f[1] in ROOT_ONLY and not f[2].startswith("fetch-")]
    assert [f for f in found if f not in allowed] == []
    if not root:
        assert not found


@needs
def test_the_chart_has_no_critical_security_finding(tmp_path: Path) -> None:
    helm = _binary("helm")
    assert helm is not None, "helm is required with kube-score: run e2e/build-binaries"
    res = subprocess.run(
        [helm, "template", "ib", str(ROOT / "charts/inference-backend"), "--namespace", "ib-system"],
        capture_output=True,
        text=True,
        check=True,
    )
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
