"""The apiserver's own verdict (server-side dry-run) on generated InferenceBackends and on their rendered children.

- Every generated spec (from the CRD's schema, ib_testkit.fuzz) is admitted by the apiserver exactly when pydantic
  admits it: the CRD and the offline CLI agree in both directions, CEL rules included.
- Every child that `inference-backend render` gives for an admitted spec passes the apiserver's validation
  (created with dryRun=All and strict field validation; a CRD's kind this cluster does not serve is counted, not
  failed).
- The awkward names of the issue (llama.chat, 1abc, qwen2.5-7b-instruct, 63+ characters) render children the
  apiserver accepts.

IB_E2E_FUZZ sets the number of generated cases (default 200). Nothing is persisted: every request is a dry run.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from ib_testkit.fuzz import backends, cel_messages, run_case
from inference_backend.crdgen import render_all

ROOT = Path(__file__).resolve().parents[1]
NODES = yaml.safe_load((ROOT / "docs/examples/nodes/mixed.yaml").read_text())
CASES = int(os.environ.get("IB_E2E_FUZZ", "200"))
CORE = (
    "InferenceBackend",
    "Deployment",
    "Service",
    "PodDisruptionBudget",
    "PersistentVolumeClaim",
    "ConfigMap",
    "ServiceAccount",
    "Role",
    "RoleBinding",
)
"""Kinds every cluster serves (or this module installs): a 404 for them is a fault, not an absent CRD."""
DRY = {"dryRun": "All", "fieldValidation": "Strict"}
COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def crds(kube_http: Any, wait_until: Any) -> Iterator[None]:
    names = []
    for text in render_all().values():
        doc = yaml.safe_load(text)
        name = doc["metadata"]["name"]
        names.append(name)
        r = kube_http.patch(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
            params={"fieldManager": "e2e-admission", "force": "true"},
            content=json.dumps(doc),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        assert r.status_code in (200, 201), r.text

        def established(n: str = name) -> bool:
            got = kube_http.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}").json()
            conditions = (got.get("status") or {}).get("conditions") or []  # none yet right after the apply
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_until(f"CRD {name} established", established, timeout=30)
    yield
    # Remove what this module applied: helm's server-side apply in the operator tests would conflict with this
    # module's field manager (the JSON it posts carries the int64 bounds as integers, helm's YAML decoding does not
    # give the same values). Only dry runs used the CRDs, so there is nothing to clean up but the CRDs.
    for name in names:
        r = kube_http.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        assert r.status_code in (200, 202, 404), r.text
    crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}"
    for name in names:
        wait_until(f"CRD {name} deleted", lambda n=name: kube_http.get(crd.format(n)).status_code == 404, timeout=60)


def collection(obj: dict[str, Any]) -> str:
    """The namespaced collection a child is created in, from its apiVersion and kind: every kind the operator renders
    (render.py, routing.py: PersistentVolumeClaim, ConfigMap, ResourceClaimTemplate, LeaderWorkerSet, InferencePool,
    ScaledObject, RBAC...) has the plural `<kind in lower case>s`, so no table can miss one."""
    ns = obj["metadata"].get("namespace") or "default"
    version = obj["apiVersion"]
    root = "/api/v1" if version == "v1" else f"/apis/{version}"
    return f"{root}/namespaces/{ns}/{obj['kind'].lower()}s"


def dry_create(kube_http: Any, obj: dict[str, Any]) -> tuple[bool, str]:
    r = kube_http.post(
        collection(obj),
        params=DRY,
        content=json.dumps(obj),
        headers={"Content-Type": "application/json"},
    )
    if r.status_code in (200, 201):
        return True, ""
    if r.status_code == 404 and obj["kind"] not in CORE:
        return True, "not served"  # its CRD is not installed here (KEDA's: e2e/test_autoscaling_api.py checks it)
    assert r.status_code in (400, 422), f"{r.status_code}: {r.text}"  # refused as invalid, not an apiserver fault
    return False, r.json().get("message", r.text)


def _check(kube_http: Any, body: dict[str, Any], tmp: Path) -> None:
    outcome = run_case(body, NODES, tmp, CEL)
    admitted, why = dry_create(kube_http, body)
    COUNTS["cases"] += 1
    COUNTS["admitted" if admitted else "refused"] += 1
    assert admitted == outcome.offline_ok, (
        f"apiserver {'admits' if admitted else 'refuses'} ({why}) but the CLI "
        f"{'admits' if outcome.offline_ok else 'refuses'} ({outcome.pydantic_errors}): {json.dumps(body)[:3000]}"
    )
    for child in outcome.children:
        ok, why = dry_create(kube_http, child)
        COUNTS[f"{child['kind']} " + ("not served" if why == "not served" else "dry-run created")] += 1
        assert ok, f"the apiserver refuses the rendered {child['kind']} {child['metadata']['name']}: {why}"


CEL = cel_messages()
AWKWARD = ["llama.chat", "1abc", "qwen2.5-7b-instruct", "a" * 64, "x." * 100 + "y", "b" * 242]


@pytest.mark.parametrize("name", AWKWARD)
def test_awkward_names_render_valid_children(kube_http: Any, name: str, tmp_path: Path) -> None:
    body = {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct", "parameters": "0.5B"}, "replicas": 2},
    }
    outcome = run_case(body, NODES, tmp_path, CEL)
    assert outcome.render_rc == 0 and {c["kind"] for c in outcome.children} == {
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    }
    _check(kube_http, body, tmp_path)


def test_a_name_over_242_characters_is_refused_by_both(kube_http: Any, tmp_path: Path) -> None:
    body = {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": "c" * 243, "namespace": "default"},
        "spec": {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct", "parameters": "0.5B"}},
    }
    _check(kube_http, body, tmp_path)


EVERY_CHILD = {
    "apiVersion": "serving.inferencebackend.io/v1alpha1",
    "kind": "InferenceBackend",
    "metadata": {"name": "every-child", "namespace": "default"},
    "spec": {
        "model": {
            "uri": "hf://Qwen/Qwen2.5-0.5B-Instruct",
            "parameters": "0.5B",
            "servedName": "qwen",
            "cache": {"storageClass": "standard"},
            "credentialsSecret": "hf-token",
        },
        "backend": "vllm",
        "adapters": [{"name": "sql", "uri": "hf://org/qwen-sql-lora", "rank": 8}],
        "routing": {"inferencePool": {"enabled": True}},
        "autoscaling": {"minReplicas": 1, "maxReplicas": 3, "metric": "queueDepth", "target": 4},
    },
}


def test_a_spec_with_every_child_kind_renders_valid_children(kube_http: Any, tmp_path: Path) -> None:
    """The weights claim, the adapters ConfigMap, the pool, its picker and RBAC, the ScaledObject: generated specs
    reach some of these only by chance, so one spec asks for them all every run."""
    outcome = run_case(EVERY_CHILD, NODES, tmp_path, CEL)
    kinds = {c["kind"] for c in outcome.children}
    assert outcome.render_rc == 0 and {"PersistentVolumeClaim", "ConfigMap", "InferencePool", "ScaledObject"} <= kinds
    _check(kube_http, EVERY_CHILD, tmp_path)


@settings(
    max_examples=CASES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)  # no shrinking: each example costs apiserver round trips
@given(body=backends())
def test_generated_specs_agree_with_the_apiserver_and_render_valid_children(kube_http: Any, body: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _check(kube_http, body, Path(tmp))


def test_report_counts() -> None:
    """Prints what the generated cases covered (run with -s to see it)."""
    print(json.dumps(dict(sorted(COUNTS.items()))))
    assert COUNTS["cases"] > 0
