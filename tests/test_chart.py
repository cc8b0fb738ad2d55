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
    res = helm("template", "ib", str(CHART), "--set", "autoscaling.prometheusAddress=prometheus:9090")
    assert res.returncode != 0 and "autoscaling/prometheusAddress" in res.stderr


@needs_helm
def test_autoscaling_values_reach_the_operator() -> None:
    docs = template("autoscaling.prometheusAddress=http://prom.mon.svc:9090")
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    env = {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["IB_PROMETHEUS_ADDRESS"] == "http://prom.mon.svc:9090"
    assert env["IB_AUTOSCALING_LABEL_MATCHERS"] == 'namespace="{namespace}",app_kubernetes_io_instance="{instance}"'


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


def _rules(docs: list[dict[str, Any]], kind: str) -> dict[tuple[str, str, str], set[str]]:
    """(namespace, apiGroup, resource) -> verbs granted by the chart's objects of ``kind``."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for d in docs:
        if d["kind"] != kind:
            continue
        for r in d["rules"]:
            for group in r["apiGroups"]:
                for res in r["resources"]:
                    out.setdefault((d["metadata"].get("namespace", ""), group, res), set()).update(r["verbs"])
    return out


NAMESPACED = {
    ("serving.inferencebackend.io", "inferencebackends"): {"list", "watch"},
    ("serving.inferencebackend.io", "models"): {"list", "watch"},
    ("serving.inferencebackend.io", "inferencebackends/status"): {"patch"},
    ("serving.inferencebackend.io", "inferencebackends/finalizers"): {"update"},
    ("", "pods"): {"list", "watch", "get"},
    ("apps", "deployments"): {"list", "watch", "get", "create", "patch", "delete"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {"list", "watch", "get", "create", "patch", "delete"},
    ("", "services"): {"list", "watch", "get", "create", "patch", "delete"},
    ("policy", "poddisruptionbudgets"): {"list", "watch", "get", "create", "patch"},
    ("", "events"): {"create"},
    ("keda.sh", "scaledobjects"): {"get", "create", "patch", "delete"},
    ("", "persistentvolumeclaims"): {"get", "create", "patch"},
    ("", "configmaps"): {"list", "watch", "get", "create", "patch"},
    ("resource.k8s.io", "resourceclaimtemplates"): {"get", "create", "patch"},
    ("inference.networking.k8s.io", "inferencepools"): {"get", "list", "watch", "create", "patch", "delete"},
    # only to grant them in the endpoint picker's Role (routing.py)
    ("inference.networking.x-k8s.io", "inferenceobjectives"): {"get", "list", "watch"},
    ("inference.networking.x-k8s.io", "inferencemodelrewrites"): {"get", "list", "watch"},
    ("", "serviceaccounts"): {"get", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "roles"): {"get", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"get", "create", "patch", "delete"},
}


@needs_helm
def test_rbac_is_exactly_what_the_operator_uses_cluster_wide() -> None:
    docs = template()
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    cluster = _rules(docs, "ClusterRole")
    assert {(g, r): v for (_, g, r), v in cluster.items()} == {
        **NAMESPACED,
        ("", "nodes"): {"list", "watch"},
        ("resource.k8s.io", "resourceslices"): {"list", "watch"},
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
        ("kopf.dev", "clusterkopfpeerings"): {"list", "watch", "patch"},
    }, "no namespaces (kopf lists them only when it watches some), no patch on the backends themselves"


@needs_helm
def test_rbac_not_cluster_wide_is_a_role_per_watched_namespace() -> None:
    docs = template("clusterWide=false", "watchNamespaces={team-a,team-b}")
    cluster = _rules(docs, "ClusterRole")
    assert {(g, r): v for (_, g, r), v in cluster.items()} == {
        ("", "nodes"): {"list", "watch"},
        ("resource.k8s.io", "resourceslices"): {"list", "watch"},
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
        ("", "namespaces"): {"list", "watch"},
    }, "only cluster-scoped facts cluster-wide"
    roles = _rules(docs, "Role")
    for ns in ("team-a", "team-b"):
        assert {(g, r): v for (n, g, r), v in roles.items() if n == ns} == {
            **NAMESPACED,
            ("kopf.dev", "kopfpeerings"): {"list", "watch", "patch"},
        }
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert all(b["subjects"][0]["namespace"] == "ib-system" for b in bindings)
