"""Capacity-safe placement: GPUs reserved at decision time, never promised twice (concurrent reconciles included),
MIG slices counted per profile, a backend that cannot be placed now waits with the numbers and starts once GPUs
are released. The reconcile runs with a recording writer; e2e/test_operator.py runs the same on a real cluster."""

from __future__ import annotations

import asyncio
from typing import Any

from ib_testkit.factories import MODELS, backend, node
from ib_testkit.writer import FakeWriter
from inference_backend.capacity import GpuLedger
from inference_backend.controller.reconcile import reconcile
from inference_backend.controller.state import Indexes, OperatorState
from inference_backend.controller.world import Child, Recent, World, slim_child
from inference_backend.facts import group_nodes

SPEC = {"model": {"modelRef": "llama-3-1-8b"}, "hardware": {"accelerator": "gpu"}}


def gfd(product: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("nvidia.com/gpu", (("nvidia.com/gpu.product", product),))


def body(name: str, spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return backend(name, spec or SPEC, status)


def world(nodes: list[dict[str, Any]], ledger: GpuLedger, children: dict[Any, Child] | None = None) -> World:
    classes = group_nodes(nodes)
    return World(classes, {"ns": list(MODELS.items())}, children or {}, version=(1, 1), ledger=ledger)


def ready(st: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in st["conditions"] if c["type"] == "Ready")


def deployed(rec: FakeWriter) -> list[str]:
    return sorted(o["metadata"]["name"] for o in rec.applied if o["kind"] == "Deployment")


def test_three_1gpu_backends_reconciled_concurrently_on_1_free_gpu_place_1_and_2_wait_naming_the_holder() -> None:
    ledger, rec, recent = GpuLedger(), FakeWriter(latency=0.01), Recent()
    w = world([node("a10g-a", "a10g", 1), node("cpu-a")], ledger)

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(reconcile(body(n), w, rec, "test", recent) for n in "abc")))

    outcomes = asyncio.run(main())
    assert deployed(rec) == ["a"]
    assert [o.waiting is not None for o in outcomes] == [False, True, True]
    assert ledger.excluding(("ns", "zzz")) == {gfd("NVIDIA-A10G"): 1}
    for name in "bc":
        st = rec.status(name)
        assert st["phase"] == "Pending" and st["backend"] == "vllm"
        cond = ready(st)
        assert cond["reason"] == "InsufficientCapacity"
        assert (
            "needs 1 NVIDIA-A10G (nvidia.com/gpu; 1 replica(s) x 1); 1 allocatable on the nodes it may use "
            "(nvidia.com/gpu.product=NVIDIA-A10G)"
        ) in cond["message"]
        assert "0 free, 1 reserved by other InferenceBackends: ns/a (1)" in cond["message"]


def test_a_released_reservation_lets_a_waiting_backend_start() -> None:
    ledger, rec, recent = GpuLedger(), FakeWriter(latency=0.01), Recent()
    w = world([node("a10g-a", "a10g", 1)], ledger)
    asyncio.run(reconcile(body("a"), w, rec, "test", recent))
    out = asyncio.run(reconcile(body("b"), w, rec, "test", recent))
    assert out.waiting is not None and deployed(rec) == ["a"]
    assert ledger.set(("ns", "a"), None) is True  # a deleted: its GPU is released
    out = asyncio.run(reconcile(body("b"), w, rec, "test", recent))
    assert out.waiting is None and deployed(rec) == ["a", "b"]
    assert ready(rec.status("b"))["reason"] == "Deploying"


def test_2_replicas_of_1_gpu_need_2_gpus_of_the_2_on_two_nodes_and_a_third_backend_waits() -> None:
    ledger, rec, recent = GpuLedger(), FakeWriter(latency=0.01), Recent()
    w = world([node("l4-a", "l4", 1), node("l4-b", "l4", 1)], ledger)
    two = {**SPEC, "replicas": 2}
    first = asyncio.run(reconcile(body("a", two), w, rec, "test", recent))
    second = asyncio.run(reconcile(body("b"), w, rec, "test", recent))
    assert first.waiting is None and second.waiting is not None
    assert second.waiting.needed == 1 and second.waiting.allocatable == 2 and second.waiting.reserved == 2


def test_mig_slices_are_counted_per_profile_7_slices_of_1g_10gb_hold_7_small_backends_not_8() -> None:
    ledger, rec, recent = GpuLedger(), FakeWriter(latency=0.01), Recent()
    w = world([node("a100-mig", "a100-40", 1, mig="single")], ledger)
    small = {"model": {"modelRef": "llama-3-2-1b"}, "hardware": {"accelerator": "gpu"}}
    outs = [asyncio.run(reconcile(body(f"s{i}", small), w, rec, "test", recent)) for i in range(8)]
    placed = [o for o in outs if o.waiting is None]
    assert len(placed) == 7
    assert outs[-1].waiting is not None
    assert outs[-1].waiting.product.endswith("MIG-1g.10gb") and outs[-1].waiting.allocatable == 7


def test_scaling_up_beyond_free_gpus_keeps_the_serving_deployment_and_its_reservation() -> None:
    ledger, rec, recent = GpuLedger(), FakeWriter(latency=0.01), Recent()
    nodes = [node("l4-a", "l4", 1), node("l4-b", "l4", 1)]
    w = world(nodes, ledger)
    asyncio.run(reconcile(body("a"), w, rec, "test", recent))
    asyncio.run(reconcile(body("b"), w, rec, "test", recent))
    dep = Child(
        "h",
        {
            "spec": {"replicas": 1},
            "status": {"readyReplicas": 1, "conditions": [{"type": "Available", "status": "True"}]},
        },
    )
    w = world(nodes, ledger, {("ns", "a", "Deployment"): dep})
    before = len(rec.applied)
    out = asyncio.run(reconcile(body("a", {**SPEC, "replicas": 2}, rec.status("a")), w, rec, "test", recent))
    assert out.waiting is not None and len(rec.applied) == before  # nothing applied: 1 replica keeps serving
    assert ledger.held(("ns", "a")) == (gfd("NVIDIA-L4"), 1)
    st = rec.status("a")
    assert st["phase"] == "Degraded" and ready(st)["status"] == "True"
    assert ready(st)["message"].endswith("the previous Deployment keeps serving")


def test_cpu_placements_reserve_nothing() -> None:
    ledger, rec, recent = GpuLedger(), FakeWriter(latency=0.01), Recent()
    w = world([node("cpu-a")], ledger)
    gguf = {"model": {"modelRef": "llama-3-1-8b"}, "hardware": {"accelerator": "cpu"}}
    out = asyncio.run(reconcile(body("a", gguf), w, rec, "test", recent))
    assert out.waiting is None and ledger.held(("ns", "a")) is None


def test_reservations_are_rebuilt_from_the_applied_deployments_before_the_first_reconcile() -> None:
    """What a restarted operator holds is what its Deployments request (by pool, replicas included); a backend
    that waited for capacity has no Deployment and holds nothing."""

    def dep(selector: dict[str, str], limits: dict[str, str], replicas: int) -> list[Child]:
        pod = {"nodeSelector": selector, "containers": [{"resources": {"limits": limits}}]}
        return [Child("h", slim_child("Deployment", {"replicas": replicas, "template": {"spec": pod}}, {}))]

    itype = {"node.kubernetes.io/instance-type": "g5.2xlarge"}
    deployments = {
        ("ns", "a", "Deployment"): dep({"nvidia.com/gpu.product": "NVIDIA-A10G"}, {"nvidia.com/gpu": "1"}, 2),
        ("ns", "b", "Deployment"): dep(itype, {"nvidia.com/gpu": "1", "cpu": "4"}, 1),
        ("ns", "c", "Deployment"): dep({}, {"cpu": "4"}, 3),
    }
    backends = {("ns", n): [body(n)] for n in "abcw"}
    st = OperatorState(Indexes(models={}, deployments=deployments, services={}, pdbs={}, backends=backends))
    st.seed_reservations()
    assert st.gpus.held(("ns", "a")) == (gfd("NVIDIA-A10G"), 2)
    assert st.gpus.held(("ns", "b")) == (("nvidia.com/gpu", (("node.kubernetes.io/instance-type", "g5.2xlarge"),)), 1)
    assert st.gpus.held(("ns", "c")) is None and st.gpus.held(("ns", "w")) is None


def test_one_product_in_two_pools_waits_only_when_its_own_pool_is_full() -> None:
    """An A10G known by GFD on one node and by instance type on another: two pools of one GPU each. Two backends
    are placed, one per pool; the third waits, naming the pool's label."""
    ledger, rec, recent = GpuLedger(), FakeWriter(latency=0.01), Recent()
    bare = node("a10g-bare", "a10g", 1, gfd=False, labels={"node.kubernetes.io/instance-type": "g5.2xlarge"})
    w = world([node("a10g-gfd", "a10g", 1), bare], ledger)

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(reconcile(body(n), w, rec, "test", recent) for n in "abc")))

    outcomes = asyncio.run(main())
    assert [o.waiting is not None for o in outcomes] == [False, False, True]
    assert deployed(rec) == ["a", "b"]
    pools = {ledger.held(("ns", n))[0] for n in "ab"}  # type: ignore[index]
    assert len(pools) == 2, "one backend per pool"
    assert ready(rec.status("c"))["reason"] == "InsufficientCapacity"


def test_deleting_a_backend_releases_its_gpus_and_queues_the_waiting_ones() -> None:
    st = OperatorState(Indexes(models={}, deployments={}, services={}, pdbs={}, backends={}))
    st.gpus.set(("ns", "a"), (gfd("NVIDIA-A10G"), 1))
    st.waiting |= {("ns", "b"), ("ns", "c")}
    st.forget(("ns", "a"))
    assert st.gpus.held(("ns", "a")) is None
    assert len(st.queue) == 2
