"""Prefix-affine routing measured with the real scoring picker (cmd/epp of the Inference Extension v1.5.0,
e2e/build-picker) driven over its ext_proc gRPC API, as a gateway drives it:

- two real PyTorch runner processes serve the tiny model on 127.0.0.2 and 127.0.0.3, on one port (as a pool's pods
  do); each exports its real metrics (vllm:num_requests_waiting, vllm:kv_cache_usage_perc);
- two KWOK nodes whose InternalIPs are those addresses, and on each a hostNetwork pod (so KWOK gives it the node's
  IP), Ready, make the pool's endpoints; an InferencePool selects them;
- the picker runs with the EndpointPickerConfig the operator renders for the PyTorch runner (picker.config_text:
  queue, KV-cache and prefix-cache scorers over the runner's metric names) and scrapes the two runners;
- a client speaking Envoy's ext_proc protocol (envoy.service.ext_proc.v3 from xds-protos) sends each completion's
  headers and body, reads the endpoint the picker sets (x-gateway-destination-endpoint) and sends the completion
  there, as the gateway would.

Groups of requests sharing a prefix (each with its own suffix) are sent interleaved; the share of each group's
requests that went to the endpoint its first request went to is printed, and must be at least 90% (round robin or a
random pick would give about half). Requests with no common prefix are spread over both endpoints (the picker does
not send everything to one); their share at the endpoint most picked is printed beside.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ib_testkit import free_port, stop_process
from ib_testkit.cluster import PICKER_CRDS as CRDS
from ib_testkit.cluster import apply, kubectl, wait_established
from ib_testkit.real_nodes import runners_python, tiny_models
from inference_backend import picker
from inference_backend.decision import Decision
from inference_backend.engines import card

# grpcio and xds-protos are in the dev extras (make venv); a venv made before them skips this module
pytest.importorskip("grpc", reason="no grpcio: make venv")
pytest.importorskip("envoy.service.ext_proc.v3.external_processor_pb2_grpc", reason="no xds-protos: make venv")
from ib_testkit.endpoint_picker import argv, complete, extproc_stub, pick, picked_pods, run_picker

ADDRESSES = ("127.0.0.2", "127.0.0.3")
TAINT = {"key": "ib-e2e/affinity-probe", "value": "true", "effect": "NoSchedule"}
PROBE = {"ib-e2e/affinity-probe": "true"}
GROUPS, PER_GROUP, PREFIX_CHARS = 6, 6, 384
"""384 characters: six of the prefix index's blocks (16 tokens of 4 characters); with the suffix about 390 of the
tiny model's tokens, inside its 512-token context."""


@contextlib.contextmanager
def _runner(model: Path, host: str, port: int, log: Path) -> Iterator[str]:
    """Our PyTorch runner serving ``model`` on host:port (the runners venv); yields its base URL."""
    script = runners_python().parent / "ib-pytorch-runner"
    argv = [str(script), "--model", str(model), "--host", host, "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
            time.sleep(0.5)
        yield url
    finally:
        stop_process(proc, timeout=30)


def _node(name: str, address: str) -> dict[str, Any]:
    """A KWOK node (kwok.x-k8s.io/node=fake) whose InternalIP is ``address`` (KWOK keeps an address it is given)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}, "labels": dict(PROBE)},
        "spec": {"taints": [TAINT]},
        "status": {"addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}]},
    }


def _pod(ns: str, name: str, node: str, port: int) -> dict[str, Any]:
    """A hostNetwork pod bound to ``node``: KWOK makes it Running and Ready with the node's IP."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": dict(PROBE)},
        "spec": {
            "nodeName": node,
            "hostNetwork": True,
            "tolerations": [{**TAINT, "operator": "Equal"}],
            "containers": [
                {"name": "runner", "image": "localhost/ib-e2e/runner:0", "ports": [{"containerPort": port}]}
            ],
        },
    }


def _pool(ns: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "affinity", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": dict(PROBE)},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"kind": "Service", "name": "affinity-epp", "port": {"number": 9002}},
        },
    }


def _endpoints(stack: contextlib.ExitStack, ns: str, port: int, tmp_path: Path, wait_until: Any) -> None:
    """The two runners, their KWOK nodes and Ready pods, and the InferencePool over them."""
    model = tiny_models().hf
    for a in ADDRESSES:
        stack.enter_context(_runner(model, a, port, tmp_path / f"runner-{a}.log"))
    for i, address in enumerate(ADDRESSES):
        node = f"ib-affinity-{ns}-{i}"
        apply(_node(node, address))
        stack.callback(kubectl, "delete", "node", node, "--ignore-not-found", "--wait=false")
        apply(_pod(ns, f"probe-{i}", node, port))
    wait_until(
        "both probe pods Ready with their node's address",
        lambda: (
            sorted(kubectl("get", "pods", "-n", ns, "-o", "jsonpath={.items[*].status.podIP}").split())
            == list(ADDRESSES)
        ),
        timeout=60,
    )
    apply(_pool(ns, port))


def _start_picker(stack: contextlib.ExitStack, ns: str, tmp_path: Path, wait_until: Any) -> int:
    """The real picker over the pool, with the configuration the operator renders for the PyTorch runner; returns
    its ext_proc port once it has added both endpoints."""
    config = picker.config_text(card("pytorch"), Decision(backend="pytorch", reasons=(), prefix_cache=True))
    grpc_port, metrics_port, log = free_port(), free_port(), tmp_path / "epp.log"
    options = {
        **{"--pool-name": "affinity", "--pool-namespace": ns},
        **{"--grpc-port": str(grpc_port), "--grpc-health-port": str(free_port())},
        **{"--metrics-port": str(metrics_port), "--config-text": config},
        # plaintext ext_proc for this client (a gateway takes the self-signed certificate without verifying it)
        "--secure-serving": "false",
        **{"--tracing": "false", "--metrics-endpoint-auth": "false", "--enable-pprof": "false"},
    }
    proc = stack.enter_context(run_picker(argv(options), log))

    def added() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        return len(picked_pods(f"http://127.0.0.1:{metrics_port}/metrics") or ()) >= len(ADDRESSES)

    wait_until("the picker added both endpoints", added, timeout=90)
    time.sleep(1)  # a few scrapes of both runners' metrics (every 50 ms)
    return grpc_port


def test_requests_sharing_a_prefix_go_to_one_endpoint(
    picker_built: None, ns: str, wait_until: Any, tmp_path: Path
) -> None:
    kubectl("apply", "--server-side", "-f", str(CRDS / "inference.networking.k8s.io_inferencepools.yaml"))
    wait_established("inferencepools.inference.networking.k8s.io")
    port = free_port()
    served = "hf"  # the runner's served name: its model directory's
    rng = random.Random(7)

    def text() -> str:
        return "".join(rng.choice("abcdefghij ") for _ in range(PREFIX_CHARS))

    with contextlib.ExitStack() as stack:
        _endpoints(stack, ns, port, tmp_path, wait_until)
        stub = stack.enter_context(extproc_stub(_start_picker(stack, ns, tmp_path, wait_until)))
        prefixes = [text() for _ in range(GROUPS)]
        picks: dict[int, list[str]] = {g: [] for g in range(GROUPS)}
        for k in range(PER_GROUP):  # the groups interleaved, as concurrent users' requests arrive
            for g, prefix in enumerate(prefixes):
                prompt = f"{prefix} question {k}: {rng.random()}"
                picks[g].append(pick(stub, served, prompt))
                complete(picks[g][-1], served, prompt)
        spread = Counter(pick(stub, served, text()) for _ in range(16))

    affinity = {g: sum(e == p[0] for e in p) / len(p) for g, p in picks.items()}
    for g, p in picks.items():
        print(f"group {g}: first to {p[0]}, {affinity[g]:.0%} of {len(p)} there ({dict(Counter(p))})")
    blind = max(spread.values()) / sum(spread.values())
    print(f"prompts sharing no prefix: {dict(spread)} ({blind:.0%} at the endpoint most picked)")
    assert {e for p in picks.values() for e in p} <= {f"{a}:{port}" for a in ADDRESSES}
    assert all(share >= 0.9 for share in affinity.values()), affinity
    assert {e.rsplit(":", 1)[0] for e in spread} == set(ADDRESSES), spread
