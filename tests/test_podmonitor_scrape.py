"""ib_testkit.podmonitor: the chart's PodMonitor as the scrape job the Prometheus Operator generates for it
(pkg/prometheus/promcfg.go generatePodMonitorConfig), the job e2e/test_real_autoscaling.py gives a real Prometheus
that discovers the real engine pods through the API server. The job is checked against the Operator's rules, and
Prometheus's own parser accepts it (promtool check config: promtool links Kubernetes discovery whatever the build tags;
the prometheus binary has it since e2e/build-binaries keeps enable_kubernetes_sd)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit.autoscaling import lib_sh
from ib_testkit.podmonitor import relabel_config, sanitize, scrape_configs

from tests.test_monitoring import needs_helm, one, render

KUBECONFIG = "/tmp/kubeconfig"


def _pod_monitor(*sets: str) -> dict[str, Any]:
    return one(render("monitoring.podMonitor.enabled=true", *sets), "PodMonitor")


@needs_helm
def test_the_charts_pod_monitor_becomes_the_operators_pod_role_job() -> None:
    pm = _pod_monitor("monitoring.podMonitor.interval=1s")
    (job,) = scrape_configs(pm, KUBECONFIG)
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert job["job_name"] == f"podMonitor/ib-system/{pm['metadata']['name']}/0"
    # clusterWide (the default): namespaceSelector any, so no namespaces list: every namespace's pods
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "kubeconfig_file": KUBECONFIG}]
    assert (job["scrape_interval"], job["metrics_path"], job["honor_labels"]) == ("1s", "/metrics", False)
    rules = job["relabel_configs"]
    assert rules[0] == {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}
    assert rules[1] == {
        "action": "drop",
        "source_labels": ["__meta_kubernetes_pod_phase"],
        "regex": "(Failed|Succeeded)",
    }
    keeps = [
        r for r in rules if r.get("action") == "keep" and r["source_labels"][0].startswith("__meta_kubernetes_pod")
    ]
    # the selector's labels, sorted by key, each required present; then the endpoint's port by name
    assert keeps == [
        {
            "action": "keep",
            "source_labels": [
                "__meta_kubernetes_pod_label_app_kubernetes_io_component",
                "__meta_kubernetes_pod_labelpresent_app_kubernetes_io_component",
            ],
            "regex": "(inference-server);true",
        },
        {
            "action": "keep",
            "source_labels": [
                "__meta_kubernetes_pod_label_app_kubernetes_io_managed_by",
                "__meta_kubernetes_pod_labelpresent_app_kubernetes_io_managed_by",
            ],
            "regex": "(inference-backend-operator);true",
        },
        {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": ep["port"]},
    ]
    targets = [r["target_label"] for r in rules if "target_label" in r]
    assert targets[1:] == ["namespace", "container", "pod", "job", "endpoint", "__tmp_hash"], targets
    # the chart's relabelings verbatim, after the Operator's labels and before the sharding
    chart = [relabel_config(r) for r in ep["relabelings"]]
    assert rules[-2 - len(chart) : -2] == chart
    assert chart[0] == {"regex": "__meta_kubernetes_pod_label_(.+)", "action": "labelmap"}
    assert rules[-1] == {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"}


@needs_helm
def test_watched_namespaces_limit_discovery() -> None:
    pm = _pod_monitor("clusterWide=false", "watchNamespaces={team-a,team-b}")
    (job,) = scrape_configs(pm, KUBECONFIG)
    assert job["kubernetes_sd_configs"][0]["namespaces"] == {"names": ["team-a", "team-b"]}


def test_expressions_job_label_and_no_running_filter() -> None:
    pm = {
        "metadata": {"namespace": "mon", "name": "x"},
        "spec": {
            "jobLabel": "app.kubernetes.io/name",
            "podTargetLabels": ["team.example/owner"],
            "selector": {
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["a", "b"]},
                    {"key": "canary", "operator": "DoesNotExist"},
                ]
            },
            "podMetricsEndpoints": [{"port": "metrics", "filterRunning": False, "scheme": "https"}],
        },
    }
    (job,) = scrape_configs(pm, KUBECONFIG, shard=1, shards=2)
    assert job["kubernetes_sd_configs"][0]["namespaces"] == {"names": ["mon"]}  # no selector: its own namespace
    assert job["scheme"] == "https" and "metrics_path" not in job
    rules = job["relabel_configs"]
    assert not any(r.get("source_labels") == ["__meta_kubernetes_pod_phase"] for r in rules)
    assert rules[1]["regex"] == "(a|b);true" and rules[1]["action"] == "keep"
    assert rules[2] == {
        "action": "drop",
        "source_labels": ["__meta_kubernetes_pod_labelpresent_canary"],
        "regex": "true",
    }
    owner = sanitize("team.example/owner")
    copied = {"source_labels": [f"__meta_kubernetes_pod_label_{owner}"], "target_label": owner}
    assert {**copied, "regex": "(.+)", "replacement": "${1}"} in rules
    job_rules = [r for r in rules if r.get("target_label") == "job"]
    assert job_rules[-1]["source_labels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
    assert rules[-2]["modulus"] == 2 and rules[-1]["regex"] == "1"


def test_relabel_config_keys() -> None:
    rule = {"sourceLabels": ["a"], "targetLabel": "b", "replacement": "", "action": "Replace", "regex": ""}
    assert relabel_config(rule) == {"source_labels": ["a"], "target_label": "b", "replacement": "", "action": "replace"}


@needs_helm
def test_prometheus_accepts_the_job(tmp_path: Path) -> None:
    promtool = Path(lib_sh("binpath promtool"))
    if not os.access(promtool, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{promtool} missing: e2e/build-binaries promtool")
        pytest.skip(f"{promtool} missing: e2e/build-binaries promtool")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    config = tmp_path / "prometheus.yml"
    jobs = scrape_configs(_pod_monitor(), str(kubeconfig))
    config.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    res = subprocess.run([str(promtool), "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
