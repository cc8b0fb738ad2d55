"""spec.routing.inferencePool on the real control plane, with the real Inference Extension CRDs and picker binary
(e2e/build-picker: cmd/epp of sigs.k8s.io/gateway-api-inference-extension v1.5.0, the scoring picker):

- without the InferencePool CRD the backend still serves (its Deployment and Service applied) and status.routing
  says the CRD is missing;
- once the module's CRDs are installed, the operator's retry applies the InferencePool, the picker's Deployment,
  Service, ServiceAccount, Role and RoleBinding; the picker's pods run (KWOK);
- the real picker binary (epp), run here with the token of the picker's own ServiceAccount (so with exactly the
  Role the operator rendered) and the arguments of the Deployment the operator rendered (its EndpointPickerConfig
  as --config-text, so the picker's strict decoder and plugin factories accept it: the scorers, the metrics source
  and the extractor with the engine's metric names), syncs the pool (controller-runtime's reconcile histogram on its
  metrics endpoint, no reconcile error), with the module's x-k8s.io CRDs installed too (so it also watches
  InferenceObjectives and InferenceModelRewrites under that Role), and no RBAC refusal in its log;
- turning routing off deletes the pool and the picker's children.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from ib_testkit import free_port
from ib_testkit.cluster import PICKER_CRDS as CRDS
from ib_testkit.cluster import Operator, apply, example, get_json, ib, kubectl, wait_established
from ib_testkit.endpoint_picker import argv, flags, run_picker, service_account_kubeconfig
from inference_backend import routing

VERSION = routing.PICKER_VERSION
PICKER_KINDS = ("deployment", "service", "serviceaccount", "role", "rolebinding")
X_CRDS = ("inferenceobjectives", "inferencemodelrewrites")
"""The module's inference.networking.x-k8s.io CRDs the picker watches when the cluster serves them."""


def _routing(ns: str, name: str) -> dict[str, Any] | None:
    return (ib(ns, name).get("status") or {}).get("routing")


def _metric(url: str, name: str, **labels: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? ([0-9.eE+-]+)$", re.M)
    return sum(float(v) for lbl, v in pattern.findall(text) if all(w in lbl for w in wanted))


def test_pool_and_picker_apply_and_run(
    picker_built: None, operator: Operator, ns: str, wait_until: Any, tmp_path: Path
) -> None:
    kubectl("delete", "crd", "inferencepools.inference.networking.k8s.io", "--ignore-not-found", "--wait")
    doc = example("llamacpp-cpu-gguf.yaml", ns, replicas=2, routing={"inferencePool": {"enabled": True}})
    name = doc["metadata"]["name"]
    apply(doc)
    missing = wait_until("status.routing says the CRD is missing", lambda: (_routing(ns, name) or {}).get("message"))
    assert "inferencepools.inference.networking.k8s.io" in missing
    wait_until(
        "the backend's Deployment applied meanwhile",
        lambda: kubectl("get", "deployment", name, "-n", ns, check=False).count(name) > 0,
    )

    kubectl("apply", "--server-side", "-f", str(CRDS / "inference.networking.k8s.io_inferencepools.yaml"))
    wait_established("inferencepools.inference.networking.k8s.io")
    applied = wait_until(
        "the pool applied on the operator's retry",
        lambda: (r := _routing(ns, name)) and r.get("appliedHash") and r,
        timeout=150,
    )
    picker = applied["endpointPicker"]
    pool = get_json("inferencepool", name, "-n", ns)
    svc = get_json("service", name, "-n", ns)
    assert pool["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert pool["spec"]["endpointPickerRef"]["name"] == picker
    for kind in PICKER_KINDS:
        get_json(kind, picker, "-n", ns)
    wait_until(
        "the picker's pod Running",
        lambda: (
            "Running"
            in kubectl(
                "get",
                "pods",
                "-n",
                ns,
                "-l",
                "app.kubernetes.io/component=endpoint-picker",
                "-o",
                "jsonpath={.items[*].status.phase}",
            )
        ),
        timeout=90,
    )

    # The real picker, as the picker's ServiceAccount, with the arguments the operator rendered (ports moved to free
    # ones): reads its InferencePool, the pool's pods, and the x-k8s.io objects once their CRDs are served.
    for crd in X_CRDS:
        kubectl("apply", "--server-side", "-f", str(CRDS / f"inference.networking.x-k8s.io_{crd}.yaml"))
        wait_established(f"{crd}.inference.networking.x-k8s.io")
    kubeconfig = service_account_kubeconfig(ns, picker, tmp_path)
    rendered = get_json("deployment", picker, "-n", ns)["spec"]["template"]["spec"]["containers"][0]["args"]
    options = flags(rendered)
    assert json.loads(options["--config-text"])["kind"] == "EndpointPickerConfig"
    metrics_port, log = free_port(), tmp_path / "epp.log"
    options.update({"--grpc-port": str(free_port()), "--grpc-health-port": str(free_port())})
    options["--metrics-port"] = str(metrics_port)
    with run_picker(argv(options), log, kubeconfig) as proc:
        try:
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            pods = kubectl(
                "get",
                "pods",
                "-n",
                ns,
                "-l",
                f"app.kubernetes.io/instance={name},app.kubernetes.io/component=inference-server",
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ).split()
            assert len(pods) == 2

            def reconciled() -> bool:
                assert proc.poll() is None, log.read_text()[-3000:]
                try:
                    pools = _metric(url, "controller_runtime_reconcile_time_seconds_count", controller="inferencepool")
                    errors = _metric(url, "controller_runtime_reconcile_errors_total")
                except OSError:
                    return False
                assert errors == 0, "the picker's reconciles failed"
                return pools > 0

            wait_until("the picker synced its pool", reconciled, timeout=120)
            time.sleep(2)
            text = log.read_text()
            assert "forbidden" not in text.lower(), [ln for ln in text.splitlines() if "orbidden" in ln][:3]
            assert "loaded configuration from file/text successfully" in text
            engine = [ln for ln in text.splitlines() if "Registered engine mapping" in ln and '"llamacpp"' in ln]
            assert engine, "the extractor registered the engine's metric mapping"
        finally:
            for crd in X_CRDS:
                kubectl("delete", "crd", f"{crd}.inference.networking.x-k8s.io", "--ignore-not-found", "--wait=false")

    apply({**doc, "spec": {**doc["spec"], "routing": {"inferencePool": {"enabled": False}}}})
    wait_until(
        "routing off: the pool deleted",
        lambda: not kubectl("get", "inferencepool", "-n", ns, "-o", "name").strip(),
        timeout=90,
    )
    wait_until(
        "and the picker's children",
        lambda: all(picker not in kubectl("get", kind, "-n", ns, "-o", "name") for kind in PICKER_KINDS),
        timeout=60,
    )
    assert _routing(ns, name) is None
