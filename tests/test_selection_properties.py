"""Property-based invariants of the selection tree (hypothesis)."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ib_testkit.factories import GPUS, MODELS, cluster, node, spec
from ib_testkit.gfd import amd_node, gfd_node, gke_node, instance_node
from inference_backend.engines import card
from inference_backend.selection import select

gpu_kinds = st.sampled_from([None, *GPUS])
node_st = st.builds(
    lambda i, gpu, count, ready, cordon, taint, gfd: node(
        f"n{i}",
        gpu,
        count,
        ready=ready,
        unschedulable=cordon,
        gfd=gfd,
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}] if taint else None,
    ),
    st.integers(0, 10_000),
    gpu_kinds,
    st.sampled_from([1, 2, 4, 8]),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
nodes_st = st.lists(node_st, max_size=8, unique_by=lambda n: n["metadata"]["name"])

spec_st = st.fixed_dictionaries(
    {
        "model": st.sampled_from(
            [
                {"modelRef": "llama-3-1-8b"},
                {"modelRef": "llama-3-1-70b"},
                {"modelRef": "qwen-0-5b"},
                {"modelRef": "llama-3-2-3b-gguf"},
                {"uri": "s3://b/m.onnx", "parameters": "3B"},
                {"uri": "pvc://c/m.pt", "parameters": "350M"},
                {"uri": "hf://x/awq", "parameters": "8B", "quantization": "awq"},
            ]
        ),
        "backend": st.sampled_from(["auto", "vllm", "tgi", "llamacpp", "onnxruntime", "pytorch"]),
        "hardware": st.fixed_dictionaries(
            {
                "accelerator": st.sampled_from(["auto", "gpu", "cpu"]),
                "tolerations": st.sampled_from([[], [{"operator": "Exists"}]]),
            }
        ),
        "objectives": st.fixed_dictionaries(
            {}, optional={"ttftMillis": st.integers(1, 5000), "concurrency": st.integers(1, 256)}
        ),
        "batching": st.fixed_dictionaries({"strategy": st.sampled_from(["auto", "static", "dynamic", "continuous"])}),
        "kvCache": st.fixed_dictionaries({"memoryFraction": st.sampled_from([0.5, 0.9, 1.0])}),
    },
    optional={"speculativeDecoding": st.sampled_from([{"draftModelRef": "llama-3-2-1b"}, {"method": "ngram"}])},
)


def _valid(raw: dict[str, Any]) -> bool:
    return not (raw["hardware"]["accelerator"] == "cpu" and raw["backend"] in ("vllm", "tgi"))


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(spec_st, nodes_st, st.randoms(use_true_random=False))
def test_node_order_does_not_matter(raw: dict[str, Any], nodes: list[dict[str, Any]], rnd: random.Random) -> None:
    if not _valid(raw):
        return
    s = spec(**raw)
    shuffled = list(nodes)
    rnd.shuffle(shuffled)
    assert select(s, cluster(*nodes), MODELS) == select(s, cluster(*shuffled), MODELS)


@SETTINGS
@given(spec_st, nodes_st)
def test_invariants(raw: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    if not _valid(raw):
        return
    s = spec(**raw)
    d = select(s, cluster(*nodes), MODELS)
    assert d.reasons and all(r.strip() for r in d.reasons), "reasons are never empty"
    if s.backend != "auto":
        assert d.backend in (None, s.backend), "an explicit backend is never replaced"
    if d.backend is None:
        return
    p = d.placement
    assert p is not None
    usable_gpu = any(
        n["status"]["allocatable"].get("nvidia.com/gpu")
        and n["status"]["conditions"][0]["status"] == "True"
        and not n["spec"].get("unschedulable")
        for n in nodes
    )
    if card(d.backend).gpu_required:
        assert usable_gpu, "no GPU-only engine on a cluster without schedulable GPUs"
        assert p.accelerator == "gpu"
    assert p.tensor_parallel_size * p.pipeline_parallel == p.gpus_per_replica  # a replica across nodes: TP x PP
    if p.gpu is not None:
        assert p.gpus_per_replica >= 1 and p.gpu.count % p.tensor_parallel_size == 0
        assert p.tensor_parallel_size & (p.tensor_parallel_size - 1) == 0, "a power of two"
    else:
        assert p.gpus_per_replica == 0
    assert d.memory is not None and d.memory.required <= d.memory.available
    engine_names = {b for b, _ in d.rejected}
    assert d.backend not in engine_names and len(engine_names) == len(d.rejected)


# Nodes labelled as real clusters are: GFD+NFD (with per-node labels), GKE (tainted), instance types only, AMD.
real_node_st = st.builds(
    lambda i, kind: [
        lambda n: gfd_node(n, "h100", 8),
        lambda n: gfd_node(n, "l4", 1, cpu="15", memory="60Gi"),
        lambda n: gke_node(n, "nvidia-l4", 1, "g2-standard-8", cpu="8", memory="32Gi"),
        lambda n: instance_node(n, "p5.48xlarge", 8),
        lambda n: instance_node(n, "g5.xlarge", 1, cpu="4", memory="16Gi"),
        lambda n: amd_node(n, 8, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
        lambda n: node(n, cpu="32", memory="128Gi"),
    ][kind](f"r{i}"),
    st.integers(0, 10_000),
    st.integers(0, 6),
)
real_nodes_st = st.lists(real_node_st, max_size=8, unique_by=lambda n: n["metadata"]["name"])
per_node_labels_st = st.fixed_dictionaries(
    {
        "nvidia.com/gfd.timestamp": st.integers(1_600_000_000, 1_800_000_000).map(str),
        "feature.node.kubernetes.io/kernel-version.full": st.sampled_from(["5.15.0-1051-aws", "6.1.0-27", "6.8.0-1"]),
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": st.sampled_from(["22.04", "24.04"]),
        "nvidia.com/gpu-driver-upgrade-state": st.sampled_from(["upgrade-done", "upgrade-required"]),
    }
)


def _with_labels(nodes: list[dict[str, Any]], labels: list[dict[str, str]]) -> list[dict[str, Any]]:
    out = []
    for n, extra in zip(nodes, labels, strict=False):
        n = {**n, "metadata": {**n["metadata"], "labels": {**n["metadata"]["labels"], **extra}}}
        out.append(n)
    return out + nodes[len(labels) :]


@SETTINGS
@given(spec_st, real_nodes_st, st.lists(per_node_labels_st, max_size=8))
def test_extra_per_node_labels_never_change_the_decision(
    raw: dict[str, Any], nodes: list[dict[str, Any]], labels: list[dict[str, str]]
) -> None:
    """GFD timestamps, NFD kernel builds and driver-upgrade states differ per node: same classes, same Decision."""
    if not _valid(raw):
        return
    s = spec(**raw)
    noisy = _with_labels(nodes, labels)
    assert len(cluster(*noisy)) == len(cluster(*nodes))
    assert select(s, cluster(*nodes), MODELS) == select(s, cluster(*noisy), MODELS)


@SETTINGS
@given(
    spec_st,
    real_nodes_st,
    st.dictionaries(
        st.sampled_from(["example.com/team", "env", "owner"]), st.sampled_from(["a", "b", "ml"]), max_size=2
    ),
    st.randoms(use_true_random=False),
)
def test_label_noise_and_node_order_never_change_the_decision(
    raw: dict[str, Any], nodes: list[dict[str, Any]], noise: dict[str, str], rnd: random.Random
) -> None:
    """The same unrelated labels on every node, in any node order: the same choice (to_json; the hardware class
    itself carries the labels)."""
    if not _valid(raw):
        return
    s = spec(**raw)
    noisy = _with_labels(nodes, [noise] * len(nodes))
    rnd.shuffle(noisy)
    assert select(s, cluster(*nodes), MODELS).to_json() == select(s, cluster(*noisy), MODELS).to_json()


# ---- capacity planning invariants ---------------------------------------------------------------------------

plan_nodes_st = st.lists(
    st.builds(
        lambda i, gpu, count, cpu, mem: node(f"p{i}", gpu, count, cpu=str(cpu), memory=f"{mem}Gi"),
        st.integers(0, 10_000),
        gpu_kinds,
        st.integers(1, 8),
        st.sampled_from([2, 4, 8, 16, 96, 192]),
        st.sampled_from([4, 16, 32, 64, 256, 1900]),
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda n: n["metadata"]["name"],
)
PLAN_MODELS = dict(MODELS) | {
    "qwen2-5-7b": MODELS["qwen-0-5b"].model_copy(
        update={"uri": "hf://Qwen/Qwen2.5-7B-Instruct", "parameters": "7.6B", "context_length": 32768}
    ),
}
plan_spec_st = st.fixed_dictionaries(
    {
        "model": st.sampled_from(
            [
                {"modelRef": "llama-3-1-8b"},
                {"modelRef": "llama-3-1-70b"},
                {"modelRef": "qwen2-5-7b"},
                {"modelRef": "llama-3-2-3b-gguf"},
            ]
        ),
        "objectives": st.fixed_dictionaries(
            {},
            optional={
                "concurrency": st.integers(1, 4000),
                "promptTokens": st.integers(1, 32768),
                "outputTokens": st.integers(1, 8192),
                "tokensPerSecond": st.integers(1, 50_000),
            },
        ),
        "replicas": st.integers(1, 4),
        "hardware": st.fixed_dictionaries({"accelerator": st.sampled_from(["auto", "gpu", "cpu"])}),
    }
)


@SETTINGS
@given(plan_spec_st, plan_nodes_st)
def test_plan_invariants(raw: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """Whatever the load and the nodes: TP divides the attention heads (and divides or is a multiple of the KV
    heads) unless the engine splits layers, fits one node's allocatable GPUs; host requests fit the node's
    allocatable; the replicas hold the load; CPU placements under auto never use GPU nodes; a model reported as
    multi-node is placed only on as many usable nodes as it needs, by an engine that runs across nodes."""
    d = select(spec(**raw), cluster(*nodes), PLAN_MODELS)
    if d.multi_node is not None:
        assert d.multi_node.nodes >= 2
        if d.backend is not None:
            assert card(d.backend).multi_node and d.placement is not None
            assert d.placement.pipeline_parallel == d.multi_node.nodes
            assert d.placement.nodes >= d.multi_node.nodes * max(raw.get("replicas", 1), 1)
    if d.backend is None or d.placement is None:
        return
    p, m, host, plan = d.placement, d.model, d.host, d.plan
    assert m is not None and host is not None and plan is not None
    assert host.cpu_millis <= p.hardware.cpu_millis and host.memory_bytes <= p.hardware.memory_bytes
    if p.gpu is not None:
        tp = p.tensor_parallel_size
        assert tp <= p.gpu.count
        if not card(d.backend).layer_split and m.attention_heads:
            assert m.attention_heads % tp == 0, (m.attention_heads, tp)
            assert m.kv_heads % tp == 0 or tp % m.kv_heads == 0
    elif raw["hardware"]["accelerator"] == "auto":
        assert not p.hardware.has_gpu, "CPU placements under accelerator auto stay off GPU nodes"
    assert plan.replicas >= raw["replicas"]
    concurrency = raw["objectives"].get("concurrency")
    if concurrency is not None:
        assert plan.sequences * plan.replicas >= concurrency  # the whole service's load
    assert plan.tokens_per_sequence <= m.context_length
