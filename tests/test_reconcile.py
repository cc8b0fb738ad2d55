"""The reconcile service with a recording writer: what it applies and when it writes nothing.

The real API path (server-side apply, status subresource, kopf indexes) is exercised by e2e/test_operator.py on
a real control plane; this checks the level-triggered logic fast.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from ib_testkit.factories import MODELS, backend, node
from ib_testkit.writer import FakeWriter
from inference_backend.capacity import GpuLedger
from inference_backend.controller.reconcile import reconcile
from inference_backend.controller.world import Child, Recent, World
from inference_backend.facts import group_nodes
from inference_backend.vocabulary import APPLIED_HASH


def body(spec: dict[str, Any], generation: int = 1, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return backend("chat", spec, status, generation=generation, uid="u-1")


def world(children: dict[tuple[str, str, str], Child] | None = None) -> World:
    classes = group_nodes([node("l4-a", "l4", 1), node("cpu-a")])
    return World(classes, {"ns": list(MODELS.items())}, children or {})


def run(b: dict[str, Any], w: World, rec: FakeWriter) -> Any:
    return asyncio.run(reconcile(b, w, rec, "test"))


def test_first_reconcile_applies_children_with_owner_and_hash() -> None:
    rec = FakeWriter()
    out = run(body({"model": {"modelRef": "llama-3-1-8b"}}), world(), rec)
    kinds = [o["kind"] for o in rec.applied]
    assert kinds == ["Deployment", "Service"]
    for obj in rec.applied:
        ref = obj["metadata"]["ownerReferences"][0]
        assert ref["kind"] == "InferenceBackend" and ref["uid"] == "u-1" and ref["controller"] is True
        assert obj["metadata"]["annotations"][APPLIED_HASH]
    assert out.status["phase"] == "Deploying" and out.status["backend"] == "vllm"
    assert len(rec.statuses) == 1


def test_second_reconcile_with_same_state_writes_nothing() -> None:
    rec = FakeWriter()
    first = run(body({"model": {"modelRef": "llama-3-1-8b"}}), world(), rec)
    children = {
        ("ns", o["metadata"]["name"], o["kind"]): Child(o["metadata"]["annotations"][APPLIED_HASH], {})
        for o in rec.applied
    }
    assert first.status["ready"] == "0/1", "a Deployment just applied starts with none ready"
    again = FakeWriter()
    out = run(body({"model": {"modelRef": "llama-3-1-8b"}}, status=first.status), world(children), again)
    assert again.writes == 0 and out.applied == 0 and not out.status_written


def test_invalid_spec_is_reported_not_raised() -> None:
    rec = FakeWriter()
    out = run(body({"model": {"uri": "hf://x/y"}}), world(), rec)
    assert rec.applied == []
    assert out.status["phase"] == "Failed"
    assert "spec.model.parameters" in out.status["conditions"][0]["message"]
    rec = FakeWriter()
    out = run(body({"model": {"uri": "hf://x/y", "parameters": "8B"}, "kvCache": {"memoryFraction": 3}}), world(), rec)
    assert out.status["phase"] == "Failed" and "kvCache.memoryFraction" in out.status["conditions"][0]["message"]


def test_unsatisfiable_update_keeps_the_deployment() -> None:
    rec = FakeWriter()
    first = run(body({"model": {"modelRef": "llama-3-1-8b"}}), world(), rec)
    dep = next(o for o in rec.applied if o["kind"] == "Deployment")
    live = {
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]},
    }
    children = {("ns", "chat", "Deployment"): Child(dep["metadata"]["annotations"][APPLIED_HASH], live)}
    again = FakeWriter()
    out = run(body({"model": {"modelRef": "llama-3-1-70b"}}, generation=2, status=first.status), world(children), again)
    assert again.applied == [], "nothing is applied for a spec that cannot be served"
    assert out.status["phase"] == "Degraded" and out.status["backend"] == "vllm"
    assert out.status["readyReplicas"] == 1


def test_plan_is_reused_while_its_inputs_are_unchanged() -> None:
    """With versions (as the operator passes them), a reconcile triggered by a child's status reuses the last
    selection and rendering; a new node or Model version, or a new generation, selects again."""
    rec, recent = FakeWriter(), Recent()
    b = body({"model": {"modelRef": "llama-3-1-8b"}})
    w = world()
    versioned = World(w.node_classes, w.models, w.children, version=(1, 1))
    asyncio.run(reconcile(b, versioned, rec, "test", recent))
    # the second sees its own status (the placement now serving is kept): one more selection, then reuse
    asyncio.run(reconcile(b, versioned, rec, "test", recent))
    first = recent.plans[("ns", "chat")]
    assert first.key[4] is not None
    asyncio.run(reconcile(b, versioned, rec, "test", recent))
    assert recent.plans[("ns", "chat")] is first
    moved = World(w.node_classes, w.models, w.children, version=(2, 1))
    asyncio.run(reconcile(b, moved, rec, "test", recent))
    assert recent.plans[("ns", "chat")] is not first
    assert recent.plans[("ns", "chat")].manifests == first.manifests
    newer = body({"model": {"modelRef": "llama-3-2-1b"}}, generation=2)
    asyncio.run(reconcile(newer, moved, rec, "test", recent))
    assert recent.plans[("ns", "chat")].decision.backend == "vllm"
    assert recent.plans[("ns", "chat")].manifests != first.manifests


def test_no_plan_is_kept_without_versions() -> None:
    recent = Recent()
    asyncio.run(reconcile(body({"model": {"modelRef": "llama-3-1-8b"}}), world(), FakeWriter(), "test", recent))
    assert recent.plans == {}


def pool(product: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("nvidia.com/gpu", (("nvidia.com/gpu.product", product),))


def test_child_gpus_read_the_pool_from_any_identifying_label_and_device_resource() -> None:
    """A Deployment placed by instance type (no GFD label) or on AMD still counts: what it holds is its pool."""

    def dep(selector: dict[str, str], limits: dict[str, str], replicas: int = 1) -> Child:
        pod = {"nodeSelector": selector, "containers": [{"resources": {"limits": limits}}]}
        return Child("h", {"spec": {"replicas": replicas, "template": {"spec": pod}}})

    itype = dep({"node.kubernetes.io/instance-type": "g5.2xlarge", "zone": "a"}, {"nvidia.com/gpu": "1", "cpu": "4"}, 2)
    assert itype.gpus == (("nvidia.com/gpu", (("node.kubernetes.io/instance-type", "g5.2xlarge"),)), 2)
    amd = dep({"amd.com/gpu.product-name": "AMD_Instinct_MI300X"}, {"amd.com/gpu": "8"})
    assert amd.gpus == (("amd.com/gpu", (("amd.com/gpu.product-name", "AMD_Instinct_MI300X"),)), 8)
    mig = dep({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, {"nvidia.com/mig-1g.5gb": "1"}, 3)
    assert mig.gpus == (("nvidia.com/mig-1g.5gb", (("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB"),)), 3)
    assert dep({}, {"cpu": "2"}).gpus is None


def test_gpus_in_use_sums_the_other_deployments() -> None:
    def dep(product: str | None, gpus: int, replicas: int) -> Child:
        selector = {"nvidia.com/gpu.product": product} if product else {}
        pod = {"nodeSelector": selector, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
        return Child("h", {"spec": {"replicas": replicas, "template": {"spec": pod}}})

    children = {
        ("ns", "a", "Deployment"): dep("NVIDIA-L4", 2, 2),
        ("ns", "b", "Deployment"): dep("NVIDIA-L4", 1, 1),
        ("ns", "c", "Deployment"): dep(None, 0, 3),
        ("ns", "a", "Service"): Child("h", {}),
        ("ns", "self", "Deployment"): dep("NVIDIA-H100-80GB-HBM3", 8, 1),
    }
    w = World({}, {}, children)
    l4, h100 = (pool("NVIDIA-L4"), pool("NVIDIA-H100-80GB-HBM3"))
    assert w.gpus_in_use(("ns", "self")) == {l4: 5}
    assert w.gpus_in_use(("ns", "b")) == {l4: 4, h100: 8}


def test_gpu_ledger_equals_the_sum_over_children_through_any_updates() -> None:
    """The running totals the handlers keep give what a pass over every Deployment gives, after any sequence of
    Deployments appearing, changing (product, GPUs, replicas, to none) and leaving."""
    rng = random.Random(7)
    products = ["NVIDIA-L4", "NVIDIA-A10G", "NVIDIA-H100-80GB-HBM3", None]
    children: dict[tuple[str, str, str], Child] = {}
    ledger = GpuLedger()
    for _ in range(2000):
        name = f"b{rng.randrange(12)}"
        key = ("ns", name, "Deployment")
        if rng.random() < 0.2:
            children.pop(key, None)
            ledger.set(("ns", name), None)
        else:
            product = rng.choice(products)
            selector = {"nvidia.com/gpu.product": product} if product else {}
            limits = {"nvidia.com/gpu": str(rng.randrange(3))} if product else {}
            pod = {"nodeSelector": selector, "containers": [{"resources": {"limits": limits}}]}
            children[key] = Child("h", {"spec": {"replicas": rng.randrange(3), "template": {"spec": pod}}})
            ledger.set(("ns", name), children[key].gpus)
        scan, kept = World({}, {}, children), World({}, {}, children, ledger=ledger)
        for other in ("b0", "b5", "b11", "absent"):
            assert kept.gpus_in_use(("ns", other)) == scan.gpus_in_use(("ns", other))


def test_child_signature_moves_with_readiness_not_with_bookkeeping() -> None:
    from inference_backend.controller.world import child_signature, slim_child

    pod = {
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
        "containers": [{"args": ["--long"] * 50, "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}}}],
    }
    dep = {
        "kind": "Deployment",
        "spec": {"replicas": 2, "template": {"spec": pod}},
        "status": {"observedGeneration": 1, "updatedReplicas": 0, "readyReplicas": 0},
    }
    first = child_signature(dep)
    dep["status"] = {**dep["status"], "observedGeneration": 2, "updatedReplicas": 2}
    assert child_signature(dep) == first
    dep["status"] = {**dep["status"], "readyReplicas": 1}
    assert child_signature(dep) != first
    slim = slim_child("Deployment", dep["spec"], dep["status"])
    assert "args" not in str(slim)
    assert Child("h", slim).gpus == Child("h", dep).gpus == (pool("NVIDIA-L4"), 2)
    assert child_signature({"kind": "Service", "spec": {"ports": []}}) == ()
