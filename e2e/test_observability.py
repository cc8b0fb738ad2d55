"""The chart's observability against a real Prometheus (issue 17 item 4; docs/observability.md):

    the operator (local process, metrics port)  --ServiceMonitor's endpoint (path /metrics)-->  Prometheus
    our PyTorch runner (real engine process)    --PodMonitor's endpoint and relabelings----->  Prometheus (1 s)
    the chart's PrometheusRule spec             --rule_files (evaluated every second)------->  Prometheus

The chart is rendered by helm with every monitoring toggle on. The operator and the engine are processes on this host,
not pods Prometheus could discover (KWOK's pods run nothing; e2e/test_real_autoscaling.py discovers real engine pods
through the API server with ib_testkit.podmonitor), so the two scrape jobs are static, written as the Prometheus
Operator would generate them from the chart's ServiceMonitor and PodMonitor: the PodMonitor's target carries the
__meta_kubernetes_* labels of the backend's real pod (read from the API server: the pod the operator's Deployment
made), then the Operator's own relabeling (keep the selected pods and port; namespace, pod, container, job) and
the chart's relabelings verbatim. So the engine series get the labels the rules and dashboards group by from the
chart's relabeling, not from this test.

After traffic to the engine, EVERY dashboard panel expression (template variables substituted) and EVERY rule
expression goes to /api/v1/query: each must succeed without warnings; each whose metric names all exist must
return data, the engine's series under the backend's namespace and instance; every rule's health is ok; the TTFT
alert (objective 1 ms, which a real CPU engine misses) is pending or firing for the backend, and the not-Ready
alert's expression names the backend that cannot be placed.

Needs e2e/build-binaries' prometheus and helm, the runners venv (hack/runners-venv; $IB_RUNNERS_VENV overrides).
Locally a missing piece skips the module; under CI=true it fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit import ROOT, free_port
from ib_testkit.autoscaling import Proc, lib_sh, start_prometheus, wait_http
from ib_testkit.cluster import Operator, apply, example, get_json, kubectl, tool, wait_phase
from ib_testkit.podmonitor import relabel_config, sanitize, scrape_configs

CHART = ROOT / "charts/inference-backend"
SYSTEM_NS = "ib-system"
RATE_INTERVAL = "30s"
TTFT_OBJECTIVE_MS = 1
MONITORING = (
    "monitoring.serviceMonitor.enabled=true",
    "monitoring.podMonitor.enabled=true",
    "monitoring.podMonitor.interval=1s",  # the generated job's scrape_interval (15 s by default): rates in 30 s windows
    "monitoring.prometheusRule.enabled=true",
    "monitoring.dashboards.enabled=true",
)
# The meaning -> names alternations the rules and dashboards use that our runner (vLLM's names) serves.
ENGINE_SERIES = ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket")


def _runners_venv() -> Path:
    import hashlib

    if env := os.environ.get("IB_RUNNERS_VENV"):
        return Path(env)
    cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
    digest = hashlib.sha256((ROOT / "hack" / "runners-requirements.txt").read_bytes()).hexdigest()[:12]
    return cache / f"venv-runners-{digest}"


VENV_ENV = {
    "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT / 'testkit'}",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@pytest.fixture(scope="module")
def ready() -> None:
    missing = []
    prom = Path(lib_sh("binpath prometheus"))
    if not os.access(prom, os.X_OK):
        missing.append(f"{prom} (e2e/build-binaries prometheus)")
    if not (_runners_venv() / ".installed").is_file():
        missing.append(f"the runners venv {_runners_venv()} (hack/runners-venv)")
    if missing:
        msg = "observability chain incomplete: " + "; ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("observability")


@pytest.fixture(scope="module")
def rendered(ready: None) -> dict[str, Any]:
    """The chart's monitoring objects as helm renders them with every toggle on, by kind."""
    args = [tool("helm"), "template", "ib", str(CHART), "--namespace", SYSTEM_NS]
    for s in MONITORING:
        args += ["--set", s]
    res = subprocess.run(args, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    out = {d["kind"]: d for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor", "PrometheusRule")}
    out["ConfigMap"] = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("dashboards")
    )
    out["Service"] = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics"))
    return out


@pytest.fixture(scope="module")
def engine(ready: None, workdir: Path) -> Iterator[str]:
    """Our PyTorch runner on a tiny random model made on the spot; yields its URL."""
    py = str(_runners_venv() / "bin" / "python")
    model = workdir / "tiny"
    subprocess.run(
        [py, "-m", "inference_backend.runners.tiny", str(model)],
        env={**os.environ, **VENV_ENV},
        check=True,
        capture_output=True,
    )
    port = free_port()
    cmd = [
        py,
        "-m",
        "inference_backend.runners.pytorch",
        "--model",
        str(model),
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-batch-size",
        "2",
    ]
    proc = Proc("pytorch runner", cmd, workdir / "engine.log", VENV_ENV)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(proc, url + "/health", timeout=180)
        yield url
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def metrics_operator(ready: None, sa_kubeconfig: str, e2e_dir: Path) -> Iterator[tuple[Operator, int]]:
    """The operator as conftest's, with its metrics served on a free port."""
    kubectl("apply", "-f", str(ROOT / "docs/examples/models.yaml"), "-n", "default")
    op = Operator(sa_kubeconfig, e2e_dir / "logs" / "operator-observability.log")
    port = free_port()
    op.start(metrics_port=port)
    yield op, port
    op.stop()


def service_monitor_job(sm: dict[str, Any], service: dict[str, Any], target: str) -> dict[str, Any]:
    """The scrape job the Prometheus Operator generates for the chart's ServiceMonitor, its one target being the
    local operator (as an endpoint of the metrics Service)."""
    (ep,) = sm["spec"]["endpoints"]
    name = service["metadata"]["name"]
    return {
        "job_name": f"serviceMonitor/{sm['metadata']['namespace']}/{sm['metadata']['name']}/0",
        "metrics_path": ep["path"],
        "static_configs": [
            {
                "targets": [target],
                "labels": {
                    "__meta_kubernetes_namespace": SYSTEM_NS,
                    "__meta_kubernetes_service_name": name,
                    "__meta_kubernetes_endpoint_port_name": ep["port"],
                    **{
                        f"__meta_kubernetes_service_label_{sanitize(k)}": v
                        for k, v in service["metadata"]["labels"].items()
                    },
                },
            }
        ],
        "relabel_configs": [
            *(
                {"source_labels": [f"__meta_kubernetes_service_label_{sanitize(k)}"], "regex": v, "action": "keep"}
                for k, v in sm["spec"]["selector"]["matchLabels"].items()
            ),
            {"source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": ep["port"], "action": "keep"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"target_label": "endpoint", "replacement": ep["port"]},
            *(relabel_config(r) for r in ep.get("relabelings") or []),
        ],
    }


def pod_monitor_job(pm: dict[str, Any], pod: dict[str, Any], target: str) -> dict[str, Any]:
    """The scrape job the Prometheus Operator generates for the chart's PodMonitor (ib_testkit.podmonitor, the one
    e2e/test_real_autoscaling.py runs with Kubernetes discovery), its one target being the real engine process
    standing for ``pod`` (the backend's pod in the API server: its labels, name, namespace, phase) in place of the
    pod discovery."""
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    (container,) = pod["spec"]["containers"]
    meta = {
        "__meta_kubernetes_namespace": pod["metadata"]["namespace"],
        "__meta_kubernetes_pod_name": pod["metadata"]["name"],
        "__meta_kubernetes_pod_phase": pod["status"].get("phase", ""),
        "__meta_kubernetes_pod_container_name": container["name"],
        "__meta_kubernetes_pod_container_port_name": ep["port"],
    }
    for k, v in pod["metadata"]["labels"].items():
        meta[f"__meta_kubernetes_pod_label_{sanitize(k)}"] = v
        meta[f"__meta_kubernetes_pod_labelpresent_{sanitize(k)}"] = "true"
    (job,) = scrape_configs(pm, kubeconfig="")
    del job["kubernetes_sd_configs"]
    return {**job, "static_configs": [{"targets": [target], "labels": meta}]}


def api(prom: str, path: str, **params: str) -> Any:
    url = f"{prom}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:  # 400 bad_data: a query that does not parse
        body = json.loads(e.read() or b"{}")
        raise AssertionError(f"{path} {params}: {e.code} {body.get('errorType')}: {body.get('error')}") from e
    assert body["status"] == "success", body
    assert not body.get("warnings"), (params, body["warnings"])
    return body["data"]


def traffic(url: str, requests: int = 12, concurrency: int = 4) -> None:
    """Completions to the engine, some at once (so that requests wait and the KV cache is reserved)."""

    def one() -> None:
        body = json.dumps({"model": "tiny", "prompt": "hello there", "max_tokens": 8}).encode()
        headers = {"Content-Type": "application/json"}
        req = urllib.request.Request(url + "/v1/completions", data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 200

    for _ in range(requests // concurrency):
        threads = [threading.Thread(target=one) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def substitute(expr: str, namespace: str, backend: str) -> str:
    return expr.replace("$__rate_interval", RATE_INTERVAL).replace("$namespace", namespace).replace("$backend", backend)


def metric_names(expr: str) -> list[list[str]]:
    """Each vector selector's metric names: the alternation of a {__name__=~"a|b"} selector, or a bare name (the
    operator's inference_backend_* and up: the only bare names the chart's queries use)."""
    out = [m.split("|") for m in re.findall(r'__name__=~?"([^"]+)"', expr)]
    out += [[n] for n in re.findall(r"\b(inference_backend_[a-z_]+|up)\b(?=\s*[{\[)]|\s|$)", expr)]
    return out


def test_every_dashboard_and_rule_query_runs_against_a_real_prometheus(
    ready: None,
    rendered: dict[str, Any],
    engine: str,
    metrics_operator: tuple[Operator, int],
    ns: str,
    wait_until: Any,
    workdir: Path,
) -> None:
    op, metrics_port = metrics_operator
    # A backend the engine stands for, with a TTFT objective no engine meets; and one that cannot be placed.
    doc = example("pytorch-research.yaml", ns)
    doc["spec"].setdefault("hardware", {})["accelerator"] = "cpu"
    doc["spec"]["objectives"] = {"ttftMillis": TTFT_OBJECTIVE_MS}
    name = doc["metadata"]["name"]
    stuck = example("pytorch-research.yaml", ns)
    stuck["metadata"]["name"] = "too-big"
    stuck["spec"].setdefault("hardware", {})["accelerator"] = "cpu"
    stuck["spec"]["model"]["parameters"] = "900B"
    apply(doc)
    apply(stuck)
    wait_phase(wait_until, ns, name, "Ready", timeout=120)

    def not_ready() -> str | None:
        phase = (get_json("ib", "too-big", "-n", ns).get("status") or {}).get("phase")
        return phase if phase in ("Failed", "Pending") else None

    wait_until("too-big not Ready", not_ready, timeout=60)
    pods = get_json("pods", "-n", ns, "-l", f"app.kubernetes.io/instance={name}")["items"]
    assert pods, f"no pod of {ns}/{name}"
    rules_file = workdir / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(rendered["PrometheusRule"]["spec"]))
    jobs = [
        service_monitor_job(rendered["ServiceMonitor"], rendered["Service"], f"127.0.0.1:{metrics_port}"),
        pod_monitor_job(rendered["PodMonitor"], pods[0], engine.removeprefix("http://")),
    ]
    prom_proc, prom = start_prometheus(workdir / "prometheus", {}, scrape_configs=jobs, rule_files=[rules_file])
    try:
        check_queries(prom, rendered, engine, ns, name, wait_until)
    except AssertionError:
        print(prom_proc.tail())
        raise
    finally:
        prom_proc.stop()
    assert op.alive()


def check_queries(prom: str, rendered: dict[str, Any], engine: str, ns: str, name: str, wait_until: Any) -> None:
    def both_up() -> list[Any] | None:
        up = api(prom, "query", query="up == 1")["result"]
        return up if len(up) == 2 else None

    up = wait_until("Prometheus scraping the operator and the engine", both_up, timeout=60)
    engine_up = next(u["metric"] for u in up if u["metric"]["job"].startswith(f"{SYSTEM_NS}/"))
    # the chart's relabeling gave the engine target the backend's labels
    assert engine_up.get("namespace") == ns and engine_up.get("app_kubernetes_io_instance") == name, engine_up
    assert engine_up.get("app_kubernetes_io_component") == "inference-server", engine_up
    traffic(engine)
    time.sleep(5)  # a few more scrapes after the traffic, so that every rate has two samples with it
    traffic(engine, requests=4, concurrency=4)

    def objective_seen() -> list[Any] | None:
        return api(prom, "query", query="inference_backend_ttft_objective_seconds")["result"] or None

    wait_until("the operator's TTFT objective in Prometheus", objective_seen, timeout=60)
    time.sleep(3)
    names = set(api(prom, "label/__name__/values"))
    for series in ENGINE_SERIES:
        assert series in names, f"{series} not scraped from the engine"

    # every dashboard panel: parses, no warnings, data where its series exist
    empty: list[str] = []
    checked = with_data = 0
    data = rendered["ConfigMap"]["data"]
    for file, text in sorted(data.items()):
        board = json.loads(text)
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                q = substitute(var["definition"], ns, name)
                m = re.fullmatch(r"label_values\((.*), (\w+)\)", q)
                assert m, q
                series = api(prom, "series", **{"match[]": m.group(1)})
                assert {s.get(m.group(2)) for s in series} >= {ns if var["name"] == "namespace" else name}, q
        for panel in board["panels"]:
            for target in panel["targets"]:
                expr = substitute(target["expr"], ns, name)
                result = api(prom, "query", query=expr)["result"]
                checked += 1
                with_data += bool(result)
                wanted = all(any(n in names for n in alt) for alt in metric_names(expr))
                if wanted and not result:
                    empty.append(f"{file} / {panel['title']}: {expr}")
    assert not empty, "queries whose series exist returned nothing:\n" + "\n".join(empty)

    # every rule: its expression parses and runs; its health in Prometheus's own evaluation is ok
    rules = [r for g in rendered["PrometheusRule"]["spec"]["groups"] for r in g["rules"]]
    results = {}
    for rule in rules:
        results[rule.get("alert") or rule.get("record")] = api(prom, "query", query=rule["expr"])["result"]
        checked += 1
        with_data += bool(results[rule.get("alert") or rule.get("record")])
        for alt in metric_names(rule["expr"]):  # each selector of the rule, grouped as the rule groups
            for n in alt:
                if n in ENGINE_SERIES:
                    got = api(
                        prom, "query", query=f'count by (namespace, app_kubernetes_io_instance) ({{__name__="{n}"}})'
                    )
                    assert [
                        (s["metric"]["namespace"], s["metric"]["app_kubernetes_io_instance"]) for s in got["result"]
                    ] == [(ns, name)], (n, got)
    slow = results["InferenceBackendTTFTOverObjective"]
    assert [(s["metric"]["namespace"], s["metric"]["app_kubernetes_io_instance"]) for s in slow] == [(ns, name)], slow
    assert float(slow[0]["value"][1]) > TTFT_OBJECTIVE_MS / 1000
    stuck = {(s["metric"]["backend_namespace"], s["metric"]["backend"]) for s in results["InferenceBackendNotReady"]}
    assert (ns, "too-big") in stuck and (ns, name) not in stuck, stuck

    def evaluated() -> list[Any] | None:
        groups = api(prom, "rules")["groups"]
        listed = [r for g in groups for r in g["rules"]]
        done = len(listed) == len(rules) and all(r.get("lastEvaluation", "0001").startswith("20") for r in listed)
        return listed if done else None

    listed = wait_until("Prometheus evaluating every rule", evaluated, timeout=30)
    bad = [(r["name"], r.get("health"), r.get("lastError")) for r in listed if r.get("health") != "ok"]
    assert not bad, bad
    alerts = api(prom, "alerts")["alerts"]
    assert any(
        a["labels"]["alertname"] == "InferenceBackendTTFTOverObjective"
        and a["labels"].get("app_kubernetes_io_instance") == name
        for a in alerts
    ), alerts
    print(
        f"{checked} dashboard and rule queries answered by Prometheus, {with_data} with data; alerts: "
        f"{sorted((a['labels']['alertname'], a['state']) for a in alerts)}"
    )
