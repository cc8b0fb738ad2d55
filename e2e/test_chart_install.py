"""The chart on the real apiserver: every values branch (ib_testkit.chart, the ones tests/test_chart_values.py
renders and scores) rendered by helm and applied as a server-side dry run, so the apiserver validates every object
it would create (Deployment, RBAC, the helm test Pod, ...); and docs/chart.md's CRD upgrade step, run as written,
after helm installed the CRDs."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit import ROOT
from ib_testkit.chart import BRANCHES
from ib_testkit.cluster import SYSTEM_NS, kubectl, tool

CHART = ROOT / "charts/inference-backend"
CRD = "inferencebackends.serving.inferencebackend.io"


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("helm"), *args], capture_output=True, text=True, check=False, timeout=120)


NAMESPACES = ("team-a", "team-b", "gitops")
"""The namespaces the branches name (watchNamespaces, argocd.namespace)."""


@pytest.fixture(scope="module")
def watched_namespaces(chart: None) -> Iterator[None]:
    for ns in NAMESPACES:
        kubectl("create", "namespace", ns, check=False)
    yield
    kubectl("delete", "namespace", *NAMESPACES, "--wait=false", "--ignore-not-found")


@pytest.mark.parametrize("branch", BRANCHES, ids=list(BRANCHES))
def test_every_branch_is_admitted_by_the_apiserver(branch: str, watched_namespaces: None, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(BRANCHES[branch]))
    res = _helm("template", "ib", str(CHART), "--namespace", SYSTEM_NS, "-f", str(values))
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    out = kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--force-conflicts",
        "--field-manager=ib-e2e-chart",
        "-f",
        "-",
        stdin=yaml.safe_dump_all(docs),
    )
    kinds = {d["kind"] for d in docs}
    assert "deployment.apps/" in out and ("pod/" in out) == ("Pod" in kinds), out


def _managers(name: str) -> dict[str, str]:
    got: dict[str, Any] = yaml.safe_load(kubectl("get", "crd", name, "-o", "yaml", "--show-managed-fields"))
    return {m["manager"]: m["operation"] for m in got["metadata"].get("managedFields") or []}


def test_the_documented_crd_upgrade(chart: None, tmp_path: Path) -> None:
    """`kubectl apply --server-side --force-conflicts -f charts/inference-backend/crds/` (docs/chart.md) after
    helm's install: a CRD changed by a new version is applied; without --force-conflicts the fields helm's install
    owns conflict, which is why the doc has it."""
    managers = _managers(CRD)
    assert managers, "the CRD has field managers"
    crd = yaml.safe_load((CHART / "crds/serving.inferencebackend.io_inferencebackends.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    changed = tmp_path / "crd.yaml"
    schema["description"] = str(schema.get("description", "")) + " (a newer chart's text)"
    changed.write_text(yaml.safe_dump(crd))
    try:
        if any(m.startswith("helm") for m in managers):
            refused = kubectl("apply", "--server-side", "-f", str(changed), check=False)
            assert "conflict" in refused.lower(), refused
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(changed))
        live = yaml.safe_load(kubectl("get", "crd", CRD, "-o", "yaml"))
        assert live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"].endswith("newer chart's text)")
    finally:
        # the step exactly as documented puts the chart's CRDs back
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds") + "/")
    live = yaml.safe_load(kubectl("get", "crd", CRD, "-o", "yaml"))
    assert live["spec"]["versions"][0]["schema"]["openAPIV3Schema"].get("description") == (
        yaml.safe_load((CHART / "crds/serving.inferencebackend.io_inferencebackends.yaml").read_text())["spec"][
            "versions"
        ][0]["schema"]["openAPIV3Schema"].get("description")
    )
