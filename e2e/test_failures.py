"""Every failure is visible and bounded (issue 14 item 3), on the real control plane: the API server refuses one
backend's Deployment (a ValidatingAdmissionPolicy, the apiserver's own CEL admission), and the status, the Events
and the other backends show what an operator must do about it.

Injected 5xx and 409 answers, kill -9 and control-plane restarts are e2e/test_faults.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ib_testkit.cluster import Operator, apply, example, ib, kubectl, wait_phase

POLICY = "ib-e2e-refuse-deployment"
REFUSAL = "e2e policy: a Deployment named refused is not admitted"


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


@pytest.fixture
def refusing(ns: str, wait_until: Any) -> Iterator[None]:
    """The API server refuses to create or update a Deployment named ``refused`` in ``ns``."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["deployments"],
                    }
                ]
            },
            "validations": [{"expression": "object.metadata.name != 'refused'", "message": REFUSAL}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
        },
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([policy, binding]))
    probe = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "refused", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }

    def enforced() -> bool:  # the API server's policy informer takes a moment to see a new binding
        out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(probe), check=False)
        return REFUSAL in out

    wait_until("the policy enforced", enforced, timeout=30)
    yield
    kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", POLICY, "--ignore-not-found")


def test_a_refused_child_is_a_condition_and_an_event_retried_with_backoff(
    operator: Operator, ns: str, refusing: None, wait_until: Any
) -> None:
    """The refused backend says which object the API server refused and why (Reconciled False, ApplyFailed, an
    Event naming the attempt and the next retry); the other backend applied with it becomes Ready; once the
    policy is gone the backoff's retry applies it, without any change by the user."""
    refused = example("llamacpp-cpu-gguf.yaml", ns)
    refused["metadata"]["name"] = "refused"
    other = example("pytorch-research.yaml", ns)
    apply(refused)
    apply(other)

    def failed() -> dict[str, Any] | None:
        obj = ib(ns, "refused")
        return obj if condition(obj, "Reconciled").get("reason") == "ApplyFailed" else None

    obj = wait_until("refused's Reconciled condition says ApplyFailed", failed, timeout=60)
    message = condition(obj, "Reconciled")["message"]
    assert message.startswith("applying Deployment refused: 422 Invalid") and REFUSAL in message, message
    assert condition(obj, "Reconciled")["status"] == "False" and obj["status"]["phase"] == "Failed"
    listed = kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=refused", "-o", "json")
    events = [(e["reason"], e["message"]) for e in json.loads(listed)["items"]]
    assert any(r == "ApplyFailed" and REFUSAL in m and "retry 1 in" in m for r, m in events), events
    wait_phase(wait_until, ns, "research-gpt", "Ready")
    assert condition(ib(ns, "research-gpt"), "Reconciled")["status"] == "True"
    retries = operator.log.read_text().count(f"reconcile of {ns}/refused failed")
    assert 1 <= retries <= 6, f"{retries} attempts in the first seconds: the retries must back off"

    kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", POLICY)
    ready = wait_phase(wait_until, ns, "refused", "Ready", timeout=120)  # the backoff reaches 40 s by the 4th try
    assert condition(ready, "Reconciled")["status"] == "True"
    assert operator.alive()
