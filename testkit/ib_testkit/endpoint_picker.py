"""The endpoint picker (cmd/epp of the Inference Extension, e2e/build-picker) run as a process of this host, and a
client of its ext_proc gRPC API that does what a gateway does with each request. What e2e/test_routing.py,
e2e/test_routing_affinity.py and e2e/test_routing_real.py share:

    kubeconfig = service_account_kubeconfig(ns, "NAME-epp", tmp)   # the picker ServiceAccount's own token
    with run_picker(args, log, kubeconfig) as proc: ...             # the binary with these args, stopped after
    picked_pods(metrics_url)                                        # the pods in the picker's datastore
    with extproc_stub(grpc_port) as stub:
        endpoint = pick(stub, model, prompt)                        # "IP:PORT" the picker chose
        complete(endpoint, model, prompt)                           # the request sent there, as the gateway would

grpcio and xds-protos (the dev extras) provide the client, imported when it is used: a test module that uses it
importorskips them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ib_testkit import stop_process
from ib_testkit.cluster import PICKER, kubectl

DESTINATION = "x-gateway-destination-endpoint"
"""The header the picker sets to the endpoint it chose (pkg/epp/metadata: DestinationEndpointKey)."""
POD_SERIES = re.compile(r'^inference_pool_per_pod_queue_size\{[^}]*model_server_pod="([^"]+)-rank-\d+"', re.M)
"""One series per endpoint in the picker's datastore (pkg/epp/metrics/collectors/inference_pool.go: labels name,
model_server_pod), named POD-rank-I for the pool's I-th target port (pkg/epp/datastore/datastore.go
createEndpointNamespacedName); the datastore holds only the pool's Ready pods not being deleted
(pkg/epp/controller/pod_reconciler.go, pkg/epp/util/pod IsPodReady)."""


def service_account_kubeconfig(ns: str, account: str, tmp: Path) -> Path:
    """A kubeconfig for the ServiceAccount ``account`` (a bound token from the TokenRequest API), on the cluster of
    $KUBECONFIG."""
    token = kubectl("create", "token", account, "-n", ns, "--duration", "1h").strip()
    current = yaml.safe_load(kubectl("config", "view", "--raw", "--minify", "-o", "yaml"))
    cluster = current["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": cluster["name"], "user": account, "namespace": ns}}],
        "current-context": account,
    }
    path = tmp / f"{account}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def flags(args: list[str]) -> dict[str, str]:
    """Rendered arguments as {flag: value} (--flag value and --flag=value)."""
    out, it = {}, iter(args)
    for a in it:
        key, eq, value = a.partition("=")
        out[key] = value if eq else next(it)
    return out


def argv(options: dict[str, str]) -> list[str]:
    """The picker's command line from {flag: value}: booleans as --flag=value (Go's flag package), others as two."""
    out = [str(PICKER)]
    for k, v in options.items():
        out += [f"{k}={v}"] if v in ("true", "false") else [k, v]
    return out


@contextlib.contextmanager
def run_picker(args: list[str], log: Path, kubeconfig: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """The picker binary run with ``args`` (argv's), its output in ``log``, as the user of ``kubeconfig`` (default
    $KUBECONFIG's); stopped after."""
    env = {**os.environ, **({"KUBECONFIG": str(kubeconfig)} if kubeconfig else {})}
    proc = subprocess.Popen(args, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        stop_process(proc, timeout=20)


def picked_pods(metrics_url: str) -> set[str] | None:
    """The names of the pods in the picker's datastore (its per-pod gauge), None while it does not answer."""
    with contextlib.suppress(OSError), urllib.request.urlopen(metrics_url, timeout=5) as r:
        return set(POD_SERIES.findall(r.read().decode()))
    return None


@contextlib.contextmanager
def extproc_stub(grpc_port: int) -> Iterator[Any]:
    """An ext_proc client of the picker on 127.0.0.1:grpc_port (plaintext: --secure-serving=false)."""
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        yield pb_grpc.ExternalProcessorStub(channel)


def pick(stub: Any, model: str, prompt: str) -> str:
    """One request through the picker's ext_proc stream, as Envoy sends it: headers, then the body; returns the
    endpoint it chose (the x-gateway-destination-endpoint header it sets)."""
    from envoy.config.core.v3 import base_pb2
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1}).encode()
    headers = [(":path", "/v1/completions"), (":method", "POST"), ("content-type", "application/json")]
    messages = [
        pb.ProcessingRequest(
            request_headers=pb.HttpHeaders(
                headers=base_pb2.HeaderMap(
                    headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers]
                )
            )
        ),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True)),
    ]
    chosen = []
    for response in stub.Process(iter(messages), timeout=30):
        assert not response.HasField("immediate_response"), f"the picker refused it: {response.immediate_response}"
        if response.HasField("request_headers"):
            set_headers = response.request_headers.response.header_mutation.set_headers
            chosen += [h.header.raw_value.decode() for h in set_headers if h.header.key == DESTINATION]
    assert len(chosen) == 1, f"the picker set no single destination endpoint: {chosen}"
    return str(chosen[0])


def complete(endpoint: str, model: str, prompt: str, max_tokens: int = 1) -> dict[str, Any]:
    """The completion sent where the picker said, as the gateway would (so the engine's metrics move); its JSON."""
    req = urllib.request.Request(
        f"http://{endpoint}/v1/completions",
        data=json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
        return json.loads(r.read())  # type: ignore[no-any-return]
