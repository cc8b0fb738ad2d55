"""A monitoring.coreos.com/v1 PodMonitor as the Prometheus scrape job the Prometheus Operator generates for it, so that
a Prometheus without the Operator (a host process in e2e/) scrapes what a cluster with the Operator would: the same
pods (kubernetes_sd_configs role pod, the same keep rules), the same target labels (the Operator's, then the
PodMonitor's relabelings verbatim).

Source: the Prometheus Operator's ConfigGenerator.generatePodMonitorConfig and the helpers it calls
(pkg/prometheus/promcfg.go: initRelabelings, generateRunningFilter, generateK8SSDConfig,
getNamespacesFromNamespaceSelector, generateRelabelConfig, generateAddressShardingRelabelingRules; its PodMonitor API
documents filterRunning "drop pods that are not running (Failed, Succeeded), enabled by default"). Per endpoint i of
spec.podMetricsEndpoints, in this order:

    job_name podMonitor/<namespace>/<name>/<i>; honor_labels (false unless the endpoint says)
    kubernetes_sd_configs: role pod; namespaces.names = namespaceSelector.matchNames, none for any: true, else the
        PodMonitor's own namespace
    scrape_interval, scrape_timeout, metrics_path, scheme (those the endpoint sets)
    relabel_configs:
        job -> __tmp_prometheus_job_name
        drop __meta_kubernetes_pod_phase (Failed|Succeeded)                  (filterRunning, default on)
        keep [__meta_kubernetes_pod_label_<k>, __meta_kubernetes_pod_labelpresent_<k>] "(<v>);true" per matchLabels
            key, sorted (k sanitized: [^a-zA-Z0-9_] -> _); matchExpressions In/NotIn/Exists/DoesNotExist likewise
        keep __meta_kubernetes_pod_container_port_name "<port>"
        __meta_kubernetes_namespace -> namespace, _pod_container_name -> container, _pod_name -> pod
        each podTargetLabels label's value -> its sanitized name
        job = "<namespace>/<name>" (jobLabel: the pod label's value when set)
        endpoint = "<port>"
        the endpoint's relabelings (camelCase keys in snake_case, action lower-cased)
        hashmod of __address__ into __tmp_hash (modulus: the shards), keep __tmp_hash "$(SHARD)"

Two things differ, both because this Prometheus is not a pod of the cluster: the Operator leaves the API server to
in-cluster discovery (no apiserverConfig), here ``kubeconfig_file`` names the cluster; and "$(SHARD)", which the
Operator's config-reloader replaces with the Prometheus pod's shard number, is that number here (0 of 1 shard).
"""

from __future__ import annotations

import re
from typing import Any

Json = dict[str, Any]

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_RELABEL_KEYS = ("sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action")


def sanitize(name: str) -> str:
    """A Kubernetes label name as Prometheus's discovery writes it into a label name (sanitizeLabelName)."""
    return _INVALID.sub("_", name)


def _snake(key: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), key)


def relabel_config(rule: Json) -> Json:
    """A monitoring.coreos.com RelabelConfig as Prometheus's relabel_config (generateRelabelConfig: the set keys in
    its order, the action lower-cased)."""
    # replacement is a pointer there (an empty one is kept); the others are left out when empty or zero
    out = {
        _snake(k): rule[k]
        for k in _RELABEL_KEYS
        if (rule.get(k) is not None if k == "replacement" else rule.get(k) not in (None, "", [], 0))
    }
    if "action" in out:
        out["action"] = str(out["action"]).lower()
    return out


def _selector_rules(selector: Json) -> list[Json]:
    rules: list[Json] = []
    for key in sorted(selector.get("matchLabels") or {}):
        k = sanitize(key)
        source = [f"__meta_kubernetes_pod_label_{k}", f"__meta_kubernetes_pod_labelpresent_{k}"]
        rules.append({"action": "keep", "source_labels": source, "regex": f"({selector['matchLabels'][key]});true"})
    for exp in selector.get("matchExpressions") or []:
        k, op = sanitize(exp["key"]), exp["operator"]
        if op in ("In", "NotIn"):
            source = [f"__meta_kubernetes_pod_label_{k}", f"__meta_kubernetes_pod_labelpresent_{k}"]
            regex = f"({'|'.join(exp['values'])});true"
            rules.append({"action": "keep" if op == "In" else "drop", "source_labels": source, "regex": regex})
        elif op in ("Exists", "DoesNotExist"):
            action = "keep" if op == "Exists" else "drop"
            rules.append(
                {"action": action, "source_labels": [f"__meta_kubernetes_pod_labelpresent_{k}"], "regex": "true"}
            )
    return rules


def _sd_config(pm: Json, kubeconfig: str) -> Json:
    sel = pm["spec"].get("namespaceSelector") or {}
    sd: Json = {"role": "pod"}
    if not sel.get("any"):
        sd["namespaces"] = {"names": list(sel.get("matchNames") or [pm["metadata"]["namespace"]])}
    sd["kubeconfig_file"] = kubeconfig
    return sd


def scrape_configs(pm: Json, kubeconfig: str, shard: int = 0, shards: int = 1) -> list[Json]:
    """The scrape jobs the Prometheus Operator generates for PodMonitor ``pm`` (one per podMetricsEndpoint), the
    pods discovered through the API server of ``kubeconfig``."""
    namespace, name = pm["metadata"]["namespace"], pm["metadata"]["name"]
    jobs = []
    for i, ep in enumerate(pm["spec"]["podMetricsEndpoints"]):
        job: Json = {"job_name": f"podMonitor/{namespace}/{name}/{i}", "honor_labels": bool(ep.get("honorLabels"))}
        job["kubernetes_sd_configs"] = [_sd_config(pm, kubeconfig)]
        for key, field in (("scrape_interval", "interval"), ("scrape_timeout", "scrapeTimeout")):
            if ep.get(field):
                job[key] = ep[field]
        for key in ("path", "scheme"):
            if ep.get(key):
                job["metrics_path" if key == "path" else key] = ep[key]
        rules: list[Json] = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
        if ep.get("filterRunning", True):
            rules.append(
                {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"}
            )
        rules += _selector_rules(pm["spec"]["selector"])
        if ep.get("port"):
            rules.append(
                {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": ep["port"]}
            )
        rules += [
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ]
        for label in pm["spec"].get("podTargetLabels") or []:
            source = [f"__meta_kubernetes_pod_label_{sanitize(label)}"]
            rules.append(
                {"source_labels": source, "target_label": sanitize(label), "regex": "(.+)", "replacement": "${1}"}
            )
        rules.append({"target_label": "job", "replacement": f"{namespace}/{name}"})
        if label := pm["spec"].get("jobLabel"):
            source = [f"__meta_kubernetes_pod_label_{sanitize(label)}"]
            rules.append({"source_labels": source, "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
        if ep.get("port"):
            rules.append({"target_label": "endpoint", "replacement": ep["port"]})
        rules += [relabel_config(r) for r in ep.get("relabelings") or []]
        rules += [
            {"source_labels": ["__address__"], "target_label": "__tmp_hash", "modulus": shards, "action": "hashmod"},
            {"source_labels": ["__tmp_hash"], "regex": str(shard), "action": "keep"},
        ]
        job["relabel_configs"] = rules
        jobs.append(job)
    return jobs
