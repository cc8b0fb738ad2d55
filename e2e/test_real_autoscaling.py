"""Autoscaling of real engine pods on their own metric (issue 32 item 3), every link real:

    llama.cpp pods on a real node (the operator's Deployment, weights fetched from the local S3) --GET /metrics-->
    Prometheus (a host process; kubernetes_sd_configs role pod through the API server: the chart's PodMonitor, as
    helm renders it, translated as the Prometheus Operator does, ib_testkit.podmonitor) --> KEDA's adapter
    (external.metrics.k8s.io) --> the HPA KEDA made from the operator's ScaledObject --> the Deployment's replicas

A bounded burst of concurrent greedy completions through the backend's Service (ClusterIP, kube-proxy) keeps more
requests waiting than llama-server's one slot (spec.batching.maxBatchSize 1) takes: llamacpp:requests_deferred, the
metric the operator's query sums, rises; the HPA scales the Deployment up; the new pods start on the real node,
Prometheus discovers and scrapes them, each serves a completion; after the burst the Deployment goes back to one pod.
Asserted on what happened: Prometheus's targets API lists the real pods (pod IP, the labels the query selects on), the
query returns the engine's series, the HPA's status, the new pods Running and Ready on the real node and serving, the
scale-down. The timeline is printed (pytest -s; also in the failure message and the test's tmp dir).

Skipped, saying why, without a real node (ib_testkit.real_nodes.real_node_or_skip); a run that asked for real nodes
(E2E_REAL_NODES > 0) or CI fails instead, also when KEDA or Prometheus (e2e/build-binaries) is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit import free_port
from ib_testkit.autoscaling import Keda, missing_pieces, running_keda, start_prometheus
from ib_testkit.cluster import CHART, Operator, apply, chart_helm_args, get_json, kubectl, tool, wait_phase
from ib_testkit.podmonitor import scrape_configs
from ib_testkit.real_nodes import TINY_FACTS, completion, real_backend

NAME = "scale"
BURST_SECONDS = int(os.environ.get("E2E_REAL_AUTOSCALING_BURST_SECONDS", "45"))
CLIENTS = 6  # one slot: the other five wait (llamacpp:requests_deferred)
MAX_TOKENS = 128
TARGET = 2  # requests waiting per replica: ceil(5 / 2) = 3 replicas
MIN_REPLICAS, MAX_REPLICAS = 1, 3
SCALE_DOWN_WINDOW = 60
"""Longer than the burst: three llama-servers drain six clients' queue to about 1 request waiting, so with a 20 s
window the HPA went 3 -> 2 -> 1 -> 3 while the burst ran (measured); with this one the scale-down comes after it."""
QUERY_METRIC = "llamacpp:requests_deferred"


@pytest.fixture(scope="module")
def chain(node: dict[str, Any]) -> None:
    """The real node is there (the node fixture skips or fails as every real-node test); so must KEDA and Prometheus."""
    missing = missing_pieces()
    if missing:
        msg = "autoscaling chain incomplete: " + "; ".join(missing)
        if os.environ.get("CI") == "true" or int(os.environ.get("E2E_REAL_NODES", "0") or 0) > 0:
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("real-autoscaling")


@pytest.fixture(scope="module")
def prometheus_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def helm_args(prometheus_port: int) -> tuple[str, ...]:
    """The chart's values of this module: its PodMonitor on (scraping every second), the ScaledObjects' Prometheus."""
    sets = (
        "monitoring.podMonitor.enabled=true",
        "monitoring.podMonitor.interval=1s",
        f"autoscaling.prometheusAddress=http://127.0.0.1:{prometheus_port}",
    )
    return (*chart_helm_args(), *(a for s in sets for a in ("--set", s)))


@pytest.fixture(scope="module")
def pod_monitor(helm_args: tuple[str, ...]) -> dict[str, Any]:
    """The chart's PodMonitor as helm renders it with these values."""
    res = subprocess.run(
        [tool("helm"), "template", "ib", str(CHART), "--namespace", "ib-system", *helm_args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    (pm,) = [d for d in yaml.safe_load_all(res.stdout) if d and d["kind"] == "PodMonitor"]
    return pm  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def keda(chain: None, workdir: Path, kube_http: Any) -> Iterator[Keda]:
    with running_keda(workdir / "keda", kube_http, kubectl) as k:
        yield k


@pytest.fixture(scope="module")
def operator(keda: Keda, sa_kubeconfig: str, e2e_dir: Path, helm_args: tuple[str, ...]) -> Iterator[Operator]:
    """The chart's operator (as conftest's) with this module's values, started once KEDA's CRDs exist."""
    op = Operator(sa_kubeconfig, e2e_dir / "logs" / "operator-real-autoscaling.log", helm_args=helm_args)
    op.start()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def prometheus(chain: None, workdir: Path, pod_monitor: dict[str, Any], prometheus_port: int) -> Iterator[str]:
    """Prometheus discovering pods through the API server with the PodMonitor's job; yields its URL."""
    jobs = scrape_configs(pod_monitor, os.environ["KUBECONFIG"])
    proc, url = start_prometheus(workdir / "prometheus", {}, port=prometheus_port, scrape_configs=jobs)
    yield url
    proc.stop()


def prom_api(prom: str, path: str, **params: str) -> Any:
    with urllib.request.urlopen(f"{prom}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


def promql(prom: str, query: str) -> float | None:
    result = prom_api(prom, "query", query=query)["result"]
    return float(result[0]["value"][1]) if result else None


def engine_targets(prom: str, namespace: str) -> dict[str, dict[str, Any]]:
    """The PodMonitor job's active targets in ``namespace``, by their pod label."""
    targets = prom_api(prom, "targets", state="active")["activeTargets"]
    return {
        t["labels"]["pod"]: t
        for t in targets
        if t["scrapePool"].startswith("podMonitor/") and t["labels"].get("namespace") == namespace
    }


@dataclass
class Load:
    """CLIENTS threads sending greedy completions through url, one after the other each, until stopped."""

    url: str
    ok: int = 0
    tokens: int = 0
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def one(self) -> None:
        body = {"model": NAME, "prompt": "the quick brown fox", "max_tokens": MAX_TOKENS, "temperature": 0}
        req = urllib.request.Request(
            self.url + "/v1/completions",
            json.dumps({**body, "ignore_eos": True}).encode(),
            {"Content-Type": "application/json"},
        )
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    self.tokens += json.loads(r.read())["usage"]["completion_tokens"]
                    self.ok += 1
            except Exception as e:  # every failure counts
                self.errors.append(f"{type(e).__name__}: {e}")

    def start(self) -> None:
        self.threads = [threading.Thread(target=self.one, daemon=True) for _ in range(CLIENTS)]
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=90)


@dataclass
class Watch:
    """The backend's Deployment, pods and HPA, the engine metric and Prometheus's targets, sampled every second while
    the burst runs and after it; each change is a timeline event."""

    namespace: str
    prom: str
    query: str
    t0: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str]] = field(default_factory=list)
    replicas: list[tuple[float, int]] = field(default_factory=list)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The latest version of each pod seen (not only the current ones)."""
    seen: dict[tuple[str, str], float] = field(default_factory=dict)
    """(pod, what) -> when first seen: scheduled, Running, Ready, target up, terminating."""
    hpa: list[dict[str, Any]] = field(default_factory=list)
    metric_max: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def mark(self, what: str) -> float:
        t = time.monotonic() - self.t0
        self.events.append((t, what))
        return t

    def first(self, pod: str, what: str, text: str) -> None:
        if (pod, what) not in self.seen:
            self.seen[pod, what] = self.mark(f"pod {pod}: {text}")

    def sample(self) -> None:
        items = get_json("deployment,pods,hpa", "-n", self.namespace)["items"]
        deploy = next(i for i in items if i["kind"] == "Deployment")
        spec, ready = deploy["spec"]["replicas"], deploy["status"].get("readyReplicas", 0)
        if not self.replicas or self.replicas[-1][1] != spec:
            self.mark(f"Deployment replicas {self.replicas[-1][1] if self.replicas else '-'} -> {spec} (ready {ready})")
        self.replicas.append((time.monotonic() - self.t0, spec))
        for hpa in (i for i in items if i["kind"] == "HorizontalPodAutoscaler"):
            st = hpa.get("status") or {}
            current = [m.get("external", {}).get("current") for m in st.get("currentMetrics") or []]
            if not self.hpa or self.hpa[-1]["desiredReplicas"] != st.get("desiredReplicas"):
                self.mark(f"HPA desiredReplicas {st.get('desiredReplicas')} (external metric now {current})")
            self.hpa.append({"desiredReplicas": st.get("desiredReplicas"), "current": current})
        for p in (i for i in items if i["kind"] == "Pod"):
            self._pod(p)
        value = promql(self.prom, self.query)
        if value and value > self.metric_max:
            if not self.metric_max:
                self.mark(f"engine queue seen by Prometheus: {self.query} = {value:g}")
            self.metric_max = value
        for pod, target in engine_targets(self.prom, self.namespace).items():
            if target["health"] == "up":
                self.first(pod, "target", f"scraped by Prometheus ({target['scrapeUrl']})")

    def _pod(self, p: dict[str, Any]) -> None:
        name = p["metadata"]["name"]
        self.pods[name] = p
        status = p.get("status") or {}
        if node := p["spec"].get("nodeName"):
            self.first(name, "scheduled", f"scheduled to {node}")
        if status.get("phase") == "Running":
            self.first(name, "Running", f"Running, IP {status.get('podIP')}")
        if any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []):
            self.first(name, "Ready", "Ready (llama-server /health)")
        if p["metadata"].get("deletionTimestamp"):
            self.first(name, "terminating", "terminating")

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.sample()
            except Exception as e:  # a transient read error is a gap in the timeline, not a failure
                self.mark(f"watch error: {e!r}")
            self.stop.wait(1.0)

    def render(self) -> str:
        return "\n".join(f"  {t:7.1f}s  {what}" for t, what in sorted(self.events))


def _serving(pod: dict[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
    return ready and not pod["metadata"].get("deletionTimestamp")


def _live_pods(namespace: str) -> list[dict[str, Any]]:
    pods = get_json("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={NAME}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _backend(namespace: str) -> dict[str, Any]:
    model = {
        "uri": "s3://models/tiny/model-f32.gguf",
        "format": "gguf",
        "quantization": "f32",
        "credentialsSecret": "s3",
        **TINY_FACTS,
    }
    autoscaling = {
        "minReplicas": MIN_REPLICAS,
        "maxReplicas": MAX_REPLICAS,
        "metric": "queueDepth",
        "target": TARGET,
        "behavior": {"scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": SCALE_DOWN_WINDOW},
    }
    doc = real_backend(NAME, model, backend="llamacpp", batching={"maxBatchSize": 1}, autoscaling=autoscaling)
    doc["metadata"]["namespace"] = namespace
    return doc


def _scraped_by_pod_ip(prom: str, namespace: str, pm: dict[str, Any], node: str, wait_until: Any) -> dict[str, Any]:
    """The one pod, discovered by Prometheus through the API server and scraped at its IP with the PodMonitor's
    labels; its engine series is in Prometheus under the labels the operator's query selects on. Returns the pod."""
    (pod,) = _live_pods(namespace)
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    port = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "http")

    def up() -> dict[str, Any] | None:
        t = engine_targets(prom, namespace).get(name)
        return t if t and t["health"] == "up" else None

    target = wait_until(f"Prometheus to discover and scrape pod {name}", up, timeout=60)
    labels, meta = target["labels"], target["discoveredLabels"]
    assert target["scrapeUrl"] == f"http://{ip}:{port}/metrics", target
    assert target["scrapePool"] == f"podMonitor/{pm['metadata']['namespace']}/{pm['metadata']['name']}/0"
    assert meta["__meta_kubernetes_pod_node_name"] == node and meta["__meta_kubernetes_pod_ip"] == ip, meta
    want = {"namespace": namespace, "pod": name, "app_kubernetes_io_instance": NAME, "endpoint": "http"}
    assert {k: labels.get(k) for k in want} == want, labels
    assert labels["job"] == f"{pm['metadata']['namespace']}/{pm['metadata']['name']}", labels
    assert labels["app_kubernetes_io_name"] == "llamacpp" and "pod_template_hash" not in labels, labels
    selector = f'{QUERY_METRIC}{{namespace="{namespace}",app_kubernetes_io_instance="{NAME}"}}'
    series = wait_until(f"{selector} in Prometheus", lambda: prom_api(prom, "query", query=selector)["result"])
    assert [s["metric"]["pod"] for s in series] == [name] and float(series[0]["value"][1]) == 0.0, series
    return pod


def _hpa_active(keda: Keda, namespace: str, wait_until: Any) -> dict[str, Any]:
    def active() -> dict[str, Any] | None:
        keda.check_alive()
        hpas = get_json("hpa", "-n", namespace)["items"]
        conds = {c["type"]: c for c in (hpas[0].get("status", {}).get("conditions", []) if hpas else [])}
        return hpas[0] if conds.get("ScalingActive", {}).get("status") == "True" else None

    hpa: dict[str, Any] = wait_until(
        "the HPA KEDA made to read the external metric (ScalingActive)", active, timeout=120
    )
    return hpa


def test_engine_queue_scales_real_pods_up_and_back(
    operator: Operator,
    keda: Keda,
    prometheus: str,
    pod_monitor: dict[str, Any],
    node: dict[str, Any],
    rns: str,
    wait_until: Any,
    workdir: Path,
) -> None:
    started = time.monotonic()
    apply(_backend(rns))
    wait_phase(wait_until, rns, NAME, "Ready", timeout=600)
    so = wait_until("the operator's ScaledObject", lambda: get_json("scaledobject", "-n", rns)["items"], timeout=60)[0]
    trigger = so["spec"]["triggers"][0]
    query = trigger["metadata"]["query"]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["serverAddress"] == prometheus, trigger
    assert query == f'sum({QUERY_METRIC}{{namespace="{rns}",app_kubernetes_io_instance="{NAME}"}})', query
    first = _scraped_by_pod_ip(prometheus, rns, pod_monitor, node["metadata"]["name"], wait_until)
    wait_until(
        f"the operator's query to return the idle engine's 0 ({query})", lambda: promql(prometheus, query) == 0.0
    )
    hpa = _hpa_active(keda, rns, wait_until)
    assert hpa["spec"]["scaleTargetRef"]["name"] == NAME and hpa["spec"]["minReplicas"] == MIN_REPLICAS, hpa["spec"]
    svc = get_json("service", NAME, "-n", rns)
    watch = Watch(rns, prometheus, query)
    report = ""
    try:
        served, load, t_end = _burst(watch, f"http://{svc['spec']['clusterIP']}:8000", first["metadata"]["name"])
        wait_until(
            f"the Deployment back to {MIN_REPLICAS} pod after the burst",
            lambda: watch.replicas[-1][1] == MIN_REPLICAS and len(_live_pods(rns)) == MIN_REPLICAS,
            timeout=SCALE_DOWN_WINDOW + 180,
        )
        survivors = [p["metadata"]["name"] for p in _live_pods(rns)]
        watch.mark(f"scaled back to {MIN_REPLICAS}: {survivors}")
    finally:
        watch.stop.set()
        report = (
            f"autoscaling of real llama.cpp pods (test took {time.monotonic() - started:.0f}s; burst: {CLIENTS} "
            f"clients x up to {MAX_TOKENS} tokens through the ClusterIP for {BURST_SECONDS}s):\n{watch.render()}"
        )
        print("\n" + report)
        (workdir / "timeline.txt").write_text(report + "\n")
    _check(watch, served, load, first["metadata"]["name"], node["metadata"]["name"], report)
    # the ReplicaSet picks which pods go (not always the newest): all but the survivor terminated
    gone = set(watch.pods) - set(survivors)
    assert gone and all((n, "terminating") in watch.seen for n in gone), f"{sorted(gone)}\n{report}"
    at_end = [r for t, r in watch.replicas if t <= t_end][-1]
    assert at_end > MIN_REPLICAS, f"back to {MIN_REPLICAS} replica before the burst ended\n{report}"


def _burst(watch: Watch, url: str, first: str) -> tuple[dict[str, str], Load, float]:
    """The load for BURST_SECONDS, the watch running; each new pod that turns Ready serves a completion at its IP.
    Returns {new pod: its completion}, the load's record and when it ended."""
    threading.Thread(target=watch.run, daemon=True).start()
    load = Load(url)
    t_load = watch.mark(f"load start: {CLIENTS} clients, greedy completions of up to {MAX_TOKENS} tokens via {url}")
    load.start()
    served: dict[str, str] = {}
    try:
        while time.monotonic() - watch.t0 < t_load + BURST_SECONDS:
            for name, pod in list(watch.pods.items()):
                if name != first and name not in served and _serving(pod):
                    out = completion(f"http://{pod['status']['podIP']}:8000", NAME, "the quick brown fox", 8)
                    served[name] = out["choices"][0]["text"]
                    watch.first(name, "served", f"served a completion at its IP: {served[name]!r}")
            time.sleep(1)
    finally:
        load.finish()
        t_end = watch.mark(f"load end: {load.ok} completions ({load.tokens} tokens), {len(load.errors)} errors")
    return served, load, t_end


def _check(watch: Watch, served: dict[str, str], load: Load, first: str, node: str, report: str) -> None:
    new = [n for n in watch.pods if n != first]
    peak = max(r for _, r in watch.replicas)
    desired = [h["desiredReplicas"] for h in watch.hpa if h["desiredReplicas"]]
    assert peak >= 2 and new, f"the Deployment never scaled up during the burst\n{report}"
    assert max(desired) >= 2, f"HPA desiredReplicas stayed {set(desired)}\n{report}"
    assert watch.metric_max >= TARGET, f"the engine queue in Prometheus peaked at {watch.metric_max}\n{report}"
    for n in new:  # each new pod ran on the real node, Ready, scraped by Prometheus, served
        assert watch.pods[n]["spec"]["nodeName"] == node, (n, watch.pods[n]["spec"].get("nodeName"))
        for what in ("Running", "Ready", "target"):
            assert (n, what) in watch.seen, f"pod {n} never {what}\n{report}"
    assert set(served) == set(new), f"new pods that served a completion: {sorted(served)} of {new}\n{report}"
    assert not load.errors, f"{len(load.errors)} failed completions during the burst: {load.errors[:3]}\n{report}"
