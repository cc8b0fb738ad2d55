"""Autoscaling on an engine's own metric, through the real chain (issue 15 item 5):

    our PyTorch runner (a real engine process, tiny model made here) --/metrics--> Prometheus (1 s scrape)
    --> KEDA's operator (Prometheus trigger) --> KEDA's adapter (external.metrics.k8s.io, an aggregated API)
    --> the kube-controller-manager's HPA controller --> the Deployment's replicas

The Deployment's pods are KWOK pods standing for the engine's replicas (the one real engine process serves the
load). A bounded burst from `inference-backend bench` (guidellm) raises vllm:num_requests_running/_waiting; the
HPA scales the Deployment up; after the burst it scales back down. The timeline is printed (pytest -s shows it,
and it is attached to a failure).

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
import yaml
from ib_testkit import ROOT, free_port
from ib_testkit.autoscaling import Keda, NetNS, Proc, missing_pieces, start_prometheus, wait_http
from ib_testkit.cluster import KWOK_TOLERATION, get_json, kubectl

BURST_SECONDS = int(os.environ.get("E2E_AUTOSCALING_BURST_SECONDS", "40"))
CONCURRENCY = 8
MAX_BATCH = 2  # the runner admits 2 at a time: the other 6 wait, as a busy engine's queue does
THRESHOLD = 2  # running + waiting per replica
MIN_REPLICAS, MAX_REPLICAS = 1, 4
QUERY = 'sum(vllm:num_requests_running{job="engine"}) + sum(vllm:num_requests_waiting{job="engine"})'


def runners_venv() -> Path:
    if env := os.environ.get("IB_RUNNERS_VENV"):
        return Path(env)
    cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
    digest = hashlib.sha256((ROOT / "hack" / "runners-requirements.txt").read_bytes()).hexdigest()[:12]
    return cache / f"venv-runners-{digest}"


def _missing() -> list[str]:
    out = missing_pieces()
    venv = runners_venv()
    if not (venv / ".installed").is_file():
        out.append(f"the runners venv {venv} (hack/runners-venv)")
    return out


@pytest.fixture(scope="module")
def chain_ready() -> None:
    missing = _missing()
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
    proc = Proc(
        "pytorch runner",
        [
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
        ],
        workdir / "engine.log",
        venv_env(),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(proc, url + "/health", timeout=180)
        yield url, model
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def prometheus(engine: tuple[str, Path], workdir: Path) -> Iterator[str]:
    proc, url = start_prometheus(workdir / "prometheus", {"engine": engine[0].removeprefix("http://")})
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def keda(chain_ready: None, workdir: Path, kube_http: Any) -> Iterator[Keda]:
    kubeconfig = os.environ["KUBECONFIG"]
    port = int(urllib.parse.urlparse(str(kube_http.base_url)).port or 443)
    k = Keda(workdir / "keda", kubeconfig, NetNS.for_cluster(port), kubectl)
    try:
        k.start()
        yield k
    finally:
        k.stop()


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
        for t, spec, _ready, _m in self.samples:
            if t >= after and pred(spec):
                return t, spec
        return None

    def render(self) -> str:
        lines = [f"  {t:7.1f}s  {what}" for t, what in sorted(self.events)]
        lines.append("  samples (t, replicas, ready, metric):")
        last: tuple[int, int] | None = None
        for t, spec, ready, metric in self.samples:
            if (spec, ready) != last:
                lines.append(f"  {t:7.1f}s  replicas={spec} ready={ready} metric={metric}")
                last = (spec, ready)
        return "\n".join(lines)


def deployment(namespace: str) -> dict[str, Any]:
    labels = {"app": "engine"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "engine", "namespace": namespace},
        "spec": {
            "replicas": MIN_REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"type": "kwok"},
                    "tolerations": [KWOK_TOLERATION],
                    "containers": [
                        {"name": "engine", "image": "ib-e2e/engine:0", "resources": {"requests": {"cpu": "100m"}}}
                    ],
                },
            },
        },
    }


def scaled_object(namespace: str, prom: str) -> dict[str, Any]:
    """A KEDA ScaledObject (keda.sh/v1alpha1, KEDA v2.21.0) with a Prometheus trigger on the engine's queue."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "engine", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"name": "engine"},
            "minReplicaCount": MIN_REPLICAS,
            "maxReplicaCount": MAX_REPLICAS,
            "pollingInterval": 2,
            "cooldownPeriod": 10,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleUp": {
                            "stabilizationWindowSeconds": 0,
                            "policies": [{"type": "Pods", "value": MAX_REPLICAS, "periodSeconds": 1}],
                        },
                        "scaleDown": {
                            "stabilizationWindowSeconds": 10,
                            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}],
                        },
                    }
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "AverageValue",
                    "metadata": {"serverAddress": prom, "query": QUERY, "threshold": str(THRESHOLD)},
                }
            ],
        },
    }


def test_engine_metric_scales_deployment_up_and_down(
    chain_ready: None,
    engine: tuple[str, Path],
    prometheus: str,
    keda: Keda,
    namespace: str,
    wait_until: Any,
    workdir: Path,
) -> None:
    started = time.monotonic()
    url, model = engine
    # Prometheus scrapes the engine: the gauge exists (0) before any load.
    wait_until("Prometheus to scrape the engine's vllm:num_requests_running", lambda: promql(prometheus, QUERY) == 0.0,
               timeout=60)  # fmt: skip
    kubectl("apply", "--server-side", "--field-manager=ib-e2e", "-f", "-",
            stdin=yaml.safe_dump_all([deployment(namespace), scaled_object(namespace, prometheus)]))  # fmt: skip

    def hpa_active() -> dict[str, Any] | None:
        keda.check_alive()
        hpas = get_json("hpa", "-n", namespace)["items"]
        if not hpas:
            return None
        conds = {c["type"]: c for c in hpas[0].get("status", {}).get("conditions", [])}
        active = conds.get("ScalingActive", {})
        return hpas[0] if active.get("status") == "True" else None

    hpa = wait_until("the HPA KEDA made to read the external metric (ScalingActive)", hpa_active, timeout=120)
    metric_name = hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
    # The aggregated API answers through the API server (APIService -> Service -> Endpoints -> adapter).
    raw = json.loads(
        kubectl(
            "get",
            "--raw",
            f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric_name}"
            f"?labelSelector=scaledobject.keda.sh%2Fname%3Dengine",
        )
    )
    assert raw["items"] and raw["items"][0]["metricName"] == metric_name, raw

    tl = Timeline()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                d = get_json("deployment", "engine", "-n", namespace)
                m = promql(prometheus, QUERY)
                tl.samples.append(
                    (time.monotonic() - tl.t0, d["spec"]["replicas"], d["status"].get("readyReplicas", 0), m)
                )
            except Exception as e:  # a transient read error is a gap in the timeline, not a failure
                tl.mark(f"watch error: {e!r}")
            stop.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    bench_out = workdir / "bench"
    cmd = [str(runners_venv() / "bin" / "python"), "-m", "inference_backend.cli", "bench", "--url", url,
           "--model", "tiny", "--processor", str(model), "--concurrency", str(CONCURRENCY),
           "--seconds", str(BURST_SECONDS), "--prompt-tokens", "32", "--output-tokens", "96", "--no-progress",
           "--out", str(bench_out)]  # fmt: skip
    t_load = t_end = 0.0
    try:
        t_load = tl.mark(f"load start: inference-backend bench --concurrency {CONCURRENCY} --seconds {BURST_SECONDS}")
        res = subprocess.run(cmd, env={**os.environ, **venv_env()}, capture_output=True, text=True,
                             timeout=BURST_SECONDS + 120, check=False)  # fmt: skip
        t_end = tl.mark(f"load end (bench exit {res.returncode})")
        assert res.returncode == 0, f"bench failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"

        def scaled_down() -> bool:
            keda.check_alive()
            return tl.first(lambda r: r == MIN_REPLICAS, after=t_end) is not None

        wait_until("the Deployment to scale back down after the burst", scaled_down, timeout=120)
    finally:
        stop.set()
        watcher.join(timeout=5)
        up = tl.first(lambda r: r > MIN_REPLICAS, after=t_load)
        peak = max((s[1] for s in tl.samples), default=0)
        t_peak = tl.first(lambda r: r == peak, after=t_load)
        down = tl.first(lambda r: r == MIN_REPLICAS, after=t_peak[0] if t_peak else t_load)
        if up:
            tl.mark(f"first scale-up: {up[1]} replicas ({up[0] - t_load:.1f}s after load start)")
        if t_peak:
            tl.mark(f"peak: {peak} replicas ({t_peak[0] - t_load:.1f}s after load start)")
        if down and peak > MIN_REPLICAS:
            tl.mark(f"scaled down to {MIN_REPLICAS} ({down[0] - t_end:.1f}s after load end)")
        report = f"autoscaling timeline (test took {time.monotonic() - started:.0f}s):\n{tl.render()}"
        print("\n" + report)
        (workdir / "timeline.txt").write_text(report + "\n")
    assert up is not None, f"the Deployment never scaled up during the burst\n{report}"
    assert peak >= 3, (
        f"peak replicas {peak}: expected ~{CONCURRENCY // THRESHOLD} at concurrency {CONCURRENCY}\n{report}"
    )
    assert down is not None and down[0] >= t_end, f"did not scale back down after the burst\n{report}"
