"""Every failure is visible and bounded (issue 14 item 3): an exception while planning or applying becomes the
Reconciled condition and a Warning Event naming the object and the API error, retried with the key's capped,
jittered backoff; the echo of the failure's own status write does not retry at once (no hot loop); one failing
backend never holds up another. The API server's refusal is real in e2e/test_failures.py; here the writer raises
the ApiError lightkube raises for the apiserver's Status body."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2 as httpx
import pytest
from ib_testkit.factories import node
from ib_testkit.writer import FakeWriter
from inference_backend import status
from inference_backend.controller.config import Config
from inference_backend.controller.execute import ReconcileFailure
from inference_backend.controller.kube import describe_error
from inference_backend.controller.reconcile import reconcile
from inference_backend.controller.state import Indexes, OperatorState
from inference_backend.controller.world import World
from inference_backend.facts import group_nodes
from lightkube.core.exceptions import ApiError

REFUSED = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "code": 422,
    "reason": "Invalid",
    "message": 'Deployment.apps "chat" is invalid: spec.template.spec.containers[0].image: Required value',
    "details": {
        "name": "chat",
        "group": "apps",
        "kind": "Deployment",
        "causes": [
            {
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": "spec.template.spec.containers[0].image",
            },
            {
                "reason": "FieldValueInvalid",
                "message": "must be no more than 63 characters",
                "field": "metadata.labels",
            },
        ],
    },
}


def api_error(body: dict[str, Any]) -> ApiError:
    request = httpx.Request("PATCH", "https://127.0.0.1/apis/apps/v1/namespaces/ns/deployments/chat")
    return ApiError(request=request, response=httpx.Response(body["code"], json=body, request=request))


def backend(name: str, generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "generation": generation},
        "spec": {
            "model": {"uri": "hf://org/m", "parameters": "1B", "format": "gguf"},
            "hardware": {"accelerator": "cpu"},
        },
        "status": {},
    }


def test_an_api_refusal_names_the_code_the_reason_and_every_field() -> None:
    text = describe_error(api_error(REFUSED))
    assert text.startswith('422 Invalid: Deployment.apps "chat" is invalid')
    assert "metadata.labels: must be no more than 63 characters" in text
    assert text.count("spec.template.spec.containers[0].image") == 1, "a field the message names is not repeated"
    assert describe_error(httpx.ConnectError("connection refused")).startswith("the API server did not answer")


def test_a_refused_apply_fails_the_reconcile_naming_the_child() -> None:
    w = World(group_nodes([node("cpu-a")]), {}, {})
    with pytest.raises(ReconcileFailure) as info:
        refused = FakeWriter().fail(api_error(REFUSED), call="apply", name="chat")
        asyncio.run(reconcile(backend("chat"), w, refused, "test"))
    assert info.value.reason == "ApplyFailed"
    assert info.value.message.startswith("applying Deployment chat: 422 Invalid")


def test_the_failure_status_keeps_what_serves_and_is_stable_across_retries() -> None:
    ready = status.build(
        status.Input(
            generation=1,
            decision=None,
            error=None,
            workload=status.Observed(1, 1, True),
            endpoint="e",
            previous=None,
            now="t0",
        )
    )
    ready["phase"] = "Ready"
    failed = status.failed(ready, generation=2, reason="ApplyFailed", message="applying Deployment x: 500", now="t1")
    conds = {c["type"]: c for c in failed["conditions"]}
    assert failed["phase"] == "Degraded" and failed["observedGeneration"] == 1, "the rest describes what serves"
    assert conds["Reconciled"]["status"] == "False" and conds["Reconciled"]["reason"] == "ApplyFailed"
    assert conds["Reconciled"]["observedGeneration"] == 2 and conds["Reconciled"]["lastTransitionTime"] == "t1"
    again = status.failed(failed, generation=2, reason="ApplyFailed", message="applying Deployment x: 500", now="t9")
    assert not status.changed(failed, again), "the same failure retried writes nothing"
    assert status.failed({}, generation=1, reason="PlanningFailed", message="m", now="t")["phase"] == "Failed"


def _state(bodies: dict[tuple[str, str], list[dict[str, Any]]], writer: FakeWriter) -> OperatorState:
    st = OperatorState(
        Indexes(models={}, deployments={}, services={}, pdbs={}, backends=bodies), Config(debounce=0.05), writer=writer
    )
    st.nodes.ready.set()
    st.indexed.set()
    st.nodes.update(node("cpu-a"))
    return st


def test_one_failing_backend_is_retried_with_backoff_visibly_and_never_holds_up_another() -> None:
    refused = api_error(
        {**REFUSED, "code": 500, "reason": "InternalError", "message": "etcdserver: timeout", "details": {}}
    )
    writer = FakeWriter().fail(refused, call="apply", name="chat")
    bodies = {("ns", "chat"): [backend("chat")], ("ns", "other"): [backend("other")]}

    async def main() -> OperatorState:
        st = _state(bodies, writer)
        await st.process(("ns", "chat"), "listing")
        await st.process(("ns", "other"), "listing")
        # our own failure status comes back as a MODIFIED event: it must not retry at once
        bodies[("ns", "chat")] = [{**backend("chat"), "status": writer.statuses[-1][2]}]
        await st.process(("ns", "chat"), "modified")
        await st.process(("ns", "chat"), "modified")
        return st

    st = asyncio.run(main())
    assert st.queue.backoff.retries(("ns", "chat")) == 1, "one attempt failed; the echoes did not retry"
    assert st.queue.delayed == 1, "the retry waits for its backoff"
    chat = [s for ns, n, s in writer.statuses if n == "chat"]
    assert len(chat) == 1, "the failure is written once"
    cond = next(c for c in chat[0]["conditions"] if c["type"] == "Reconciled")
    assert cond["reason"] == "ApplyFailed" and "500 InternalError: etcdserver: timeout" in cond["message"]
    assert [(e.name, e.reason) for e in writer.events if e.name == "chat"] == [("chat", "ApplyFailed")]
    assert "retry 1 in" in writer.events[0].message
    assert [o["metadata"]["name"] for o in writer.applied] == ["other", "other"], "the other backend is applied"
    other = [s for ns, n, s in writer.statuses if n == "other"][-1]
    assert {c["type"]: c["status"] for c in other["conditions"]}["Reconciled"] == "True"


def test_a_spec_change_of_a_failing_backend_is_reconciled_at_once() -> None:
    writer = FakeWriter().fail(api_error(REFUSED), call="apply", name="chat")
    bodies = {("ns", "chat"): [backend("chat")]}

    async def main() -> OperatorState:
        st = _state(bodies, writer)
        await st.process(("ns", "chat"), "listing")
        bodies[("ns", "chat")] = [backend("chat", generation=2)]
        writer.failures.clear()
        await st.process(("ns", "chat"), "modified")
        return st

    st = asyncio.run(main())
    assert ("ns", "chat") not in st.failing and st.queue.backoff.retries(("ns", "chat")) == 0
    cond = next(c for c in writer.statuses[-1][2]["conditions"] if c["type"] == "Reconciled")
    assert cond["status"] == "True"


def test_a_child_someone_else_made_is_never_adopted_and_the_condition_says_whose_it_is() -> None:
    writer = FakeWriter().squat(
        "Service",
        "chat",
        "Service ns/chat already exists and was not created by this InferenceBackend (managed by kubectl-create)",
    )
    w = World(group_nodes([node("cpu-a")]), {}, {})
    with pytest.raises(ReconcileFailure) as info:
        asyncio.run(reconcile(backend("chat"), w, writer, "test"))
    assert info.value.reason == "ChildConflict"
    assert info.value.message.startswith(
        "Service ns/chat already exists and was not created by this InferenceBackend "
        "(managed by kubectl-create): it is left untouched"
    )
    assert all(o["kind"] != "Service" for o in writer.applied), "never applied over the other's Service"
