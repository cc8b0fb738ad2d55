"""RBAC exactly as used (issue 14 item 8), on the real apiserver: the chart's ServiceAccount can do what the
operator calls and nothing more (`kubectl auth can-i` as that ServiceAccount), the operator never hits a 403 while
it runs, and a child someone else made is never taken over: the condition names it and it survives the backend.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from ib_testkit.cluster import SYSTEM_NS, Operator, apply, example, get_json, ib, kubectl

RBAC_REFUSAL = re.compile(r'cannot [a-z]+ resource "')
SA = f"system:serviceaccount:{SYSTEM_NS}:ib-inference-backend"
ALLOWED = [
    ("list", "inferencebackends.serving.inferencebackend.io"),
    ("watch", "inferencebackends.serving.inferencebackend.io"),
    ("patch", "inferencebackends.serving.inferencebackend.io/status"),
    ("update", "inferencebackends.serving.inferencebackend.io/finalizers"),
    ("list", "models.serving.inferencebackend.io"),
    ("watch", "pods"),
    ("get", "deployments.apps"),
    ("create", "deployments.apps"),
    ("patch", "deployments.apps"),
    ("delete", "deployments.apps"),
    ("create", "leaderworkersets.leaderworkerset.x-k8s.io"),
    ("delete", "leaderworkersets.leaderworkerset.x-k8s.io"),
    ("watch", "leaderworkersets.leaderworkerset.x-k8s.io"),
    ("patch", "scaledobjects.keda.sh"),
    ("delete", "scaledobjects.keda.sh"),
    ("patch", "services"),
    ("get", "poddisruptionbudgets.policy"),
    ("create", "events"),
    ("list", "nodes"),
    ("watch", "resourceslices.resource.k8s.io"),
    ("create", "resourceclaimtemplates.resource.k8s.io"),
    ("patch", "persistentvolumeclaims"),
    ("patch", "configmaps"),
    ("get", "pods"),
    ("create", "inferencepools.inference.networking.k8s.io"),
    ("delete", "inferencepools.inference.networking.k8s.io"),
    ("watch", "inferenceobjectives.inference.networking.x-k8s.io"),
    ("patch", "serviceaccounts"),
    ("create", "roles.rbac.authorization.k8s.io"),
    ("delete", "rolebindings.rbac.authorization.k8s.io"),
    ("delete", "services"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("patch", "clusterkopfpeerings.kopf.dev"),
]
DENIED = [
    ("patch", "inferencebackends.serving.inferencebackend.io"),
    ("update", "inferencebackends.serving.inferencebackend.io"),
    ("update", "deployments.apps"),
    ("escalate", "roles.rbac.authorization.k8s.io"),
    ("bind", "roles.rbac.authorization.k8s.io"),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("list", "scaledobjects.keda.sh"),
    ("create", "horizontalpodautoscalers.autoscaling"),
    ("get", "secrets"),
    ("list", "secrets"),
    ("list", "namespaces"),
    ("create", "pods"),
    ("patch", "nodes"),
    ("delete", "persistentvolumeclaims"),
    ("delete", "configmaps"),
    ("create", "resourceslices.resource.k8s.io"),
    ("create", "events.events.k8s.io"),
    ("create", "models.serving.inferencebackend.io"),
]


def can(verb: str, resource: str, namespace: str) -> bool:
    """The API server's RBAC verdict for the ServiceAccount (a SubjectAccessReview naming group and resource, as
    `kubectl auth can-i --as` sends it, but without kubectl's discovery: a resource whose CRD is not installed, such
    as a KEDA ScaledObject or an InferencePool, is reviewed all the same)."""
    resource, _, sub = resource.partition("/")
    plural, _, group = resource.partition(".")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": SA,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NS}", "system:authenticated"],
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": group,
                "resource": plural,
                "subresource": sub,
            },
        },
    }
    out = kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(review))
    return bool(json.loads(out)["status"].get("allowed", False))


@pytest.mark.parametrize(("verb", "resource"), ALLOWED, ids=[f"{v}-{r}" for v, r in ALLOWED])
def test_the_service_account_may_do_what_the_operator_does(chart: None, verb: str, resource: str) -> None:
    assert can(verb, resource, "default"), f"{SA} cannot {verb} {resource}"


@pytest.mark.parametrize(("verb", "resource"), DENIED, ids=[f"{v}-{r}" for v, r in DENIED])
def test_and_nothing_more(chart: None, verb: str, resource: str) -> None:
    assert not can(verb, resource, "default"), f"{SA} may {verb} {resource}, which the operator never does"


def test_a_child_someone_else_made_is_never_adopted(operator: Operator, ns: str, wait_until: Any) -> None:
    doc = example("llamacpp-cpu-gguf.yaml", ns)
    name = doc["metadata"]["name"]
    kubectl("create", "service", "clusterip", name, "-n", ns, "--tcp=9999:9999")
    before = get_json("service", name, "-n", ns)
    apply(doc)

    def conflict() -> dict[str, Any] | None:
        conds = {c["type"]: c for c in (ib(ns, name).get("status") or {}).get("conditions") or []}
        rec = conds.get("Reconciled")
        return rec if rec and rec["reason"] == "ChildConflict" else None

    cond = wait_until("the Reconciled condition names the conflict", conflict, timeout=30)
    assert cond["status"] == "False"
    assert (
        f"Service {ns}/{name} already exists and was not created by this InferenceBackend (managed by "
        "kubectl-create)" in cond["message"]
    )
    events = kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}")
    assert "ChildConflict" in events
    after = get_json("service", name, "-n", ns, "--show-managed-fields")
    assert not after["metadata"].get("ownerReferences"), "no ownerReference: garbage collection will not delete it"
    assert after["spec"]["ports"] == before["spec"]["ports"] and after["spec"]["selector"] == before["spec"].get(
        "selector", after["spec"]["selector"]
    )
    assert all(f["manager"] != "inference-backend" for f in after["metadata"]["managedFields"])
    kubectl("delete", "ib", name, "-n", ns)
    wait_until(
        "the backend's own Deployment collected",
        lambda: not kubectl("get", "deployment", "-n", ns, "-o", "name").strip(),
        timeout=60,
    )
    assert get_json("service", name, "-n", ns)["metadata"]["uid"] == before["metadata"]["uid"], "the Service stays"


def test_the_operator_was_never_refused(operator: Operator, e2e_dir: Path) -> None:
    """Runs after the other operator tests of this session (files run in order): no RBAC refusal in the operator's
    log (the API server's `User "..." cannot VERB resource "..."`, kopf's "Not enough permissions"). Other 403s,
    such as writes into a namespace being deleted, are not RBAC's."""
    log = operator.log.read_text(errors="replace") if operator.log.exists() else ""
    assert log, f"no operator log at {operator.log}"
    refused = [ln for ln in log.splitlines() if RBAC_REFUSAL.search(ln) or "Not enough permissions" in ln]
    assert not refused, refused[:3]
