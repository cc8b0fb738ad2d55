"""spec.autoscaling and the scale subresource on the real control plane.

- `kubectl scale ib` goes through the InferenceBackend's scale subresource and the Deployment follows.
- With spec.autoscaling, another field manager scaling the Deployment (as the HPA does, through the Deployment's
  scale subresource; or by server-side apply) is never reverted, across reconciles, and the operator makes no
  further writes to the Deployment.
- Turning autoscaling on keeps the live replicas (handed over, not reset to 1); turning it off deletes the
  ScaledObject and the operator takes the replicas back.
- The rendered ScaledObjects are accepted by KEDA's own CRD (the schema and CEL rules of
  github.com/kedacore/keda/v2 v2.21.0, config/crd/bases, from the Go module cache; installed here unless the
  cluster already has it), and without that CRD the backend reports it in its Autoscaling condition, then creates
  the ScaledObject once the CRD appears.
- The CRD's CEL rules for spec.autoscaling refuse what the API models refuse, naming the field.

KEDA's operator is not run here (e2e/test_autoscaling_chain.py, with Prometheus, does that): this module proves the
API and the ownership of replicas, which do not depend on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit.cluster import (
    SYSTEM_NS,
    Operator,
    apply,
    example,
    get_json,
    ib,
    kubectl,
    tool,
    wait_established,
    wait_phase,
)
from ib_testkit.golden import OUTPUTS

KEDA_MODULE = "github.com/kedacore/keda/v2"
KEDA_VERSION = os.environ.get("E2E_KEDA_VERSION", "v2.21.0")
KEDA_CRD = "scaledobjects.keda.sh"
OPERATOR_USER = f"system:serviceaccount:{SYSTEM_NS}:ib-inference-backend"
AUTOSCALING = {"minReplicas": 1, "maxReplicas": 5, "metric": "queueDepth", "target": 2}
SMALL = {"requests": {"cpu": "2", "memory": "6Gi"}, "limits": {"memory": "6Gi"}}
"""Five replicas of the llama.cpp example fit the one KWOK CPU node (16 cores, 64 GiB) with this override."""


def keda_crd_file() -> Path:
    """KEDA's ScaledObject CRD from its Go module (downloaded through the module proxy into GOMODCACHE)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
        subprocess.run(["go", "mod", "init", "ib-e2e-keda-crd"], cwd=tmp, env=env, check=True, capture_output=True)
        res = subprocess.run(
            ["go", "mod", "download", "-json", f"{KEDA_MODULE}@{KEDA_VERSION}"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if res.returncode != 0:
        pytest.skip(f"go mod download {KEDA_MODULE}@{KEDA_VERSION} failed: {res.stdout} {res.stderr}")
    path = Path(json.loads(res.stdout)["Dir"]) / "config" / "crd" / "bases" / "keda.sh_scaledobjects.yaml"
    assert path.is_file(), path
    return path


def crd_present() -> bool:
    return bool(kubectl("get", "crd", KEDA_CRD, "--ignore-not-found", "-o", "name").strip())


def install_keda_crd(wait_until: Any) -> None:
    if not crd_present():
        kubectl("apply", "--server-side", "--field-manager=ib-e2e", "-f", str(keda_crd_file()))
    wait_established(KEDA_CRD)


def managers_of_replicas(obj: dict[str, Any]) -> set[str]:
    """Field managers owning spec.replicas (managedFields)."""
    out = set()
    for entry in obj["metadata"].get("managedFields") or []:
        if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {}):
            out.add(entry["manager"])
    return out


def deployment(ns: str, name: str) -> dict[str, Any]:
    """The Deployment with its managedFields (kubectl leaves them out unless asked)."""
    return get_json("deployment", name, "-n", ns, "--show-managed-fields")  # type: ignore[no-any-return]


def operator_writes(audit_log: Any, mark: int, ns: str, resource: str) -> list[dict[str, Any]]:
    return audit_log.writes(since=mark, user=OPERATOR_USER, resource=resource, namespace=ns)  # type: ignore[no-any-return]


def wait_ready(wait_until: Any, ns: str, name: str, ready: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = ib(ns, name)
        return obj if (obj.get("status") or {}).get("ready") == ready else None

    return wait_until(f"{ns}/{name} {ready} ready", check, timeout=90)  # type: ignore[no-any-return]


def cond(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}.get(kind) or {}


# -- first, while the cluster has no KEDA CRD (the tests below install it) ----------------------------------------


def test_missing_keda_crd_is_a_condition_then_picked_up(operator: Operator, ns: str, wait_until: Any) -> None:
    if crd_present():
        pytest.skip(f"the cluster has {KEDA_CRD} already (installed by another module or by KEDA)")
    doc = example("llamacpp-cpu-gguf.yaml", ns, autoscaling=AUTOSCALING)
    name = doc["metadata"]["name"]
    apply(doc)

    def missing() -> dict[str, Any] | None:
        obj = ib(ns, name)
        return obj if cond(obj, "Autoscaling").get("reason") == "ScalerMissing" else None

    obj = wait_until("the ScalerMissing condition", missing, timeout=60)
    assert KEDA_CRD in cond(obj, "Autoscaling")["message"]
    wait_phase(wait_until, ns, name, "Ready")  # it serves meanwhile
    assert operator.alive()
    install_keda_crd(wait_until)
    wait_until(
        "the ScaledObject after the CRD appears",
        lambda: kubectl("get", "scaledobject", name, "-n", ns, "--ignore-not-found", "-o", "name").strip(),
        timeout=120,
    )
    wait_until("ScalerReady", lambda: cond(ib(ns, name), "Autoscaling").get("reason") == "ScalerReady", timeout=60)


# -- CEL rules and KEDA's schema (no operator needed) ---------------------------------------------------------------


def _dry_run(doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    cmd = [tool("kubectl"), "apply", "--dry-run=server", "--server-side", "--field-manager=e2e", "-f", "-"]
    return subprocess.run(cmd, input=yaml.safe_dump(doc), capture_output=True, text=True, check=False)


def _ib(ns: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": "cel", "namespace": ns},
        "spec": spec,
    }


GGUF = {"uri": "hf://x/y/m.gguf", "parameters": "1B", "format": "gguf"}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"autoscaling": {**AUTOSCALING, "minReplicas": 6}}, "autoscaling.minReplicas must be at most"),
        ({"autoscaling": {**AUTOSCALING, "minReplicas": 0}}, "set autoscaling.scaleToZero"),
        (
            {"autoscaling": {**AUTOSCALING, "scaleToZero": {"cooldownSeconds": 60, "wakeQuery": "up"}}},
            "autoscaling.scaleToZero is set: autoscaling.minReplicas must be 0",
        ),
        ({"autoscaling": {**AUTOSCALING, "metric": "kvCacheUsage", "target": 120}}, "a percentage of the KV cache"),
        ({"autoscaling": {**AUTOSCALING, "metric": "gpuUtilization"}}, "spec.autoscaling.metric"),
        ({"autoscaling": {**AUTOSCALING, "maxReplicas": 0}}, "spec.autoscaling.maxReplicas"),
        (
            {"backend": "tgi", "autoscaling": {**AUTOSCALING, "metric": "kvCacheUsage", "target": 50}},
            "autoscaling.metric kvCacheUsage: tgi and llamacpp expose no such metric",
        ),
        (
            {
                "backend": "vllm",
                "autoscaling": {
                    **AUTOSCALING,
                    "minReplicas": 0,
                    "scaleToZero": {"cooldownSeconds": 60, "wakeQuery": "up"},
                },
            },
            "autoscaling.minReplicas 0: vllm, tgi and sglang cold-start in minutes",
        ),
    ],
)
def test_the_crd_refuses_bad_autoscaling_naming_the_field(namespace: str, spec: dict[str, Any], says: str) -> None:
    res = _dry_run(_ib(namespace, {"model": GGUF, **spec}))
    assert res.returncode != 0 and says in res.stderr, res.stderr


def test_the_crd_admits_good_autoscaling(namespace: str) -> None:
    for auto in (
        {**AUTOSCALING, "behavior": {"scaleDownStabilizationSeconds": 0}},
        {**AUTOSCALING, "minReplicas": 0, "scaleToZero": {"cooldownSeconds": 60, "wakeQuery": "up"}},
        {**AUTOSCALING, "metric": "kvCacheUsage", "target": 100},
    ):
        res = _dry_run(_ib(namespace, {"model": GGUF, "autoscaling": auto}))
        assert res.returncode == 0, (auto, res.stderr)


def test_rendered_scaled_objects_pass_kedas_crd(namespace: str, wait_until: Any) -> None:
    """Every ScaledObject of the golden files (both examples' shapes: behavior, the Value metric type, scale to
    zero with its wake trigger) is valid for KEDA's CRD, by the API server's own validation."""
    install_keda_crd(wait_until)
    found = 0
    for path in sorted(OUTPUTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "ScaledObject":
                doc["metadata"]["namespace"] = namespace
                res = _dry_run(doc)
                assert res.returncode == 0, (path.name, res.stderr)
                found += 1
    assert found >= 2
    bad = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "x", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"name": "x"},
            "minReplicaCount": 5,
            "maxReplicaCount": 2,
            "triggers": [{"type": "prometheus", "metadata": {}}],
        },
    }
    res = _dry_run(bad)
    assert res.returncode != 0 and "minReplicaCount must be less than or equal to maxReplicaCount" in res.stderr


# -- with the operator ------------------------------------------------------------------------------------------------


def test_kubectl_scale_ib_moves_the_deployment(operator: Operator, ns: str, wait_until: Any) -> None:
    doc = example("llamacpp-cpu-gguf.yaml", ns, resources=SMALL)
    name = doc["metadata"]["name"]
    apply(doc)
    obj = wait_phase(wait_until, ns, name, "Ready")
    assert obj["status"]["selector"] == (
        f"app.kubernetes.io/component=inference-server,app.kubernetes.io/instance="
        f"{name},app.kubernetes.io/managed-by=inference-backend-operator"
    )
    kubectl("scale", "ib", name, "-n", ns, "--replicas=3")
    assert ib(ns, name)["spec"]["replicas"] == 3
    wait_until("the Deployment at 3 replicas", lambda: deployment(ns, name)["spec"]["replicas"] == 3, timeout=60)
    obj = wait_ready(wait_until, ns, name, "3/3")
    assert obj["status"]["phase"] == "Ready" and obj["status"]["replicas"] == 3
    scale = json.loads(
        kubectl(
            "get", "--raw", f"/apis/serving.inferencebackend.io/v1alpha1/namespaces/{ns}/inferencebackends/{name}/scale"
        )
    )
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 3
    assert scale["status"]["selector"] == obj["status"]["selector"]
    pods = get_json("pods", "-n", ns, "-l", obj["status"]["selector"])["items"]
    assert len(pods) == 3


def test_autoscaled_replicas_belong_to_the_autoscaler(
    operator: Operator, ns: str, wait_until: Any, audit_log: Any
) -> None:
    install_keda_crd(wait_until)
    doc = example("llamacpp-cpu-gguf.yaml", ns, autoscaling=AUTOSCALING, resources=SMALL)
    name = doc["metadata"]["name"]
    apply(doc)
    obj = wait_phase(wait_until, ns, name, "Ready")
    assert cond(obj, "Autoscaling").get("reason") == "ScalerReady", obj["status"]["conditions"]
    so = get_json("scaledobject", name, "-n", ns)
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    assert "llamacpp:requests_deferred" in so["spec"]["triggers"][0]["metadata"]["query"]
    assert so["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    dep = deployment(ns, name)
    assert dep["metadata"]["managedFields"] and "inference-backend" not in managers_of_replicas(dep), dep["metadata"]

    # The HPA's way: an update of the Deployment's scale subresource.
    mark = audit_log.mark()
    kubectl("scale", "deployment", name, "-n", ns, "--replicas=4")
    wait_ready(wait_until, ns, name, "4/4")
    # Another autoscaler's way: server-side apply of replicas by its own field manager.
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 2},
    }
    kubectl("apply", "--server-side", "--field-manager=keda-hpa-sim", "-f", "-", stdin=yaml.safe_dump(patch))
    wait_ready(wait_until, ns, name, "2/2")
    # Reconciles: a spec change the Deployment does not depend on (the ScaledObject does), and the node pass.
    kubectl("patch", "ib", name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": {"autoscaling": {"target": 3}}}))
    wait_until(
        "the ScaledObject at threshold 3",
        lambda: get_json("scaledobject", name, "-n", ns)["spec"]["triggers"][0]["metadata"]["threshold"] == "3",
        timeout=60,
    )
    wait_phase(wait_until, ns, name, "Ready")
    time.sleep(5)  # the last events of the pods and the Deployment settle
    quiet = audit_log.mark()
    time.sleep(10)
    dep = deployment(ns, name)
    assert dep["spec"]["replicas"] == 2 and "keda-hpa-sim" in managers_of_replicas(dep)
    assert operator_writes(audit_log, mark, ns, "deployments") == [], "the operator wrote the Deployment"
    so_writes = operator_writes(audit_log, mark, ns, "scaledobjects")
    assert len(so_writes) == 1, [(e["verb"], e["objectRef"]) for e in so_writes]
    settled = audit_log.writes(since=quiet, user=OPERATOR_USER, namespace=ns)
    assert settled == [], f"writes once nothing changes: {[(e['verb'], e['objectRef']) for e in settled]}"
    print(
        f"operator writes while scaled 1 -> 4 -> 2 and the target changed: "
        f"{len(audit_log.writes(since=mark, user=OPERATOR_USER, namespace=ns))} (status patches and one "
        "ScaledObject apply; none of the Deployment)"
    )


def test_autoscaling_on_keeps_replicas_and_off_takes_them_back(operator: Operator, ns: str, wait_until: Any) -> None:
    install_keda_crd(wait_until)
    doc = example("llamacpp-cpu-gguf.yaml", ns, replicas=3, resources=SMALL)
    name = doc["metadata"]["name"]
    apply(doc)
    wait_phase(wait_until, ns, name, "Ready")
    assert managers_of_replicas(deployment(ns, name)) == {"inference-backend"}
    kubectl("patch", "ib", name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": {"autoscaling": AUTOSCALING}}))
    wait_until(
        "the ScaledObject",
        lambda: kubectl("get", "scaledobject", name, "-n", ns, "--ignore-not-found", "-o", "name").strip(),
        timeout=60,
    )
    for _ in range(10):  # not reset to the default 1 by the apply that dropped the field
        dep = deployment(ns, name)
        assert dep["spec"]["replicas"] == 3, dep["spec"]
        time.sleep(0.5)
    assert managers_of_replicas(dep) == {"inference-backend-handoff"}
    assert ib(ns, name)["status"]["autoscaling"]["scaledObject"] == name
    kubectl(
        "patch",
        "ib",
        name,
        "-n",
        ns,
        "--type=json",
        "-p",
        json.dumps(
            [{"op": "remove", "path": "/spec/autoscaling"}, {"op": "replace", "path": "/spec/replicas", "value": 1}]
        ),
    )
    wait_until(
        "the ScaledObject deleted",
        lambda: not kubectl("get", "scaledobject", name, "-n", ns, "--ignore-not-found", "-o", "name").strip(),
        timeout=60,
    )
    wait_until("the Deployment at 1", lambda: deployment(ns, name)["spec"]["replicas"] == 1, timeout=60)
    assert "inference-backend" in managers_of_replicas(deployment(ns, name))
    obj = wait_phase(wait_until, ns, name, "Ready")
    assert "autoscaling" not in obj["status"] and not cond(obj, "Autoscaling")
