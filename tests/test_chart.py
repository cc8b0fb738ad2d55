"""The Helm chart: `helm lint`, `helm template`, least-privilege RBAC, CRDs equal to the generated ones."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts/inference-backend"


def _helm() -> str | None:
    cache = os.environ.get("IB_CACHE", os.path.expanduser("~/.cache/inference-backend"))
    found = sorted(glob.glob(f"{cache}/bin/helm-*")) or [p for p in [shutil.which("helm")] if p]
    return found[-1] if found else None


HELM = _helm()
needs_helm = pytest.mark.skipif(HELM is None and not os.environ.get("IB_REQUIRE_HELM"), reason="no helm binary")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None, "helm is required (IB_REQUIRE_HELM is set): run e2e/build-binaries"
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=False)


def template(*sets: str) -> list[dict[str, Any]]:
    args = ["template", "ib", str(CHART), "--namespace", "ib-system", "--include-crds"]
    for s in sets:
        args += ["--set", s]
    res = helm(*args)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


@needs_helm
def test_helm_lint() -> None:
    res = helm("lint", "--strict", str(CHART))
    assert res.returncode == 0, res.stdout + res.stderr


@needs_helm
def test_template_defaults() -> None:
    docs = template()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds.count("CustomResourceDefinition") == 4
    assert {
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "ClusterKopfPeering",
    } <= set(kinds)
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["inference-backend", "operator"]
    assert "--all-namespaces" in container["args"] and "--peering=inference-backend" in container["args"]
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


@needs_helm
def test_values_schema_rejects_bad_values() -> None:
    res = helm("template", "ib", str(CHART), "--set", "debounceSeconds=600")
    assert res.returncode != 0 and "debounceSeconds" in res.stderr
    res = helm("template", "ib", str(CHART), "--set", "nonsense=1")
    assert res.returncode != 0


@needs_helm
def test_namespaced_install_and_argocd_snippet() -> None:
    docs = template("clusterWide=false", "watchNamespaces={team-a,team-b}", "argocd.healthSnippet=true")
    peerings = [d for d in docs if d["kind"] == "KopfPeering"]
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    assert "--namespace=team-a" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    lua = (CHART / "files/argocd-health.lua").read_text()
    assert (
        cm["data"]["resource.customizations.health.serving.inferencebackend.io_InferenceBackend"].strip() == lua.strip()
    )


def test_rbac_is_least_privilege() -> None:
    text = (CHART / "templates/rbac.yaml").read_text().split("---")[0]
    rules = yaml.safe_load("\n".join(line for line in text.splitlines() if "{{" not in line))["rules"]
    verbs = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in rules}
    scaler = verbs.pop((("keda.sh",), ("scaledobjects",)))
    assert scaler == {"create", "patch", "delete"}, "a ScaledObject is deleted when spec.autoscaling is removed"
    assert not any("*" in v or "delete" in v or "update" in v for v in verbs.values()), "no wildcards, deletes, updates"
    assert verbs[(("apps",), ("deployments",))] == {"list", "watch", "create", "patch"}
    assert verbs[(("",), ("nodes",))] == {"list", "watch"}
    assert verbs[(("",), ("pods",))] == {"list", "watch"}, "the pods index (pod-level truth)"
    assert verbs[(("serving.inferencebackend.io",), ("inferencebackends/status",))] == {"patch"}
