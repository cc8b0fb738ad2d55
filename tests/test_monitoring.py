"""The chart's observability (docs/observability.md): the ServiceMonitor, PodMonitor, PrometheusRule and dashboards
behind their toggles, one scrape path per target, the PodMonitor against the pods the operator really renders (the
golden files), and the rules checked and unit-tested by promtool (built by e2e/build-binaries from
github.com/prometheus/prometheus). e2e/test_observability.py sends every query to a real Prometheus."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit.cluster import tool
from prometheus_client import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts/inference-backend"
DASHBOARDS = CHART / "files/dashboards"
PROMTOOL_TESTS = ROOT / "tests/data/promtool/alerts-test.yaml"
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
ALL_ON = (
    "monitoring.serviceMonitor.enabled=true",
    "monitoring.podMonitor.enabled=true",
    "monitoring.prometheusRule.enabled=true",
    "monitoring.dashboards.enabled=true",
)


def _tool(name: str) -> str | None:
    try:
        return tool(name)
    except AssertionError:
        return None


HELM = _tool("helm")
PROMTOOL = _tool("promtool")
REQUIRED = bool(os.environ.get("CI") or os.environ.get("IB_REQUIRE_HELM"))
needs_helm = pytest.mark.skipif(HELM is None and not REQUIRED, reason="no helm: e2e/build-binaries helm")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"), reason="no promtool: e2e/build-binaries promtool"
)


def helm_template(*sets: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert HELM is not None, "helm is required in CI: run e2e/build-binaries helm"
    args = [HELM, "template", "ib", str(CHART), "--namespace", "ib-system"]
    for s in sets:  # "NAME=VALUE", or "--set-string=NAME=VALUE" and other flags as they are
        args += [s] if s.startswith("--") else ["--set", s]
    res = subprocess.run(args, capture_output=True, text=True, check=False)
    if check:
        assert res.returncode == 0, res.stderr
    return res


def render(*sets: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(helm_template(*sets).stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {[d['metadata']['name'] for d in found]}"
    return found[0]


def rendered_rules(*sets: str) -> dict[str, Any]:
    """The PrometheusRule's spec (a Prometheus rule file: {groups: [...]}) as the chart renders it."""
    return dict(one(render("monitoring.prometheusRule.enabled=true", *sets), "PrometheusRule")["spec"])


def operator_pod_annotations(docs: list[dict[str, Any]]) -> dict[str, str]:
    return dict(one(docs, "Deployment")["spec"]["template"]["metadata"].get("annotations") or {})


# ---------------------------------------------------------------- toggles and scrape paths


@needs_helm
def test_defaults_render_no_monitoring_object_and_scrape_the_operator_through_its_pods_only() -> None:
    docs = render()
    assert not {d["kind"] for d in docs} & MONITORING_KINDS
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    pod = operator_pod_annotations(docs)
    assert pod["prometheus.io/scrape"] == "true"
    assert pod["prometheus.io/port"] == "8080"
    assert pod["prometheus.io/path"] == "/metrics"
    service = one(docs, "Service", "-metrics")
    # an annotated Service too would have the kubernetes-service-endpoints job scrape the same pods again
    assert not [k for k in (service["metadata"].get("annotations") or {}) if k.startswith("prometheus.io/")]


@needs_helm
def test_with_the_service_monitor_the_operator_pods_carry_no_scrape_annotations() -> None:
    docs = render("monitoring.serviceMonitor.enabled=true", "podAnnotations.team=ml")
    assert operator_pod_annotations(docs) == {"team": "ml"}
    sm = one(docs, "ServiceMonitor")
    service = one(docs, "Service", "-metrics")
    selector = sm["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["ib-system"]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    # and nothing else selects the metrics Service's labels: one target per operator pod
    others = [d for d in docs if d["kind"] == "Service" and d is not service]
    assert not [d for d in others if selector.items() <= (d["metadata"].get("labels") or {}).items()]


@needs_helm
def test_pod_annotations_can_be_turned_off() -> None:
    assert "prometheus.io/scrape" not in operator_pod_annotations(render("metrics.podAnnotations=false"))


@needs_helm
def test_values_that_would_scrape_the_operator_twice_are_refused() -> None:
    res = helm_template("--set-string=metrics.service.annotations.prometheus\\.io/scrape=true", check=False)
    assert res.returncode != 0
    assert "metrics.service.annotations" in res.stderr and "metrics.podAnnotations" in res.stderr
    # with the pods' annotations off, the Service may carry them (one path again)
    docs = render(
        "--set-string=metrics.service.annotations.prometheus\\.io/scrape=true", "metrics.podAnnotations=false"
    )
    assert "prometheus.io/scrape" not in operator_pod_annotations(docs)


@needs_helm
def test_service_monitor_needs_the_metrics_service() -> None:
    res = helm_template("monitoring.serviceMonitor.enabled=true", "metrics.service.enabled=false", check=False)
    assert res.returncode != 0 and "metrics.service.enabled" in res.stderr


@needs_helm
def test_every_toggle_renders_its_object_alone_with_the_extra_labels() -> None:
    for toggle, kind in (
        ("serviceMonitor", "ServiceMonitor"),
        ("podMonitor", "PodMonitor"),
        ("prometheusRule", "PrometheusRule"),
        ("dashboards", "ConfigMap"),
    ):
        docs = render(f"monitoring.{toggle}.enabled=true", "monitoring.labels.release=kps")
        new = [d for d in docs if d["kind"] in MONITORING_KINDS | {"ConfigMap"}]
        assert [d["kind"] for d in new] == [kind], toggle
        if kind != "ConfigMap":
            assert new[0]["apiVersion"] == "monitoring.coreos.com/v1"
            assert new[0]["metadata"]["labels"]["release"] == "kps"
            assert new[0]["metadata"]["namespace"] == "ib-system"


@needs_helm
def test_bad_monitoring_values_are_refused_naming_the_field() -> None:
    for value, field in (
        ("monitoring.prometheusRule.alerts.kvCacheNearFull.usage=2", "usage"),
        ("monitoring.prometheusRule.alerts.notReady.for=soon", "for"),
        ("monitoring.podMonitor.interval=fast", "interval"),
        ("monitoring.serviceMonitor.enabeld=true", "enabeld"),
    ):
        res = helm_template("monitoring.prometheusRule.enabled=true", value, check=False)
        assert res.returncode != 0, value
        assert field in res.stderr, (value, res.stderr)


# ---------------------------------------------------------------- the PodMonitor against the rendered engine pods


def _served_pods() -> list[tuple[str, dict[str, Any]]]:
    """(golden file, pod template) of every pod the operator renders that serves the API (Deployment pods, a
    LeaderWorkerSet's leader)."""
    out = []
    for path in sorted((ROOT / "tests/data/output").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            component = doc["kind"] == "Deployment" and doc["spec"]["template"]["metadata"]["labels"].get(
                "app.kubernetes.io/component"
            )
            if component == "inference-server":  # not the endpoint picker of spec.routing (routing.py)
                out.append((path.name, doc["spec"]["template"]))
            elif doc["kind"] == "LeaderWorkerSet":
                tpl = doc["spec"]["leaderWorkerTemplate"]
                out.append((path.name, tpl.get("leaderTemplate") or tpl["workerTemplate"]))
    return out


@needs_helm
def test_pod_monitor_selects_every_served_engine_pod_on_its_metrics_port_and_path() -> None:
    pm = one(render("monitoring.podMonitor.enabled=true"), "PodMonitor")
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    selector = pm["spec"]["selector"]["matchLabels"]
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    pods = _served_pods()
    assert len(pods) >= 20
    for name, tpl in pods:
        assert selector.items() <= tpl["metadata"]["labels"].items(), name
        annotations = tpl["metadata"]["annotations"]
        (container,) = [c for c in tpl["spec"]["containers"]]
        port = {p["name"]: p["containerPort"] for p in container.get("ports") or []}
        # the PodMonitor scrapes exactly what the annotation path scrapes: same port, same path
        assert port[endpoint["port"]] == int(annotations["prometheus.io/port"]), name
        assert endpoint["path"] == annotations["prometheus.io/path"], name


@needs_helm
def test_pod_monitor_skips_multinode_workers_and_follows_watch_namespaces() -> None:
    pm = one(
        render("monitoring.podMonitor.enabled=true", "clusterWide=false", "watchNamespaces={ml,llm}"), "PodMonitor"
    )
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["ml", "llm"]}
    selector = pm["spec"]["selector"]["matchLabels"]
    for path in sorted((ROOT / "tests/data/output").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "LeaderWorkerSet" and doc["spec"]["leaderWorkerTemplate"].get("leaderTemplate"):
                worker = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
                assert not selector.items() <= worker.items(), path.name  # workers serve no metrics


def test_every_engine_serves_metrics_on_the_api_port_the_pod_monitor_names() -> None:
    import importlib

    from inference_backend.engines.base import HTTP_PORT

    for engine in ("vllm", "sglang", "tgi", "llamacpp", "runners"):
        endpoints = importlib.import_module(f"inference_backend.engines.{engine}").ENDPOINTS
        assert (endpoints.port, endpoints.metrics) == (HTTP_PORT, "/metrics"), engine


# ---------------------------------------------------------------- dashboards


@needs_helm
def test_dashboards_config_map_carries_every_dashboard_under_the_sidecar_label() -> None:
    docs = render(
        "monitoring.dashboards.enabled=true",
        "monitoring.dashboards.label=my_dash",
        "monitoring.dashboards.labelValue=yes",
        "monitoring.dashboards.namespace=grafana",
        "monitoring.dashboards.annotations.grafana_folder=Inference",
    )
    cm = one(docs, "ConfigMap", "-dashboards")
    assert cm["metadata"]["labels"]["my_dash"] == "yes"
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Inference"}
    files = {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")}
    assert set(cm["data"]) == set(files) == {"inference-backend-operator.json", "inference-backend-engines.json"}
    for name, text in files.items():
        assert json.loads(cm["data"][name]) == json.loads(text)
    default = one(render("monitoring.dashboards.enabled=true"), "ConfigMap", "-dashboards")
    assert default["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert default["metadata"]["namespace"] == "ib-system"


def test_dashboards_are_generated_from_hack_grafana_dashboards() -> None:
    res = subprocess.run(
        ["python3", str(ROOT / "hack/grafana_dashboards.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr


def dashboard_exprs() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, expression) of every panel target."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for p in board["panels"]:
            for t in p["targets"]:
                out.append((path.name, p["title"], t["expr"]))
    return out


def _operator_metric_names() -> set[str]:
    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("inference_backend_"):
            names.update(s.name for s in family.samples)
            names.add(family.name + ("_total" if family.type == "counter" else ""))
            if family.type == "histogram":
                names.update(family.name + s for s in ("_bucket", "_sum", "_count"))
    return names


def test_every_metric_name_in_the_dashboards_and_rules_exists() -> None:
    """Operator names against the operator's registry; engine names against docs/metrics.md's table."""
    import inference_backend.controller.metrics  # noqa: F401  (registers the operator's families)

    operator = _operator_metric_names()
    doc = (ROOT / "docs/metrics.md").read_text()
    engine = set(re.findall(r"`((?:vllm|sglang|llamacpp|tgi|ib)[:_][a-z0-9_:]+)", doc))
    texts = [e for _, _, e in dashboard_exprs()]
    texts.append((CHART / "templates/monitoring-prometheusrule.yaml").read_text())
    seen = set()
    for text in texts:
        for name in re.findall(r"\b((?:inference_backend|vllm|sglang|llamacpp|tgi|ib)[:_][A-Za-z0-9_:]*)", text):
            if name.startswith("inference_backend_"):
                assert name in operator, name
            else:
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert name in engine or base in engine, name
            seen.add(name)
    assert "inference_backend_ttft_objective_seconds" in seen and "inference_backend_backend_phase" in seen


# ---------------------------------------------------------------- promtool


@needs_helm
@needs_promtool
def test_promtool_checks_the_rendered_rules(tmp_path: Path) -> None:
    assert PROMTOOL is not None, "promtool is required in CI: run e2e/build-binaries promtool"
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rendered_rules()))
    res = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 5 rules found" in res.stdout + res.stderr


@needs_helm
@needs_promtool
def test_promtool_unit_tests_fire_each_alert_and_keep_it_silent_otherwise(tmp_path: Path) -> None:
    assert PROMTOOL is not None, "promtool is required in CI: run e2e/build-binaries promtool"
    groups = rendered_rules()
    alerts = {r["alert"] for g in groups["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())
    tested = {t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", [])}
    assert alerts == tested, "every alert needs a promtool test (tests/data/promtool/alerts-test.yaml)"
    for case in tests["tests"]:  # each alert is proven both ways: silent at one time, firing at another
        checks = case.get("alert_rule_test", [])
        assert any(not c["exp_alerts"] for c in checks) and any(c["exp_alerts"] for c in checks)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    shutil.copy(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    res = subprocess.run(
        [PROMTOOL, "test", "rules", PROMTOOL_TESTS.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr


@needs_helm
@needs_promtool
def test_promtool_unit_tests_fail_when_an_alert_is_broken(tmp_path: Path) -> None:
    """The unit tests can fail: with the KV cache threshold raised past the synthetic 95%, the firing case fails."""
    assert PROMTOOL is not None
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump(rendered_rules("--set-json=monitoring.prometheusRule.alerts.kvCacheNearFull.usage=0.99"))
    )
    shutil.copy(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    res = subprocess.run(
        [PROMTOOL, "test", "rules", PROMTOOL_TESTS.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert res.returncode != 0
    assert "InferenceBackendKVCacheNearFull" in res.stdout + res.stderr


def test_rules_and_dashboards_read_each_meaning_under_the_same_engine_names() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("grafana_dashboards", ROOT / "hack/grafana_dashboards.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    alternations = {"|".join(names) for names in gen.ENGINE.values()}
    rules = (CHART / "templates/monitoring-prometheusrule.yaml").read_text()
    used = re.findall(r'__name__=~"([^"]+)"', rules)
    assert len(used) == 3 and set(used) <= alternations, set(used) - alternations


def _operator_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    (container,) = [
        c for c in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"] if c["name"] == "operator"
    ]
    return {e["name"]: e.get("value") for e in container.get("env") or []}


@needs_helm
def test_with_the_pod_monitor_the_operator_renders_engine_pods_without_scrape_annotations() -> None:
    assert _operator_env(render())["IB_ENGINE_SCRAPE_ANNOTATIONS"] == "true"
    assert _operator_env(render("monitoring.podMonitor.enabled=true"))["IB_ENGINE_SCRAPE_ANNOTATIONS"] == "false"
    assert _operator_env(render("metrics.enginePodAnnotations=false"))["IB_ENGINE_SCRAPE_ANNOTATIONS"] == "false"
