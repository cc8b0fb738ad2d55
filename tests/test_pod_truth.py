"""Pod-level truth: the slim pod summaries the pods index keeps, the worst problem rolled into the Ready condition,
the dedup that keeps readiness churn from costing reconciles, and one Warning Event per change."""

from __future__ import annotations

import asyncio
from typing import Any

from ib_testkit.writer import FakeWriter
from inference_backend.controller.events import placement
from inference_backend.controller.reconcile import Outcome
from inference_backend.controller.state import Indexes, OperatorState
from inference_backend.pods import MAX_MESSAGE, MAX_PROBLEMS, PodProblem, PodSummary, owner, summarize, worst
from inference_backend.status import Observed

from tests.test_status import GOOD, conds, make

PVC = 'persistentvolumeclaim "missing" not found'


def pod(name: str = "chat-5d8f9-abcde", status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {"pod-template-hash": "5d8f9", "app.kubernetes.io/instance": "chat"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "chat-5d8f9"}],
        },
        "spec": {"containers": [{"name": "engine", "image": "vllm:x"}], **spec},
        "status": status or {"phase": "Pending"},
    }


def unschedulable(message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
    }


def container(
    waiting: str | None = None,
    message: str = "",
    last: dict[str, Any] | None = None,
    ready: bool = False,
    restarts: int = 0,
    name: str = "engine",
) -> dict[str, Any]:
    state = {"waiting": {"reason": waiting, "message": message}} if waiting else {"running": {}}
    cs: dict[str, Any] = {"name": name, "image": "vllm:x", "ready": ready, "restartCount": restarts, "state": state}
    if last:
        cs["lastState"] = {"terminated": last}
    return cs


def running(*statuses: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {
        "phase": "Running" if not init else "Pending",
        "containerStatuses": list(statuses),
        "initContainerStatuses": list(init),
    }


def problem(status: dict[str, Any], **spec: Any) -> PodProblem | None:
    summary = summarize(pod(status=status, **spec))
    assert summary is not None
    return worst([summary])


def test_owner_is_the_deployment_of_the_replicaset_else_the_instance_label() -> None:
    assert owner(pod()) == ("ns", "chat")
    dotted = pod()
    dotted["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "llama.chat-5d8f9"}]
    assert owner(dotted) == ("ns", "llama.chat")
    orphan = pod()
    del orphan["metadata"]["ownerReferences"]
    assert owner(orphan) == ("ns", "chat")


def test_each_reason_is_rolled_up_with_its_message() -> None:
    p = problem(unschedulable(f"0/7 nodes are available: {PVC}. preemption: 0/7 nodes are available"))
    assert p is not None and p.reason == "Unschedulable" and PVC in p.message and "chat-5d8f9-abcde" in p.message
    p = problem(unschedulable("0/3 nodes are available: 3 Insufficient nvidia.com/gpu."))
    assert p is not None and p.reason == "Unschedulable" and "Insufficient nvidia.com/gpu" in p.message
    for waiting in ("ErrImagePull", "ImagePullBackOff"):  # alternating on every pull: one stable problem
        p = problem(running(container(waiting, f"{waiting} varies")))
        assert p == PodProblem("ImagePullBackOff", 'pod chat-5d8f9-abcde: container engine: cannot pull image "vllm:x"')
    p = problem(
        running(
            container(
                "CrashLoopBackOff",
                "back-off 40s restarting failed container",
                last={"exitCode": 1, "reason": "Error"},
                restarts=3,
            )
        )
    )
    assert p is not None and p.reason == "CrashLoopBackOff" and "exit code 1, Error" in p.message
    assert "back-off 40s" not in p.message, "the kubelet's growing back-off would change the status every restart"
    limits = {"containers": [{"name": "engine", "image": "vllm:x", "resources": {"limits": {"memory": "16Gi"}}}]}
    p = problem(
        running(container("CrashLoopBackOff", last={"exitCode": 137, "reason": "OOMKilled"}, restarts=2)), **limits
    )
    assert p is not None and p.reason == "OOMKilled" and "exit code 137" in p.message and "16Gi" in p.message
    p = problem(
        running(
            container(), init=(container("CreateContainerConfigError", 'secret "hf-token" not found', name="fetch"),)
        )
    )
    assert p is not None and p.reason == "CreateContainerConfigError"
    assert 'init container fetch: secret "hf-token" not found' in p.message
    assert problem({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}) == PodProblem(
        "Evicted", "pod chat-5d8f9-abcde: low on memory"
    )


def test_healthy_starting_and_deleted_pods_have_no_problem() -> None:
    assert problem(running(container(ready=True))) is None
    assert problem(running(container("ContainerCreating"))) is None
    assert problem({"phase": "Pending"}) is None
    recovered = running(container(ready=True, restarts=2, last={"exitCode": 137, "reason": "OOMKilled"}))
    assert problem(recovered) is None, "a container ready again after an OOM kill is healthy"
    gone = pod(status=unschedulable("0/1 nodes"))
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert summarize(gone) is None


def test_messages_and_problems_per_pod_are_bounded() -> None:
    inits = tuple(container("CreateContainerConfigError", "x" * 100_000, name=f"i{i}") for i in range(20))
    summary = summarize(pod(status={**unschedulable("y" * 100_000), **running(init=inits)}))
    assert summary is not None and len(summary.problems) == MAX_PROBLEMS
    assert all(len(p.message) <= MAX_MESSAGE for p in summary.problems)
    assert summary.problems[0].reason == "Unschedulable", "the worst first"
    st = make(observed=Observed(1, 0, False), pod_problem=worst([summary]))
    assert len(conds(st)["Ready"]["message"]) <= 1024


def test_worst_over_pods_is_deterministic_and_counts_pods_sharing_it() -> None:
    crash = PodSummary("a", "Running", (PodProblem("CrashLoopBackOff", "container engine keeps exiting"),))
    stuck = [PodSummary(n, "Pending", (PodProblem("Unschedulable", "0/3 nodes are available"),)) for n in "cb"]
    p = worst([crash, *stuck])
    assert p == PodProblem("Unschedulable", "pod b (and 1 more pod(s)): 0/3 nodes are available")
    assert worst(reversed([crash, *stuck])) == p
    assert worst([PodSummary("ok", "Running")]) is None


def test_the_ready_condition_carries_the_worst_pod_problem_while_not_ready() -> None:
    p = PodProblem("Unschedulable", f"pod chat-x: 0/7 nodes are available: {PVC}")
    st = make(observed=Observed(1, 0, False), pod_problem=p)
    ready = conds(st)["Ready"]
    assert st["phase"] == "Deploying" and ready["status"] == "False" and ready["reason"] == "Unschedulable"
    assert ready["message"] == f"0/1 replicas ready; pod chat-x: 0/7 nodes are available: {PVC}"
    late = make(observed=Observed(1, 0, False, progress_deadline_exceeded=True), pod_problem=p)
    assert late["phase"] == "Degraded" and conds(late)["Ready"]["reason"] == "Unschedulable"
    assert "exceeded its deadline" in conds(late)["Ready"]["message"]
    done = make(observed=Observed(1, 1, True), pod_problem=p)
    assert done["phase"] == "Ready" and conds(done)["Ready"]["reason"] == "Available", "Ready wins over old pods"


def _state() -> OperatorState:
    return OperatorState(Indexes(models={}, deployments={}, services={}, pdbs={}, backends={("ns", "chat"): []}))


def test_pod_events_enqueue_the_owner_only_when_the_problems_change() -> None:
    st = _state()
    healthy = pod(status=running(container(ready=True)))
    assert st.pod_event(healthy, deleted=False) is None, "a healthy pod costs no reconcile"
    flipped = pod(status=running(container(ready=False)))
    assert st.pod_event(flipped, deleted=False) is None, "readiness churn costs no reconcile"
    stuck = pod(status=unschedulable("0/3 nodes are available: 3 Insufficient nvidia.com/gpu."))
    assert st.pod_event(stuck, deleted=False) == ("ns", "chat")
    assert st.pod_event(stuck, deleted=False) is None, "the same problem again: nothing to do"
    pulling = pod(status=running(container("ErrImagePull", "a")))
    assert st.pod_event(pulling, deleted=False) == ("ns", "chat")
    assert st.pod_event(pod(status=running(container("ImagePullBackOff", "b"))), deleted=False) is None
    assert st.pod_event(pulling, deleted=True) == ("ns", "chat"), "its problem leaves with it"
    assert st.pod_event(pulling, deleted=True) is None
    other = pod(status=unschedulable("x"))
    other["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "gone-5d8f9"}]
    assert st.pod_event(other, deleted=False) is None, "no such backend"


def test_a_warning_event_is_posted_once_per_change_of_the_pod_problem() -> None:
    st = _state()
    writer = FakeWriter()
    st.writer = writer
    body = {"metadata": {"namespace": "ns", "name": "chat", "uid": "u"}}

    def outcome(p: PodProblem | None, written: bool = True) -> Outcome:
        return Outcome(GOOD, None, 0, written, make(observed=Observed(1, 0, False), pod_problem=p), pod_problem=p)

    first, second = PodProblem("Unschedulable", "pod a: 0/3"), PodProblem("ImagePullBackOff", "pod a: image")
    for o in (
        outcome(first),
        outcome(first),
        outcome(first, written=False),
        outcome(second),
        outcome(None),
        outcome(second),
    ):
        asyncio.run(st._report(("ns", "chat"), body, o, placement(o.status)))
    assert [(e.type, e.reason) for e in writer.events] == [
        ("Warning", "Unschedulable"),
        ("Warning", "ImagePullBackOff"),
        ("Warning", "ImagePullBackOff"),
    ]
    st2, quiet = _state(), FakeWriter()
    st2.writer = quiet
    asyncio.run(st2._report(("ns", "chat"), body, outcome(first, written=False), ()))
    assert quiet.events == [], "after a restart, a problem the status already shows is not posted again"
