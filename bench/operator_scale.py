"""The operator at scale on the local control plane: apply-to-Deployment latency, time to reconcile all,
operator peak memory, and API writes per reconcile and per no-op resync (a restart, whose resume handlers
reconcile every InferenceBackend again). Prints figures; asserts nothing.

    make bench-operator BACKENDS=500 NODES=1000
    # or, on a running local cluster (e2e/up): .venv/bin/python bench/operator_scale.py --backends 500 --nodes 1000

Writes are counted from the API server's audit log, for the operator's ServiceAccount only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import Deployment

ROOT = Path(__file__).resolve().parents[1]
E2E_DIR = Path(os.environ.get("E2E_DIR", "/tmp/ib-e2e"))
NS = "scale"
IB = create_namespaced_resource("serving.inferencebackend.io", "v1alpha1", "InferenceBackend", "inferencebackends")
KWOK = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
SPECS = [  # a mix of engines and placements
    {"model": {"modelRef": "llama-3-1-8b"}},
    {"model": {"modelRef": "llama-3-2-3b-gguf"}, "hardware": {"accelerator": "cpu"}},
    {"model": {"uri": "s3://models/phi/model.onnx", "parameters": "3.8B"}, "hardware": {"accelerator": "cpu"}},
    {"backend": "tgi", "model": {"uri": "hf://mistralai/Mistral-7B-Instruct-v0.3", "parameters": "7.25B",
                                  "contextLength": 4096}},
]  # fmt: skip


def sh(*cmd: str, stdin: str | None = None) -> str:
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True).stdout


def tool(name: str) -> str:
    return str(E2E_DIR / "bin" / name)


def sa_kubeconfig() -> str:
    token = sh(tool("kubectl"), "create", "token", "ib-inference-backend", "-n", "ib-system", "--duration=4h").strip()
    config = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    config["users"] = [{"name": "operator", "user": {"token": token}}]
    config["contexts"] = [{"name": "operator", "context": {"cluster": config["clusters"][0]["name"],
                                                          "user": "operator"}}]  # fmt: skip
    config["current-context"] = "operator"
    path = E2E_DIR / "bench-operator.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def start_operator(kubeconfig: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    log = (E2E_DIR / "logs" / "bench-operator.log").open("ab")
    cmd = [sys.executable, "-m", "inference_backend.cli", "operator", "--all-namespaces", "--metrics-port", "0",
           "--log-level", os.environ.get("IB_BENCH_LOG_LEVEL", "warning")]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def audit_writes(since: float) -> list[dict[str, Any]]:
    out = []
    for line in (E2E_DIR / "audit.log").read_text().splitlines():
        ev = json.loads(line)
        if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in ("create", "update", "patch", "delete"):
            continue
        if "system:serviceaccount:ib-system:" not in ev.get("user", {}).get("username", ""):
            continue
        if (ev.get("objectRef") or {}).get("resource") in ("clusterkopfpeerings", "kopfpeerings"):
            continue
        stamp = ev["requestReceivedTimestamp"]
        t = time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone + float("0" + stamp[19:26])
        if t >= since:
            out.append(ev)
    return out


async def apply_and_watch(count: int, rate: float) -> tuple[list[float], float]:
    client = AsyncClient(field_manager="bench")
    created: dict[str, float] = {}
    seen: dict[str, float] = {}

    async def watch() -> None:
        async for op, dep in client.watch(Deployment, namespace=NS):
            name = dep.metadata.name
            if op == "ADDED" and name in created and name not in seen:
                seen[name] = time.monotonic()
                if len(seen) == count:
                    return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(1)
    t0 = time.monotonic()
    for i in range(count):
        name = f"ib-{i:05d}"
        spec = json.loads(json.dumps(SPECS[i % len(SPECS)]))
        spec.setdefault("hardware", {})["tolerations"] = [KWOK]
        obj = IB(metadata={"name": name, "namespace": NS}, spec=spec)
        created[name] = time.monotonic()
        await client.create(obj)
        delay = t0 + (i + 1) / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    await asyncio.wait_for(watcher, timeout=600)
    await client.close()
    latencies = sorted(seen[n] - created[n] for n in created)
    return latencies, max(seen.values()) - t0


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0, help="InferenceBackends created per second")
    args = parser.parse_args()
    kubectl = tool("kubectl")
    print(f">> {args.nodes} fake nodes")
    nodes = sh(sys.executable, str(ROOT / "e2e/nodes/generate.py"), str(args.nodes), "--prefix", "scale")
    sh(kubectl, "apply", "--server-side", "-f", "-", stdin=nodes)
    t0 = time.monotonic()
    sh(kubectl, "wait", "--for=condition=Ready", "node", "-l", "type=kwok", "--timeout=600s")
    print(f">> KWOK made the {args.nodes} nodes Ready in {time.monotonic() - t0:.0f} s")
    sh(tool("helm"), "upgrade", "--install", "ib", str(ROOT / "charts/inference-backend"), "-n", "ib-system",
       "--create-namespace", "--reset-values")  # fmt: skip
    sh(kubectl, "create", "namespace", NS)
    models = yaml.safe_load_all((ROOT / "docs/examples/models.yaml").read_text())
    sh(kubectl, "apply", "-n", NS, "-f", "-", stdin=yaml.safe_dump_all(list(models)))
    op = start_operator(sa_kubeconfig())
    try:
        time.sleep(5)
        since = time.time()
        print(f">> creating {args.backends} InferenceBackends at {args.rate:.0f}/s")
        latencies, total = asyncio.run(apply_and_watch(args.backends, args.rate))
        t0 = time.monotonic()
        while time.monotonic() - t0 < 600:  # until every InferenceBackend reports its Deployment ready
            phases = sh(kubectl, "get", "ib", "-n", NS, "-o", "jsonpath={.items[*].status.phase}").split()
            if len(phases) == args.backends and all(p == "Ready" for p in phases):
                break
            time.sleep(2)
        print(f">> all {args.backends} Ready {total + time.monotonic() - t0:.0f} s after the first create")
        time.sleep(5)
        writes = audit_writes(since)
        print(f"apply-to-Deployment latency: p50 {pct(latencies, 0.5) * 1000:.0f} ms, "
              f"p99 {pct(latencies, 0.99) * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms, "
              f"mean {statistics.mean(latencies) * 1000:.0f} ms")  # fmt: skip
        print(f"time to reconcile all {args.backends}: {total:.1f} s (created over {args.backends / args.rate:.1f} s)")
        print(f"API writes while converging: {len(writes)} ({len(writes) / args.backends:.1f} per InferenceBackend)")
        print(f"operator peak memory: {peak_rss_mib(op.pid):.0f} MiB")
        op.send_signal(signal.SIGINT)
        op.wait(timeout=60)
        op = start_operator(sa_kubeconfig())
        since = time.time()
        time.sleep(max(20, args.backends / 25))
        noop = audit_writes(since)
        per = len(noop) / args.backends
        print(f"no-op resync (restart, every InferenceBackend resumed): {len(noop)} API writes ({per:.3f} per "
              f"InferenceBackend); peak memory {peak_rss_mib(op.pid):.0f} MiB")  # fmt: skip
    finally:
        op.send_signal(signal.SIGINT)
        op.wait(timeout=60)


if __name__ == "__main__":
    main()
