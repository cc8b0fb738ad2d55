"""The operator at scale on the local control plane (real kube-apiserver, etcd, controller-manager, scheduler; KWOK
playing the kubelets): for each node count (ascending, nodes added to one cluster) and each InferenceBackend count,
a fresh operator process and a fresh namespace:

- apply-to-Deployment latency: from the create of an InferenceBackend to its Deployment appearing (a watch);
- apply-to-Deployment on the loaded cluster: once every backend is settled, some of them changed one at a time
  (``--applies`` at ``--apply-rate``), from the patch to the Deployment carrying the change;
- time to reconcile all: first create to last Deployment, and to every status naming its backend;
- operator peak memory (VmHWM);
- API requests of the operator (its ServiceAccount, from the API server's audit log, reads included when e2e/up
  ran with E2E_AUDIT_READS=1), per InferenceBackend and per reconcile (the operator's own reconcile counter);
- a no-op resync: the operator restarted, every InferenceBackend resumed and reconciled again; its API writes.

Prints a table and writes JSON (plot it with bench/plot_operator_scale.py). Asserts nothing.

    make bench-operator                       # the full grid, fresh cluster, JSON + PNG in bench/results/
    make bench-operator BACKENDS=40 NODES=100 # one quick point
    # or, on a running cluster (e2e/up): .venv/bin/python -m bench.operator_scale --backends 100 --nodes 100
    # another version's operator and chart (on a fresh cluster): IB_BENCH_OPERATOR_SRC=/path/to/checkout/operator ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from ib_testkit import kwok_nodes
from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Node
from lightkube.types import PatchType

ROOT = Path(__file__).resolve().parents[1]
# IB_BENCH_OPERATOR_SRC: another checkout's operator/ source root: its operator runs, and its chart's CRD and RBAC are
# installed (on a fresh cluster: helm installs a chart's CRDs but never upgrades them), so that two versions of the
# operator are measured in one sitting (before and after a change); this script's own imports stay here.
OPERATOR_SRC = os.environ.get("IB_BENCH_OPERATOR_SRC", "")
CHART = (Path(OPERATOR_SRC).resolve().parent if OPERATOR_SRC else ROOT) / "charts" / "inference-backend"
E2E_DIR = Path(os.environ.get("E2E_DIR", "/tmp/ib-e2e"))
SA_USER = "system:serviceaccount:ib-system:ib-inference-backend"
IB = create_namespaced_resource("serving.inferencebackend.io", "v1alpha1", "InferenceBackend", "inferencebackends")
KWOK = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
CLASSES = ("h100x8", "l4", "a10g", "cpu")
SPECS = [  # a mix of engines and placements
    {"model": {"modelRef": "llama-3-1-8b"}},
    {"model": {"modelRef": "llama-3-2-3b-gguf"}, "hardware": {"accelerator": "cpu"}},
    {"model": {"uri": "s3://models/phi/model.onnx", "parameters": "3.8B"}, "hardware": {"accelerator": "cpu"}},
    {
        "backend": "tgi",
        "model": {"uri": "hf://mistralai/Mistral-7B-Instruct-v0.3", "parameters": "7.25B", "contextLength": 4096},
    },
]
APPLY_ENV = "IB_BENCH_APPLY"
WRITES = ("create", "update", "patch", "delete", "deletecollection")


def sh(*cmd: str, stdin: str | None = None) -> str:
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True).stdout


def tool(name: str) -> str:
    return str(E2E_DIR / "bin" / name)


def log(msg: str) -> None:
    print(f">> [{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Audit:
    """The API server's audit log (JSON lines), read from an offset: requests by the operator's ServiceAccount."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size

    def since_mark(self) -> list[dict[str, Any]]:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        out = []
        for line in data.splitlines():
            ev = json.loads(line)
            if ev.get("stage") != "ResponseComplete" or ev.get("user", {}).get("username") != SA_USER:
                continue
            if (ev.get("objectRef") or {}).get("resource") in ("clusterkopfpeerings", "kopfpeerings"):
                continue
            out.append(ev)
        return out


class Operator:
    """`inference-backend operator` as a subprocess with the chart's ServiceAccount token."""

    def __init__(self, kubeconfig: str, metrics_port: int) -> None:
        self.port = metrics_port
        env = {**os.environ, "KUBECONFIG": kubeconfig}
        if OPERATOR_SRC:
            env["PYTHONPATH"] = OPERATOR_SRC
        logf = (E2E_DIR / "logs" / "bench-operator.log").open("ab")
        level = os.environ.get("IB_BENCH_LOG_LEVEL", "warning")
        cmd = [
            sys.executable,
            "-m",
            "inference_backend.cli",
            "operator",
            "--all-namespaces",
            "--metrics-port",
            str(metrics_port),
            "--log-level",
            level,
        ]
        self.proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT)

    def metrics(self) -> dict[str, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("inference_backend_"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def reconciles(self) -> int:
        return int(sum(v for k, v in self.metrics().items() if k.startswith("inference_backend_reconciles_total")))

    def wait_up(self, timeout: float = 60) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                self.metrics()
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("the operator's metrics endpoint did not come up; see logs/bench-operator.log")

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class CpuSampler:
    """CPU time of the control plane's processes, the operator and this script, from /proc (cores used between
    start() and stop()): shows what the 2 cores were busy with while the backends were created."""

    def __init__(self, operator_pid: int) -> None:
        self.pids = {p.stem: int(p.read_text()) for p in (E2E_DIR / "pids").glob("*.pid") if p.read_text().strip()}
        self.pids |= {"operator": operator_pid, "bench": os.getpid()}
        self.t0 = 0.0
        self.cpu0: dict[str, float] = {}

    def _cpu(self) -> dict[str, float]:
        out: dict[str, float] = {}
        tick = os.sysconf("SC_CLK_TCK")
        for name, pid in self.pids.items():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                out[name] = (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError, ValueError):
                continue
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        out["idle"] = (int(fields[3]) + int(fields[4])) / tick
        out["steal"] = int(fields[7]) / tick  # taken by the hypervisor: this VM's cores are shared
        return out

    def start(self) -> None:
        self.t0, self.cpu0 = time.monotonic(), self._cpu()

    def stop(self) -> dict[str, float]:
        wall, cpu = time.monotonic() - self.t0, self._cpu()
        return {k: round((cpu[k] - self.cpu0[k]) / wall, 3) for k in cpu if k in self.cpu0}


def sa_kubeconfig() -> str:
    token = sh(tool("kubectl"), "create", "token", "ib-inference-backend", "-n", "ib-system", "--duration=8h").strip()
    config = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    config["users"] = [{"name": "operator", "user": {"token": token}}]
    config["contexts"] = [
        {"name": "operator", "context": {"cluster": config["clusters"][0]["name"], "user": "operator"}}
    ]
    config["current-context"] = "operator"
    path = E2E_DIR / "bench-operator.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def fake_nodes(count: int) -> list[dict[str, Any]]:
    return [kwok_nodes.node(CLASSES[i % len(CLASSES)], f"scale-{i:05d}") for i in range(count)]


async def add_nodes(count: int, parallel: int = 16) -> float:
    """Server-side apply nodes scale-00000.. up to ``count``; wait until all are Ready and untainted (seconds)."""
    client = AsyncClient(field_manager="bench")
    t0 = time.monotonic()
    have = {n.metadata.name async for n in client.list(Node, labels={"type": "kwok"})}
    todo = [n for n in fake_nodes(count) if n["metadata"]["name"] not in have]
    sem = asyncio.Semaphore(parallel)

    async def apply(doc: dict[str, Any]) -> None:
        async with sem:
            for attempt in range(5):
                try:
                    await client.apply(codecs.from_dict(doc), field_manager="bench")
                    return
                except ApiError:
                    await asyncio.sleep(1 + attempt)
            raise RuntimeError(f"could not create node {doc['metadata']['name']}")

    await asyncio.gather(*(apply(n) for n in todo))
    log(f"{len(todo)} nodes applied in {time.monotonic() - t0:.0f} s; waiting for Ready")
    while True:
        ready = 0
        async for n in client.list(Node, labels={"type": "kwok"}):
            conds = {c.type: c.status for c in (n.status.conditions or [])} if n.status else {}
            # settled: Ready, and the node lifecycle controller has lifted its not-ready taints (it does so at
            # its own pace, minutes after Ready for thousands of nodes; each lift changes the node's class)
            tainted = any(t.key.startswith("node.kubernetes.io/") for t in (n.spec.taints or [])) if n.spec else False
            ready += conds.get("Ready") == "True" and not tainted
        if ready >= count:
            break
        await asyncio.sleep(5)
    await client.close()
    return time.monotonic() - t0


Send = Callable[[AsyncClient, int, str], Awaitable[Any]]
Carries = Callable[[str, Any], bool]


async def paced(
    ns: str, names: list[str], rate: float, send: Send, carries: Carries, warmup: float, timeout: float
) -> tuple[float, dict[str, float], dict[str, float]]:
    """``send`` one request per name at ``rate``/s while watching the namespace's Deployments; returns the first
    send's time and, per name, when it was sent and when its Deployment first ``carries`` it."""
    client = AsyncClient(field_manager="bench")
    wanted = set(names)
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = asyncio.Event()

    async def watch() -> None:
        async for op, dep in client.watch(Deployment, namespace=ns):
            name = dep.metadata.name
            if name in wanted and name not in seen and carries(op, dep):
                seen[name] = time.monotonic()
                if len(seen) == len(names):
                    done.set()
                    return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(warmup)  # the watch is open (and its initial ADDED events for existing Deployments are by)
    t0 = time.monotonic()
    for i, name in enumerate(names):
        sent[name] = time.monotonic()
        await send(client, i, name)
        delay = t0 + (i + 1) / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    await asyncio.wait_for(done.wait(), timeout=timeout)
    watcher.cancel()
    await client.close()
    return t0, sent, seen


async def create_and_watch(ns: str, count: int, rate: float) -> tuple[list[tuple[float, float]], float, float]:
    """Create ``count`` InferenceBackends at ``rate``/s; for each in creation order (seconds after the first create,
    latency to its Deployment's ADDED event)."""

    async def create(client: AsyncClient, i: int, name: str) -> None:
        spec = json.loads(json.dumps(SPECS[i % len(SPECS)]))
        spec.setdefault("hardware", {})["tolerations"] = [KWOK]
        await client.create(IB(metadata={"name": name, "namespace": ns}, spec=spec))

    names = [f"ib-{i:05d}" for i in range(count)]
    t0, created, seen = await paced(ns, names, rate, create, lambda op, _: op == "ADDED", warmup=1, timeout=900)
    series = [(at - t0, seen[name] - at) for name, at in created.items()]  # filled in creation order
    return series, t0, max(seen.values())


def _bench_env(dep: Any) -> str | None:
    for c in dep.spec.template.spec.containers:
        for e in c.env or []:
            if e.name == APPLY_ENV:
                return str(e.value)
    return None


async def apply_on_loaded(ns: str, names: list[str], rate: float) -> list[float]:
    """Once every backend is settled: change one InferenceBackend at a time (an env var in ``spec.engine.env``, so its
    pod template changes) at ``rate``/s; for each, seconds from the patch to its Deployment carrying the change."""

    async def change(client: AsyncClient, _i: int, name: str) -> None:
        patch = {"spec": {"engine": {"env": [{"name": APPLY_ENV, "value": name}]}}}
        await client.patch(IB, name, patch, namespace=ns, patch_type=PatchType.MERGE)

    def carries(_op: str, dep: Any) -> bool:
        return bool(_bench_env(dep) == dep.metadata.name)

    _, sent, seen = await paced(ns, names, rate, change, carries, warmup=3, timeout=300)
    return [seen[n] - sent[n] for n in names]


async def wait_statuses(ns: str, count: int, timeout: float = 600) -> tuple[float, int]:
    """Until every InferenceBackend's status names its backend for its generation; returns (when, Ready count)."""
    client = AsyncClient()
    t0 = time.monotonic()
    while True:
        settled = ready = 0
        async for ib in client.list(IB, namespace=ns):
            st, meta = ib.get("status") or {}, ib["metadata"]
            settled += bool(st.get("backend")) and st.get("observedGeneration") == meta.get("generation")
            ready += st.get("phase") == "Ready"
        if settled >= count or time.monotonic() - t0 > timeout:
            break
        await asyncio.sleep(0.5)
    await client.close()
    return time.monotonic(), ready


async def delete_namespace(ns: str) -> None:
    client = AsyncClient()
    try:
        await client.delete(Namespace, ns)
        while True:
            await client.get(Namespace, ns)
            await asyncio.sleep(2)
    except ApiError as exc:
        if exc.status.code != 404:
            raise
    finally:
        await client.close()


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def run_point(
    nodes: int, backends: int, rate: float, audit: Audit, port: int, applies: int, apply_rate: float
) -> dict[str, Any]:
    ns = f"scale-{nodes}-{backends}"
    sh(tool("kubectl"), "create", "namespace", ns)
    models = list(yaml.safe_load_all((ROOT / "docs/examples/models.yaml").read_text()))
    sh(tool("kubectl"), "apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(models))
    op = Operator(sa_kubeconfig(), port)
    try:
        op.wait_up()
        time.sleep(3)  # the initial listings (nodes, Models, children) fill the indexes
        base = op.reconciles()
        audit.mark()
        log(f"{nodes} nodes: creating {backends} InferenceBackends at {rate:g}/s")
        cpu = CpuSampler(op.proc.pid)
        cpu.start()
        series, t0, last_deployment = asyncio.run(create_and_watch(ns, backends, rate))
        cores = cpu.stop()
        latencies = sorted(lat for _, lat in series)
        settled, _ = asyncio.run(wait_statuses(ns, backends))
        time.sleep(10)  # children's status events (replicas, readiness) arrive and are rolled up
        _, ready = asyncio.run(wait_statuses(ns, backends, timeout=0))
        events = audit.since_mark()
        reconciles = op.reconciles() - base
        writes = [e for e in events if e["verb"] in WRITES]
        step = max(1, backends // applies)
        targets = [f"ib-{i:05d}" for i in range(0, backends, step)][:applies]
        log(f"{backends} backends settled: changing {len(targets)} of them, one at a time at {apply_rate:g}/s")
        loaded = sorted(asyncio.run(apply_on_loaded(ns, targets, apply_rate)))
        peak = op.peak_rss_mib()
    finally:
        op.stop()
    # the no-op resync: a new operator process resumes every InferenceBackend and finds nothing to change
    audit.mark()
    op = Operator(sa_kubeconfig(), port)
    try:
        op.wait_up()
        resumed = time.monotonic()
        while op.reconciles() < backends and time.monotonic() - resumed < 300:
            time.sleep(1)
        time.sleep(10)
        resync = audit.since_mark()
        resync_reconciles = op.reconciles()
        resync_peak = op.peak_rss_mib()
    finally:
        op.stop()
    log(f"deleting namespace {ns}")
    asyncio.run(delete_namespace(ns))
    point = {
        "nodes": nodes,
        "backends": backends,
        "ratePerS": rate,
        "applyToDeploymentMs": {
            "p50": pct(latencies, 0.5) * 1000,
            "p99": pct(latencies, 0.99) * 1000,
            "max": latencies[-1] * 1000,
            "mean": sum(latencies) / len(latencies) * 1000,
        },
        "coresWhileCreating": cores,
        "applyOnLoadedMs": {
            "applies": len(loaded),
            "ratePerS": apply_rate,
            "p50": pct(loaded, 0.5) * 1000,
            "p99": pct(loaded, 0.99) * 1000,
            "max": loaded[-1] * 1000,
        },
        "latencySeries": {"createdS": [round(c, 3) for c, _ in series], "ms": [round(v * 1000, 1) for _, v in series]},
        "allDeploymentsS": last_deployment - t0,
        "allStatusesS": settled - t0,
        "readyBackends": ready,
        "operatorPeakMiB": max(peak, resync_peak),
        "reconciles": reconciles,
        "apiRequests": len(events),
        "apiWrites": len(writes),
        "apiRequestsPerBackend": len(events) / backends,
        "apiWritesPerBackend": len(writes) / backends,
        "apiRequestsPerReconcile": len(events) / max(reconciles, 1),
        "writesByResource": _by_resource(writes),
        "noopResync": {
            "reconciles": resync_reconciles,
            "apiWrites": sum(e["verb"] in WRITES for e in resync),
            "apiRequests": len(resync),
            "requestsByVerb": _by_verb(resync),
        },
    }
    return point


def _by_resource(events: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        key = ref.get("resource", "?") + ("/" + ref["subresource"] if ref.get("subresource") else "")
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def _by_verb(events: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        out[e["verb"]] = out.get(e["verb"], 0) + 1
    return dict(sorted(out.items()))


def print_point(p: dict[str, Any]) -> None:
    lat = p["applyToDeploymentMs"]
    print(
        f"   {p['backends']:>5} IB x {p['nodes']:>5} nodes: apply-to-Deployment p50 {lat['p50']:.0f} ms, "
        f"p99 {lat['p99']:.0f} ms, max {lat['max']:.0f} ms; all Deployments {p['allDeploymentsS']:.1f} s, "
        f"all statuses {p['allStatusesS']:.1f} s; peak {p['operatorPeakMiB']:.0f} MiB; "
        f"{p['apiRequestsPerBackend']:.2f} requests/IB ({p['apiWritesPerBackend']:.2f} writes), "
        f"{p['apiRequestsPerReconcile']:.2f} requests/reconcile; no-op resync: {p['noopResync']['apiWrites']} "
        f"writes over {p['noopResync']['reconciles']} reconciles",
        flush=True,
    )
    if "applyOnLoadedMs" in p:
        la = p["applyOnLoadedMs"]
        print(
            f"     {la['applies']} changes on the loaded cluster at {la['ratePerS']:g}/s: apply-to-Deployment "
            f"p50 {la['p50']:.0f} ms, p99 {la['p99']:.0f} ms, max {la['max']:.0f} ms"
        )
    print("     cores while creating: " + ", ".join(f"{k} {v:.2f}" for k, v in p["coresWhileCreating"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="100,500,1000", help="comma-separated InferenceBackend counts")
    parser.add_argument("--nodes", default="100,1000,5000", help="comma-separated node counts (ascending)")
    parser.add_argument("--rate", type=float, default=10.0, help="InferenceBackends created per second")
    parser.add_argument("--applies", type=int, default=100, help="changes applied once all backends are settled")
    parser.add_argument("--apply-rate", type=float, default=1.0, help="those changes per second")
    parser.add_argument("--diagonal", action="store_true", help="pair the i-th node count with the i-th backend count")
    parser.add_argument("--metrics-port", type=int, default=28090)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    counts = sorted(int(x) for x in args.backends.split(","))
    node_counts = sorted(int(x) for x in args.nodes.split(","))
    sh(
        tool("helm"),
        "upgrade",
        "--install",
        "ib",
        str(CHART),
        "-n",
        "ib-system",
        "--create-namespace",
        "--reset-values",
        "--set",
        "replicas=0",
    )
    audit = Audit(E2E_DIR / "audit.log")
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    points, node_ready = [], {}
    for i, n in enumerate(node_counts):
        log(f"adding fake nodes up to {n}")
        node_ready[n] = asyncio.run(add_nodes(n))
        log(f"{n} nodes Ready ({node_ready[n]:.0f} s)")
        for b in [counts[i]] if args.diagonal else counts:
            points.append(run_point(n, b, args.rate, audit, args.metrics_port, args.applies, args.apply_rate))
            print_point(points[-1])
    result = {
        "schema": "inference-backend.bench.operator-scale/v1",
        "started": started,
        "finished": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(["python", "-m", "bench.operator_scale", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version()},
        "auditReads": os.environ.get("E2E_AUDIT_READS") == "1",
        "nodeReadySeconds": node_ready,
        "points": points,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(_dump(result))
        log(f"wrote {args.out}")


def _dump(result: dict[str, Any]) -> str:
    """JSON, indented, with lists of numbers on one line each (the latency series stay readable in a diff)."""
    text = json.dumps(result, indent=2)
    flat = re.sub(r"\[([-0-9.,\s]+)\]", lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    return flat + "\n"


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
