"""Autoscaling on an engine's own metric, through the real chain (issue 15 item 5):

    InferenceBackend spec.autoscaling --operator--> KEDA ScaledObject (rendered, Prometheus trigger on the engine's
    own metric) --KEDA operator--> HPA; our PyTorch runner (a real engine process, tiny model made here) --/metrics-->
    Prometheus (1 s scrape) --> KEDA's adapter (external.metrics.k8s.io, an aggregated API) --> the
    kube-controller-manager's HPA controller --> the backend's Deployment's replicas

The Deployment's pods are KWOK pods standing for the engine's replicas; the one real engine process serves the load,
and Prometheus gives its series the labels the operator's queries select a backend by (namespace,
app_kubernetes_io_instance: what the kubernetes-pods scrape job would give the backend's pods). A bounded burst from
`inference-backend bench` (guidellm) fills the engine's queue (vllm:num_requests_waiting); the HPA scales the
Deployment up; after the burst it scales back down. The timeline is printed (pytest -s shows it; it is also in the
failure message and in the test's tmp dir).

Needs e2e/build-binaries' keda-operator, keda-adapter, prometheus (and KEDA's CRDs), the runners venv
(hack/runners-venv; $IB_RUNNERS_VENV overrides), root for `ip netns`. Locally a missing piece skips the module,
with what is missing; under CI=true it fails.
"""

from __future__ import annotations

import hashlib
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
from ib_testkit import ROOT, free_port
from ib_testkit.autoscaling import Keda, Proc, missing_pieces, running_keda, start_prometheus, wait_http
from ib_testkit.cluster import EXAMPLES, Operator, apply, chart_helm_args, example, get_json, kubectl, wait_phase

BURST_SECONDS = int(os.environ.get("E2E_AUTOSCALING_BURST_SECONDS", "40"))
CONCURRENCY = 10
MAX_BATCH = 2  # the runner admits 2 at a time: the other 8 wait, as in a busy engine's queue
TARGET = 2  # waiting requests per replica: ceil(8 / 2) = 4 replicas
MIN_REPLICAS, MAX_REPLICAS = 1, 4
SCALE_DOWN_WINDOW = 10


def runners_venv() -> Path:
    if env := os.environ.get("IB_RUNNERS_VENV"):
        return Path(env)
    cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
    digest = hashlib.sha256((ROOT / "hack" / "runners-requirements.txt").read_bytes()).hexdigest()[:12]
    return cache / f"venv-runners-{digest}"


@pytest.fixture(scope="module")
def chain_ready() -> None:
    missing = missing_pieces()
    if not (runners_venv() / ".installed").is_file():
        missing.append(f"the runners venv {runners_venv()} (hack/runners-venv)")
    if missing:
        msg = "autoscaling chain incomplete: " + "; ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def venv_env() -> dict[str, str]:
    """This clone's operator/ and testkit/ first (the shared venv's editable install may point elsewhere)."""
    return {
        "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT / 'testkit'}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("autoscaling")


@pytest.fixture(scope="module")
def engine(chain_ready: None, workdir: Path) -> Iterator[tuple[str, Path]]:
    """Our PyTorch runner on a tiny random model made on the spot; yields its URL and the model directory."""
    py = str(runners_venv() / "bin" / "python")
    env = {**os.environ, **venv_env()}
    model = workdir / "tiny"
    subprocess.run([py, "-m", "inference_backend.runners.tiny", str(model)], env=env, check=True, capture_output=True)
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
        str(MAX_BATCH),
    ]
    proc = Proc("pytorch runner", cmd, workdir / "engine.log", venv_env())
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(proc, url + "/health", timeout=180)
        yield url, model
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def prometheus_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def keda(chain_ready: None, workdir: Path, kube_http: Any) -> Iterator[Keda]:
    with running_keda(workdir / "keda", kube_http, kubectl) as k:
        yield k


@pytest.fixture(scope="module")
def cpu_nodes(chain_ready: None) -> Iterator[list[str]]:
    """Three more KWOK CPU nodes, so that the replicas the HPA asks for can all be scheduled and Ready."""
    import yaml
    from ib_testkit.kwok_nodes import node

    names = [f"autoscale-cpu-{i}" for i in range(1, MAX_REPLICAS)]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([node("cpu", n) for n in names]))
    try:
        kubectl("wait", "--for=condition=Ready", "--timeout=60s", *(f"node/{n}" for n in names))
        yield names
    finally:
        kubectl("delete", "node", *names, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(keda: Keda, sa_kubeconfig: str, e2e_dir: Path, prometheus_port: int) -> Iterator[Operator]:
    """The operator (as conftest's), its ScaledObjects pointed at this module's Prometheus, started after KEDA's
    CRDs exist."""
    kubectl("apply", "-f", str(EXAMPLES / "models.yaml"), "-n", "default")
    # The chart's value, so the address reaches the operator the way an install sets it.
    address = ("--set", f"autoscaling.prometheusAddress=http://127.0.0.1:{prometheus_port}")
    log = e2e_dir / "logs" / "operator-autoscaling.log"
    op = Operator(sa_kubeconfig, log, helm_args=(*chart_helm_args(), *address))
    op.start()
    yield op
    op.stop()


def promql(prom: str, query: str) -> float | None:
    with urllib.request.urlopen(f"{prom}/api/v1/query?query={urllib.parse.quote(query)}", timeout=5) as r:
        result = json.load(r)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


@dataclass
class Timeline:
    t0: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str]] = field(default_factory=list)
    samples: list[tuple[float, int, int, float | None]] = field(default_factory=list)  # t, spec, ready, metric

    def mark(self, what: str) -> float:
        t = time.monotonic() - self.t0
        self.events.append((t, what))
        return t

    def first(self, pred: Any, after: float = 0.0) -> tuple[float, int] | None:
        for t, spec, _ready, _m in list(self.samples):
            if t >= after and pred(spec):
                return t, spec
        return None

    def render(self) -> str:
        lines = [f"  {t:7.1f}s  {what}" for t, what in sorted(self.events)]
        lines.append("  samples when replicas or ready replicas changed (t, replicas, ready, metric):")
        last: tuple[int, int] | None = None
        for t, spec, ready, metric in list(self.samples):
            if (spec, ready) != last:
                lines.append(f"  {t:7.1f}s  replicas={spec} ready={ready} metric={metric}")
                last = (spec, ready)
        return "\n".join(lines)


def test_engine_queue_scales_backend_up_and_down(
    chain_ready: None,
    engine: tuple[str, Path],
    keda: Keda,
    cpu_nodes: list[str],
    operator: Operator,
    prometheus_port: int,
    ns: str,
    wait_until: Any,
    workdir: Path,
) -> None:
    started = time.monotonic()
    url, model = engine
    doc = example("pytorch-research.yaml", ns)
    doc["spec"].setdefault("hardware", {})["accelerator"] = "cpu"  # replicas fit on the KWOK CPU node
    name = doc["metadata"]["name"]
    doc["spec"]["autoscaling"] = {
        "minReplicas": MIN_REPLICAS,
        "maxReplicas": MAX_REPLICAS,
        "metric": "queueDepth",
        "target": TARGET,
        "behavior": {"scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": SCALE_DOWN_WINDOW},
    }
    # Prometheus scrapes the real engine, its series labelled as the backend's pods' would be.
    prom_proc, prom = start_prometheus(
        workdir / "prometheus",
        {"engine": (url.removeprefix("http://"), {"namespace": ns, "app_kubernetes_io_instance": name})},
        port=prometheus_port,
    )
    try:
        apply(doc)
        wait_phase(wait_until, ns, name, "Ready", timeout=120)
        so = wait_until("the operator's ScaledObject", lambda: get_json("scaledobject", "-n", ns)["items"], timeout=60)[
            0
        ]
        trigger = so["spec"]["triggers"][0]
        query = trigger["metadata"]["query"]
        assert trigger["type"] == "prometheus" and "vllm:num_requests_waiting" in query, trigger
        deploy = so["spec"]["scaleTargetRef"]["name"]
        wait_until(f"Prometheus to scrape the engine ({query} = 0)", lambda: promql(prom, query) == 0.0, timeout=60)

        def hpa_active() -> dict[str, Any] | None:
            keda.check_alive()
            hpas = get_json("hpa", "-n", ns)["items"]
            conds = {c["type"]: c for c in (hpas[0].get("status", {}).get("conditions", []) if hpas else [])}
            return hpas[0] if conds.get("ScalingActive", {}).get("status") == "True" else None

        hpa = wait_until("the HPA KEDA made to read the external metric (ScalingActive)", hpa_active, timeout=120)
        metric_name = hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
        # The aggregated API answers through the API server (APIService -> Service -> Endpoints -> adapter).
        selector = urllib.parse.quote(f"scaledobject.keda.sh/name={so['metadata']['name']}", safe="")
        path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric_name}?labelSelector={selector}"
        raw = json.loads(kubectl("get", "--raw", path))
        assert raw["items"] and raw["items"][0]["metricName"] == metric_name, raw
        run_burst(ns, deploy, url, model, prom, query, keda, wait_until, workdir, started)
    finally:
        prom_proc.stop()


def run_burst(
    ns: str,
    deploy: str,
    url: str,
    model: Path,
    prom: str,
    query: str,
    keda: Keda,
    wait_until: Any,
    workdir: Path,
    started: float,
) -> None:
    tl = Timeline()
    stop = threading.Event()

    def pods() -> str:
        """Where the backend's pods are: phase@node (or the reason they are not scheduled), counted."""
        counts: dict[str, int] = {}
        for p in get_json("pods", "-n", ns)["items"]:
            if p["metadata"].get("deletionTimestamp"):
                continue
            conds = {c["type"]: c for c in p.get("status", {}).get("conditions", [])}
            where = p["spec"].get("nodeName") or conds.get("PodScheduled", {}).get("reason", "unscheduled")
            key = f"{p['status'].get('phase')}@{where}"
            counts[key] = counts.get(key, 0) + 1
        return ", ".join(f"{n}x {k}" for k, n in sorted(counts.items()))

    def watch() -> None:
        busy = False
        last_spec = None
        while not stop.is_set():
            try:
                d = get_json("deployment", deploy, "-n", ns)
                m = promql(prom, query)
                t = time.monotonic() - tl.t0
                tl.samples.append((t, d["spec"]["replicas"], d["status"].get("readyReplicas", 0), m))
                if m and not busy:
                    busy = True
                    tl.mark(f"engine queue seen by Prometheus: {query} = {m:g}")
                elif busy and m == 0:
                    busy = False
                    tl.mark("engine queue empty again (Prometheus)")
                if last_spec is not None and d["spec"]["replicas"] != last_spec:
                    tl.mark(f"replicas {last_spec} -> {d['spec']['replicas']} (pods: {pods()})")
                last_spec = d["spec"]["replicas"]
            except Exception as e:  # a transient read error is a gap in the timeline, not a failure
                tl.mark(f"watch error: {e!r}")
            stop.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cmd = [
        str(runners_venv() / "bin" / "python"),
        "-m",
        "inference_backend.cli",
        "bench",
        "--url",
        url,
        "--model",
        "tiny",
        "--processor",
        str(model),
        "--concurrency",
        str(CONCURRENCY),
        "--seconds",
        str(BURST_SECONDS),
        "--prompt-tokens",
        "32",
        "--output-tokens",
        "96",
        "--no-progress",
        "--extra-body",
        '{"ignore_eos": true}',
        "--out",
        str(workdir / "bench"),
    ]
    t_load = t_end = 0.0
    up = down = t_peak = None
    peak = 0
    try:
        t_load = tl.mark(f"load start: inference-backend bench --concurrency {CONCURRENCY} --seconds {BURST_SECONDS}")
        res = subprocess.run(
            cmd,
            env={**os.environ, **venv_env()},
            capture_output=True,
            text=True,
            timeout=BURST_SECONDS + 120,
            check=False,
        )
        t_end = tl.mark(f"load end (bench exit {res.returncode})")
        assert res.returncode == 0, f"bench failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"

        def scaled_down() -> bool:
            keda.check_alive()
            first_up = tl.first(lambda r: r > MIN_REPLICAS, after=t_load)
            return first_up is not None and tl.first(lambda r: r == MIN_REPLICAS, after=first_up[0]) is not None

        wait_until("the Deployment to scale back down after the burst", scaled_down, timeout=120)
    finally:
        stop.set()
        watcher.join(timeout=5)
        up = tl.first(lambda r: r > MIN_REPLICAS, after=t_load)
        peak = max((s[1] for s in tl.samples), default=0)
        t_peak = tl.first(lambda r: r == peak, after=t_load)
        down = tl.first(lambda r: r == MIN_REPLICAS, after=t_peak[0] if t_peak else t_load)
        seen = next((t for t, what in tl.events if what.startswith("engine queue seen")), None)
        empty = next((t for t, what in tl.events if what.startswith("engine queue empty")), None)
        if up:
            after = f", {up[0] - seen:.1f}s after Prometheus saw the queue" if seen is not None else ""
            tl.events.append(
                (up[0], f"first scale-up: {up[1]} replicas ({up[0] - t_load:.1f}s after load start{after})")
            )
        if t_peak:
            tl.events.append((t_peak[0], f"peak: {peak} replicas"))
        if down and peak > MIN_REPLICAS:
            after = f", {down[0] - empty:.1f}s after the queue emptied" if empty is not None else ""
            tl.events.append((down[0], f"scaled down to {MIN_REPLICAS} (bench exit {down[0] - t_end:+.1f}s{after})"))
        report = f"autoscaling timeline (test took {time.monotonic() - started:.0f}s):\n{tl.render()}"
        print("\n" + report)
        (workdir / "timeline.txt").write_text(report + "\n")
    assert up is not None, f"the Deployment never scaled up during the burst\n{report}"
    assert peak >= 3, f"peak {peak} replicas: expected {MAX_REPLICAS} at concurrency {CONCURRENCY}\n{report}"
    # The burst ends when the engine's queue empties (bench exits a few seconds later, after writing its report).
    emptied = next((t for t, what in tl.events if what.startswith("engine queue empty")), t_end)
    assert down is not None and down[0] >= emptied, f"did not scale back down after the burst\n{report}"
