"""Prefix-affine routing measured on an operator-rendered backend whose pods run under a real kubelet (e2e/up
--real-nodes), through the real scoring picker (cmd/epp of the Inference Extension v1.5.0, e2e/build-picker):

- an InferenceBackend with spec.routing.inferencePool and 2 replicas of our ONNX Runtime server (the tiny model of
  ib_testkit.real_nodes, fetched from the local S3 by the fetch init container) is rendered and applied by the
  operator; both pods run on the real node, with their IPs in the subnet of its bridge on this host (reached from here);
- the InferencePool, the picker's ServiceAccount, Role and Deployment are the operator's. The picker binary runs as a
  process of this host, with the picker ServiceAccount's own token (so with exactly the Role rendered) and the
  Deployment's rendered arguments, its EndpointPickerConfig included; only its ports are moved to free ones and its
  ext_proc is plaintext (--secure-serving=false) for this client. Not in-cluster: the real node's images are built
  by e2e/build-images without a registry and the picker's is not among them (the rendered picker pod, which
  tolerates what the backend tolerates, goes to the real node here and cannot pull its image: printed at the end);
- a client speaking Envoy's ext_proc protocol (ib_testkit.endpoint_picker) asks the picker for each request's
  endpoint and sends the completion to that pod's IP, as a gateway would.

Measured and printed: the share of each prefix group's requests that went to the pod of its first request (at least
90%; a random or round-robin pick gives about half), prompts sharing no prefix reaching both pods, every pick a pod
the kubelet reports Ready. Then one pod is deleted: the picker drops it (the seconds printed), every request after
that goes to a Ready pod that is not it and succeeds, and the ReplicaSet's new pod is picked only once the kubelet
has found it Ready.

Skipped, saying why, when the cluster has no real node (e2e/up without --real-nodes); a run that asked for real nodes
(E2E_REAL_NODES > 0, as make test does) fails instead (e2e/conftest.py's node fixture).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ib_testkit import free_port
from ib_testkit.cluster import PICKER_CRDS, Operator, apply, get_json, ib, kubectl, wait_established, wait_phase
from ib_testkit.real_nodes import TINY_FACTS, TINY_RESOURCES, bridge_network, real_hardware

pytest.importorskip("grpc", reason="no grpcio: make venv")
pytest.importorskip("envoy.service.ext_proc.v3.external_processor_pb2_grpc", reason="no xds-protos: make venv")
from ib_testkit.endpoint_picker import (
    argv,
    complete,
    extproc_stub,
    flags,
    pick,
    picked_pods,
    run_picker,
    service_account_kubeconfig,
)

NAME = "affine"
ENGINE = "onnxruntime"
"""Our ONNX Runtime server: the lightest of our engines that exports all three signals the picker scores here (the
same vllm: gauge names as our PyTorch runner: waiting requests, KV-cache use) and keeps a prefix cache on CPU; its
image is 0.2 GB where the PyTorch runner's is 3.1 GB, imported into each real node."""
GROUPS, PER_GROUP, PREFIX_CHARS, SPREAD = 6, 6, 384, 16
"""384 characters: six of the prefix index's blocks (16 tokens of 4 characters); with the suffix about 390 of the
tiny model's tokens, inside its 512-token context (as e2e/test_routing_affinity.py)."""
AFTER_DELETE = 12
"""Requests sent once the picker has dropped the deleted pod (two per group)."""


def _backend(ns: str) -> dict[str, Any]:
    model = {"uri": "s3://models/tiny-onnx/", "format": "onnx", "credentialsSecret": "s3", **TINY_FACTS}
    return {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": NAME, "namespace": ns},
        "spec": {
            "model": model,
            "backend": ENGINE,
            "replicas": 2,
            "hardware": real_hardware(),
            "resources": TINY_RESOURCES,
            "routing": {"inferencePool": {"enabled": True}},
        },
    }


def _ready(pod: dict[str, Any]) -> bool:
    """Ready as the kubelet reports it, and not being deleted (the picker's own test: pkg/epp/util/pod)."""
    conditions = pod["status"].get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready and not pod["metadata"].get("deletionTimestamp")


def _pool_pods(ns: str, selector: dict[str, str]) -> list[dict[str, Any]]:
    labels = ",".join(f"{k}={v}" for k, v in selector.items())
    return list(get_json("pods", "-n", ns, "-l", labels)["items"])


def _ready_endpoints(ns: str, selector: dict[str, str], port: int) -> dict[str, str]:
    """{"IP:port": pod name} of the pool's pods the kubelet reports Ready now."""
    return {f"{p['status']['podIP']}:{port}": p["metadata"]["name"] for p in _pool_pods(ns, selector) if _ready(p)}


class Gateway:
    """What a gateway does with each request: asks the picker, sends the completion to the pod it named; records
    which Ready pod each request went to (a pick of a pod that is not Ready fails the test)."""

    def __init__(self, stub: Any, ns: str, selector: dict[str, str], port: int) -> None:
        self.stub, self.ns, self.selector, self.port = stub, ns, selector, port

    def send(self, prompt: str) -> str:
        endpoint = pick(self.stub, NAME, prompt)
        ready = _ready_endpoints(self.ns, self.selector, self.port)
        assert endpoint in ready, f"the picker chose {endpoint}, not a Ready pod of the pool: {ready}"
        out = complete(endpoint, NAME, prompt)
        # answered: a completion of at most one token (the tiny random model may sample its end token first)
        assert len(out["choices"]) == 1 and out["usage"]["completion_tokens"] <= 1, out
        return ready[endpoint]


@contextlib.contextmanager
def _picker(ns: str, picker: str, tmp_path: Path) -> Iterator[tuple[int, str, Callable[[], set[str]]]]:
    """The real picker with the arguments of the Deployment the operator rendered, as its ServiceAccount: yields its
    ext_proc port, its metrics URL and a function returning the pods in its datastore."""
    container = get_json("deployment", picker, "-n", ns)["spec"]["template"]["spec"]["containers"][0]
    options = flags(container["args"])
    config = json.loads(options["--config-text"])
    assert "prefix-cache-scorer" in {p["type"] for p in config["plugins"]}, config
    grpc_port, metrics_port, log = free_port(), free_port(), tmp_path / "epp.log"
    options.update({"--grpc-port": str(grpc_port), "--grpc-health-port": str(free_port())})
    options.update({"--metrics-port": str(metrics_port), "--secure-serving": "false"})
    kubeconfig = service_account_kubeconfig(ns, picker, tmp_path)
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with run_picker(argv(options), log, kubeconfig) as proc:

        def pods() -> set[str]:
            assert proc.poll() is None, log.read_text()[-3000:]
            return picked_pods(url) or set()

        yield grpc_port, url, pods
    text = log.read_text()
    assert "forbidden" not in text.lower(), [ln for ln in text.splitlines() if "orbidden" in ln][:3]


def _serving(ns: str, wait_until: Any, node: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The backend Ready under the real kubelet: its InferencePool and its two pods, on the real node's bridge."""
    kubectl("apply", "--server-side", "-f", str(PICKER_CRDS / "inference.networking.k8s.io_inferencepools.yaml"))
    wait_established("inferencepools.inference.networking.k8s.io")
    apply(_backend(ns))
    started = time.monotonic()
    obj = wait_phase(wait_until, ns, NAME, "Ready", timeout=600)
    print(f"{NAME}: Ready {obj['status']['ready']} after {time.monotonic() - started:.0f} s")
    routing = wait_until(
        "status.routing with the pool applied",
        lambda: (r := (ib(ns, NAME).get("status") or {}).get("routing")) and r.get("appliedHash") and r,
        timeout=120,
    )
    assert any(s.startswith("prefix-cache-scorer (weight") for s in routing["scorers"]), routing["scorers"]
    pool = get_json("inferencepool", NAME, "-n", ns)
    pods = _pool_pods(ns, pool["spec"]["selector"]["matchLabels"])
    bridge = bridge_network(node)
    assert len(pods) == 2 and all(_ready(p) for p in pods), [p["status"] for p in pods]
    for p in pods:
        assert p["spec"]["nodeName"] == node["metadata"]["name"], p["spec"]
        assert ipaddress.ip_address(p["status"]["podIP"]) in bridge, (p["status"]["podIP"], bridge)
    assert len({p["status"]["podIP"] for p in pods}) == 2
    return pool, pods


def test_prefix_affinity_on_real_pods(
    picker_built: None, operator: Operator, rns: str, node: dict[str, Any], wait_until: Any, tmp_path: Path
) -> None:
    pool, pods = _serving(rns, wait_until, node)
    selector, port = pool["spec"]["selector"]["matchLabels"], pool["spec"]["targetPorts"][0]["number"]
    picker = pool["spec"]["endpointPickerRef"]["name"]
    names = {p["metadata"]["name"] for p in pods}
    rng = random.Random(7)

    def text() -> str:
        return "".join(rng.choice("abcdefghij ") for _ in range(PREFIX_CHARS))

    with _picker(rns, picker, tmp_path) as (grpc_port, _, in_picker), extproc_stub(grpc_port) as stub:
        wait_until("the picker added both pods", lambda: in_picker() == names, timeout=120)
        time.sleep(1)  # a few scrapes of both runners' metrics (every 50 ms)
        gw = Gateway(stub, rns, selector, port)
        prefixes = [text() for _ in range(GROUPS)]
        picks: dict[int, list[str]] = {g: [] for g in range(GROUPS)}
        for k in range(PER_GROUP):  # the groups interleaved, as concurrent users' requests arrive
            for g, prefix in enumerate(prefixes):
                picks[g].append(gw.send(f"{prefix} question {k}: {rng.random()}"))
        spread = Counter(gw.send(text()) for _ in range(SPREAD))
        _report(picks, spread)
        assert all(sum(e == p[0] for e in p) / len(p) >= 0.9 for p in picks.values()), picks
        assert set(spread) == names, spread

        # One pod deleted: the picker drops it, the requests go on to the other, the new pod only once Ready.
        victim = Counter(p[0] for p in picks.values()).most_common(1)[0][0]
        now = _delete_one(gw, victim, names, in_picker, prefixes, wait_until)
        wait_until("the picker added the new pod", lambda: in_picker() == now, timeout=60)
        time.sleep(1)
        spread = Counter(gw.send(text()) for _ in range(SPREAD))
        print(f"prompts sharing no prefix, after the new pod was Ready: {dict(spread)}")
        assert set(spread) == now, spread
    _print_rendered_picker(rns)


def _delete_one(
    gw: Gateway, victim: str, names: set[str], in_picker: Callable[[], set[str]], prefixes: list[str], wait_until: Any
) -> set[str]:
    """Deletes pod ``victim``: the picker drops it; requests of every group go on to the other pod, and keep going
    while the ReplicaSet's new pod exists but the kubelet has not found it Ready (Gateway.send fails on a pick of a
    pod that is not Ready). Returns the two Ready pods after."""
    deleted = time.monotonic()
    kubectl("delete", "pod", victim, "-n", gw.ns, "--wait=false")
    wait_until("the picker dropped the deleted pod", lambda: victim not in in_picker(), timeout=30)
    print(f"the picker dropped {victim} within {time.monotonic() - deleted:.2f} s of the delete (kubectl's included)")
    after = Counter(gw.send(f"{prefixes[i % GROUPS]} after {i}: {random.random()}") for i in range(AFTER_DELETE))
    print(f"{AFTER_DELETE} requests after the deletion, all answered: {dict(after)}")
    assert victim not in after, after
    unready: Counter[str] = Counter()
    while True:
        pods = {p["metadata"]["name"]: p for p in _pool_pods(gw.ns, gw.selector)}
        now = {n for n, p in pods.items() if _ready(p)} - {victim}
        if len(now) == 2:
            break
        assert time.monotonic() - deleted < 300, f"no new Ready pod 300 s after the deletion: {list(pods)}"
        if set(pods) - names:  # the new pod is there, not Ready yet
            unready[gw.send(f"{prefixes[unready.total() % GROUPS]} meanwhile: {random.random()}")] += 1
        time.sleep(0.2)
    print(f"the new pod Ready {time.monotonic() - deleted:.0f} s after the deletion")
    print(f"{unready.total()} requests while it was not Ready yet, all answered: {dict(unready)}")
    assert set(unready) <= names - {victim}, unready
    return now


def _print_rendered_picker(ns: str) -> None:
    """Where the picker pod the operator rendered went, and its state (printed, not asserted: its image is not built
    here, and the test runs the same binary on the host)."""
    for pod in get_json(
        "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=endpoint-picker"
    )["items"]:
        waiting = [s["state"].get("waiting", {}).get("reason") for s in pod["status"].get("containerStatuses") or []]
        print(
            f"rendered picker pod {pod['metadata']['name']}: node {pod['spec'].get('nodeName')}, "
            f"{pod['status'].get('phase')}, waiting {waiting}"
        )


def _report(picks: dict[int, list[str]], spread: Counter[str]) -> None:
    for g, p in picks.items():
        share = sum(e == p[0] for e in p) / len(p)
        print(f"group {g}: first to {p[0]}, {share:.0%} of {len(p)} there ({dict(Counter(p))})")
    firsts = Counter(p[0] for p in picks.values())
    print(f"groups per pod (by their first request): {dict(firsts)}")
    blind = max(spread.values()) / sum(spread.values())
    print(f"prompts sharing no prefix: {dict(spread)} ({blind:.0%} at the pod most picked)")
