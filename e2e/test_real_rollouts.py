"""A surge rollout under a real kubelet (e2e/up --real-nodes): a two-replica llama.cpp backend with
``spec.rollout.strategy: surge`` gets a new engine environment variable, which changes its pod template. While the
Deployment replaces its pods, a client sends greedy completions through the Service's ClusterIP without a pause, and
every one must answer; the pods are sampled all along, and no old pod may start terminating before a new one passed
its readiness probe (llama-server's /health, which answers 503 while the model loads), nor may fewer than two pods be
Ready and not terminating at any sample. The backend's status says surge (status.rollout), stays serving (Ready, or
Deploying with its Ready condition True) while pods are replaced, and is Ready 2/2 at the new spec hash after.

Skipped, saying why, without a real node (the fixtures of e2e/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ib_testkit.cluster import Operator, apply, get_json, ib, tool, wait_phase
from ib_testkit.real_nodes import TINY_FACTS, completion, real_backend

PROMPT = "the quick brown fox"
MAX_TOKENS = 4
REPLICAS = 2


@dataclass
class Client:
    """Completions through one URL, one after the other, until stopped: (time, error or None) of each."""

    url: str
    model: str
    results: list[tuple[float, str | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                out = completion(self.url, self.model, PROMPT, MAX_TOKENS, timeout=30)
                bad = None if out["usage"]["completion_tokens"] == MAX_TOKENS else f"answered {out}"
            except Exception as e:  # every failure counts, whatever it is
                bad = f"{type(e).__name__}: {e}"
            self.results.append((time.monotonic(), bad))

    def failures(self) -> list[tuple[float, str | None]]:
        return [r for r in self.results if r[1] is not None]


def _stamp(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def _ready_since(pod: dict[str, Any]) -> float | None:
    """When the pod's Ready condition last became True (the kubelet's readiness probe), or None while not Ready."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready" and cond["status"] == "True":
            return _stamp(cond.get("lastTransitionTime"))
    return None


@dataclass
class Watch:
    """The backend's pods as a watch reports each change (every version of every pod, so a pod that terminates
    quickly is still seen with its deletionTimestamp), and its status sampled, while a rollout runs."""

    namespace: str
    name: str
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The latest version of each pod seen."""
    samples: list[list[dict[str, Any]]] = field(default_factory=list)
    """The pods that exist after each change."""
    deleted: dict[str, float] = field(default_factory=dict)
    """When each pod got its deletionTimestamp (the API server's stamp)."""
    statuses: list[dict[str, Any]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    proc: subprocess.Popen[str] | None = None

    def start(self) -> list[threading.Thread]:
        argv = [tool("kubectl"), "get", "pods", "-n", self.namespace, "-l", f"app.kubernetes.io/instance={self.name}"]
        self.proc = subprocess.Popen(
            [*argv, "--watch", "--output-watch-events", "-o", "json"], stdout=subprocess.PIPE, text=True
        )
        threads = [threading.Thread(target=self._pods), threading.Thread(target=self._status)]
        for t in threads:
            t.start()
        return threads

    def finish(self) -> None:
        self.stop.set()
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def _pods(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        decoder, buf = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buf += line
            try:
                event, end = decoder.raw_decode(buf.lstrip())
            except ValueError:
                continue
            buf = buf.lstrip()[end:]
            pod = event["object"]
            name = pod["metadata"]["name"]
            if event["type"] == "DELETED":
                self.pods.pop(name, None)
            else:
                self.pods[name] = pod
            if (gone := _stamp(pod["metadata"].get("deletionTimestamp"))) is not None:
                self.deleted.setdefault(name, gone)
            self.samples.append(list(self.pods.values()))

    def _status(self) -> None:
        while not self.stop.is_set():
            self.statuses.append(ib(self.namespace, self.name).get("status") or {})
            time.sleep(0.5)


def _serving(pods: list[dict[str, Any]]) -> list[str]:
    """The pods Ready and not terminating."""
    return [p["metadata"]["name"] for p in pods if _ready_since(p) and not p["metadata"].get("deletionTimestamp")]


def _rolled_out(namespace: str, name: str, old: set[str]) -> bool:
    d = get_json("deployment", name, "-n", namespace)
    st = d.get("status") or {}
    pods = get_json("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={name}")["items"]
    return (
        st.get("observedGeneration") == d["metadata"]["generation"]
        and st.get("updatedReplicas") == REPLICAS
        and st.get("readyReplicas") == REPLICAS
        and st.get("replicas") == REPLICAS
        and not old & {p["metadata"]["name"] for p in pods}
    )


def test_surge_rollout_serves_every_request(operator: Operator, rns: str, wait_until: Any) -> None:
    model = {
        "uri": "s3://models/tiny/model-f32.gguf",
        "format": "gguf",
        "quantization": "f32",
        "credentialsSecret": "s3",
        **TINY_FACTS,
    }
    doc = real_backend("roll", model, backend="llamacpp", replicas=REPLICAS, rollout={"strategy": "surge"})
    doc["metadata"]["namespace"] = rns
    apply(doc)
    before = wait_phase(wait_until, rns, "roll", "Ready", timeout=600)["status"]
    assert before["rollout"] == {"strategy": "surge", "reason": "spec.rollout.strategy is surge"}, before
    deployment = get_json("deployment", "roll", "-n", rns)
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    old_pods = get_json("pods", "-n", rns, "-l", "app.kubernetes.io/instance=roll")["items"]
    failed = {p["metadata"]["name"]: p["status"].get("message") for p in old_pods if p["status"]["phase"] == "Failed"}
    assert not failed, f"pods failed before the rollout (the kubelet's evictions: is the disk full?): {failed}"
    old = {p["metadata"]["name"] for p in old_pods}
    assert len(old) == REPLICAS

    svc = get_json("service", "roll", "-n", rns)
    client = Client(f"http://{svc['spec']['clusterIP']}:8000", "roll")
    watch = Watch(rns, "roll")
    threads = [threading.Thread(target=client.run), *watch.start()]
    threads[0].start()
    try:
        time.sleep(3)  # the client serves before the change too
        started = time.monotonic()
        doc["spec"]["engine"] = {"env": [{"name": "IB_E2E_ROLLOUT", "value": "2"}]}
        apply(doc)
        wait_until("the rollout of roll", lambda: _rolled_out(rns, "roll", old) or None, timeout=600)
        rolled = time.monotonic() - started
        time.sleep(3)  # and after it
    finally:
        client.stop.set()
        watch.finish()
        for t in threads:
            t.join(timeout=60)

    after = wait_phase(wait_until, rns, "roll", "Ready", timeout=60)["status"]
    new_pods = get_json("pods", "-n", rns, "-l", "app.kubernetes.io/instance=roll")["items"]
    during = [s for s in watch.statuses if s.get("specHash") == after["specHash"]]
    phases = sorted({s.get("phase", "") for s in during})
    ready_conds = [next(c for c in s["conditions"] if c["type"] == "Ready") for s in during if s.get("conditions")]
    new_ready = sorted(at for p in new_pods if (at := _ready_since(p)) is not None)
    old_deleted = sorted(watch.deleted[n] for n in old if n in watch.deleted)
    # The watch starts with one ADDED event per existing pod: the samples count from the one holding both.
    samples = watch.samples[next(i for i, s in enumerate(watch.samples) if len(s) >= REPLICAS) :]
    fewest = min(len(_serving(sample)) for sample in samples)
    most = max(len([p for p in sample if not p["metadata"].get("deletionTimestamp")]) for sample in samples)
    print(
        f"\nsurge rollout of 2 llama.cpp replicas on a real node: rolled out in {rolled:.1f}s; "
        f"{len(client.results)} completions through the ClusterIP, {len(client.failures())} failed; "
        f"{len(samples)} pod changes watched: at least {fewest} pods serving, at most {most} not terminating; "
        f"phases during: {phases}; readiness probe {probe.get('httpGet', {}).get('path')}"
    )
    assert not client.failures(), client.failures()[:5]
    assert len(client.results) >= 10, len(client.results)
    assert before["specHash"] != after["specHash"] and after["ready"] == f"{REPLICAS}/{REPLICAS}"
    assert after["rollout"] == before["rollout"]
    assert not old & {p["metadata"]["name"] for p in new_pods}
    # maxUnavailable 0: never fewer than two pods Ready and not terminating; maxSurge 1: never more than three pods.
    assert fewest >= REPLICAS and most <= REPLICAS + 1, (fewest, most)
    # Each old pod went only after a new pod passed the kubelet's readiness probe: the i-th deletion follows the i-th
    # new pod's Ready (both stamped by the API server, to the second).
    assert len(old_deleted) == REPLICAS and len(new_ready) == REPLICAS, (old_deleted, new_ready)
    assert all(gone >= ready for gone, ready in zip(old_deleted, new_ready, strict=True)), (old_deleted, new_ready)
    # The status kept saying the backend serves while its pods were replaced.
    assert set(phases) <= {"Ready", "Deploying"} and all(c["status"] == "True" for c in ready_conds), phases
