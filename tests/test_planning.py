"""Capacity planning rules (selection/planning.py, docs/selection.md "Planning rules"), one case per rule, the
arithmetic in each id. Nodes are labelled as real clusters are (GFD) or as small cloud instances."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from ib_testkit.factories import MODELS, cluster, node, spec
from inference_backend.api import InferenceBackend
from inference_backend.api.model import ModelSpec
from inference_backend.render import render
from inference_backend.selection import select

H100x8 = node("h100-a", "h100", 8, cpu="192", memory="1900Gi")
H100x7 = node("h100-7", "h100", 7, cpu="192", memory="1900Gi")  # one GPU unhealthy: 7 allocatable
L4_SMALL = node("l4-g6-xlarge", "l4", 1, cpu="4", memory="16Gi")  # g6.xlarge: 4 vCPU, 16 GiB
L4_TINY = node("l4-tiny", "l4", 1, cpu="2", memory="4Gi")
CPU16 = node("cpu-16g", cpu="8", memory="16Gi")
CPU = node("cpu-a", cpu="32", memory="128Gi")
L4 = node("l4-a", "l4", 1)

REGISTRY: dict[str, ModelSpec] = dict(MODELS) | {
    name: ModelSpec.model_validate(body)
    for name, body in {
        "qwen2-5-7b": {
            "uri": "hf://Qwen/Qwen2.5-7B-Instruct",
            "parameters": "7.6B",
            "dtype": "bfloat16",
            "contextLength": 32768,
        },
        "llama-3-1-405b": {
            "uri": "hf://meta-llama/Llama-3.1-405B-Instruct",
            "parameters": "405B",
            "dtype": "bfloat16",
            "contextLength": 8192,
        },
        "mistral-7b-gguf": {
            "uri": "hf://x/Mistral-7B-Instruct-v0.3-GGUF/Mistral-7B-Instruct-v0.3.Q4_K_M.gguf",
            "parameters": "7.25B",
            "contextLength": 32768,
        },
        "llama-2-7b-gguf": {
            "uri": "hf://x/Llama-2-7B-GGUF/llama-2-7b.Q4_K_M.gguf",
            "parameters": "6.74B",
            "contextLength": 32768,
        },
    }.items()
}


@dataclass
class Case:
    id: str
    spec: dict[str, Any]
    nodes: list[dict[str, Any]]
    backend: str | None
    tp: int | None = None
    replicas: int | None = None
    reasons: tuple[str, ...] = ()
    rejected: dict[str, str] = field(default_factory=dict)


def m(**kw: Any) -> dict[str, Any]:
    return kw


CASES = [
    # KV per token 2 x 32 layers x 8 KV heads x 128 x 2 B = 128 KiB; a 768-token request (512 + 256) = 96 MiB;
    # TP=1 leaves 71.7 - 15.0 - 2.25 = 54.5 GiB of KV = 581 requests >= 128: one GPU, not four.
    Case(
        "8b-c128-h100-tp1-54.5GiB-kv-holds-581-requests-of-768-tokens",
        m(model=m(modelRef="llama-3-1-8b"), objectives=m(concurrency=128)),
        [H100x8],
        "vllm",
        1,
        1,
        ("one replica holds 581 requests of 768 tokens",),
    ),
    # 2000 concurrent requests: ceil(2000 / 581) = 4 replicas of TP=1; TP=2 holds 1329 (2 replicas) and TP=4 2826
    # (1 replica): 4 GPUs each, so the fewest GPUs per replica wins; TP=8 would take 8.
    Case(
        "8b-c2000-h100-tp1-x-ceil(2000/581)=4-replicas",
        m(model=m(modelRef="llama-3-1-8b"), objectives=m(concurrency=2000)),
        [H100x8],
        "vllm",
        1,
        4,
        ("concurrency 2000 / 581 requests per replica (what its KV cache holds at this length) = 4", "set it to 4"),
    ),
    # longer requests: 4096 + 1024 tokens = 640 MiB each: 54.5 GiB / 640 MiB = 87 requests < 128 -> 2 replicas
    Case(
        "8b-c128-prompt4096-output1024-h100-tp1-87-requests-2-replicas",
        m(model=m(modelRef="llama-3-1-8b"), objectives=m(concurrency=128, promptTokens=4096, outputTokens=1024)),
        [H100x8],
        "vllm",
        1,
        2,
        ("87 requests of 5120 tokens (promptTokens 4096 + outputTokens 1024;",),
    ),
    # Qwen2.5-7B: 28 attention heads, 4 KV heads (architecture table, by the uri): TP=8 never (28 % 8 = 4)
    Case(
        "qwen2.5-7b-c200-h100x8-tp1-28-heads-never-tp8",
        m(model=m(modelRef="qwen2-5-7b"), objectives=m(concurrency=200)),
        [H100x8],
        "vllm",
        1,
        1,
        ("from the architecture table (Qwen2.5-7B, named by the uri", "28 attention heads, 4 KV heads"),
    ),
    # 70B on a node with 7 allocatable H100s: TP=4 (a power of two <= 7), not unsatisfiable
    Case("70b-on-7-allocatable-h100-tp4-fits-4x71.7GiB", m(model=m(modelRef="llama-3-1-70b")), [H100x7], "vllm", 4),
    # host: 4 CPUs per GPU and 15 + 8 GiB wanted; a g6.xlarge allocates 4 CPUs / 16 GiB: 90% = 3.6 CPUs, 14 GiB
    Case(
        "8b-on-4vcpu-16GiB-l4-host-scaled-to-3.6cpu-14GiB",
        m(model=m(modelRef="llama-3-1-8b")),
        [L4_SMALL],
        "vllm",
        1,
        reasons=(
            "host request scaled down to fit the NVIDIA-L4 nodes' allocatable (4 CPUs, 16.0 GiB",
            "3.6 CPUs instead of 4",
            "14.0 GiB host memory instead of 23.0 GiB",
        ),
    ),
    # 2 CPUs / 4 GiB: 90% = 3 GiB < the 4 GiB an engine process needs: refused with the numbers
    Case(
        "8b-on-2vcpu-4GiB-l4-refused-3GiB-below-4GiB",
        m(model=m(modelRef="llama-3-1-8b")),
        [L4_TINY],
        None,
        rejected={"vllm": "allocate 2 CPUs and 4.0 GiB: 90% of that is below the 1 CPU(s) and 4.0 GiB"},
    ),
    # 405B bf16 = 754.4 GiB + 24 + 37.7 overhead (16 GPUs) + 3.9 for one 8192-token sequence = 820 GiB > 573.5 GiB
    # of one 8xH100 node: 2 nodes x 8 (TP 8 in each node, PP 2 across), placed on the two nodes there are
    Case(
        "405b-bf16-on-two-8xh100-tp8-x-pp2-820GiB-over-2x573.5GiB",
        m(model=m(modelRef="llama-3-1-405b")),
        [H100x8, node("h100-b", "h100", 8, cpu="192", memory="1900Gi")],
        "vllm",
        8,
        reasons=(
            "chosen: vllm on 2 nodes x 8x NVIDIA-H100-80GB-HBM3 (81559 MiB each; tensor parallel 8 in each "
            "node, pipeline parallel 2 across nodes)",
            "one replica needs 820.0 GiB; one node of 8x NVIDIA-H100-80GB-HBM3 offers 573.5 GiB",
            "memory per node: weights 377.2 GiB + overhead 30.9 GiB + KV 165.4 GiB of 573.5 GiB",
            "interconnect: tensor parallel inside each node over NVLink",
            "pipeline parallel across nodes over the cluster network",
            "not across nodes: TGI 3.3.7",
        ),
        rejected={
            "tgi": "across nodes: TGI 3.3.7 does not run one replica across nodes",
            "sglang": "ranked below vllm",
        },
    ),
    # one 8xH100 node only: unsatisfiable with the number of nodes it needs, never PyTorch on the big CPU node
    Case(
        "405b-on-one-8xh100-needs-2-nodes-not-cpu",
        m(model=m(modelRef="llama-3-1-405b")),
        [H100x8, node("cpu-big", cpu="192", memory="4000Gi")],
        None,
        reasons=(
            "needs 2 nodes of 8x NVIDIA-H100-80GB-HBM3 (2 nodes x 8x NVIDIA-H100-80GB-HBM3 (tensor parallel "
            "8 in each node, pipeline parallel 2",
            "1 such node(s) usable",
            "not placed on CPU",
        ),
        rejected={"vllm": "needs 2 nodes of 8x NVIDIA-H100-80GB-HBM3; 1 usable"},
    ),
    # two replicas of two nodes each: four nodes, and there are two
    Case(
        "405b-2-replicas-on-two-8xh100-needs-4-nodes",
        m(model=m(modelRef="llama-3-1-405b"), replicas=2),
        [H100x8, node("h100-b", "h100", 8, cpu="192", memory="1900Gi")],
        None,
        reasons=("needs 4 nodes of 8x NVIDIA-H100-80GB-HBM3 (2 per replica x 2 replicas)",),
    ),
    # an engine whose pinned release does not run across nodes, asked for by name: unsatisfiable, naming the ones
    # that do
    Case(
        "405b-tgi-requested-does-not-run-across-nodes",
        m(model=m(modelRef="llama-3-1-405b"), backend="tgi"),
        [H100x8, node("h100-b", "h100", 8, cpu="192", memory="1900Gi")],
        None,
        reasons=(
            "TGI 3.3.7 does not run across nodes (engines that run one replica across nodes (pinned releases):"
            " vLLM 0.33.0, SGLang 0.5.23",
        ),
    ),
    # llama.cpp: -c is context x slots. Mistral-7B q4_k_m 4.1 GiB + 0.5 + 4 GiB per 32768-token slot
    # (128 KiB/token) on a 16 GiB node (14.4 GiB at 0.9): 2 slots fit, not the 4 asked
    Case(
        "llamacpp-32k-mistral-7b-16GiB-node-2-slots-of-4GiB",
        m(model=m(modelRef="mistral-7b-gguf"), batching=m(maxBatchSize=4)),
        [CPU16],
        "llamacpp",
        reasons=("slots reduced from 4 to 2", "2 slot(s) x 32768-token context 8.0 GiB"),
    ),
    # Llama-2-7B keeps 32 KV heads: 512 KiB/token x 32768 = 16 GiB for one slot > 14.4 GiB: refused, not OOM
    Case(
        "llamacpp-32k-llama-2-7b-16GiB-node-one-16GiB-slot-does-not-fit",
        m(model=m(modelRef="llama-2-7b-gguf")),
        [CPU16],
        None,
        rejected={"llamacpp": "does not fit: needs 20.3 GiB; the CPU node offers 14.4 GiB"},
    ),
    # batching: dynamic on vLLM is continuous batching (it admits waiting requests every step)
    Case(
        "dynamic-batching-on-vllm-is-continuous",
        m(model=m(modelRef="llama-3-1-8b"), batching=m(strategy="dynamic")),
        [L4],
        "vllm",
        1,
        reasons=("batching: continuous (dynamic requested",),
    ),
    # CPU placements do not use GPU nodes under accelerator auto
    Case(
        "cpu-fallback-only-on-cpu-only-nodes",
        m(model=m(modelRef="qwen-0-5b"), hardware=m(accelerator="cpu")),
        [L4, CPU],
        "pytorch",
        reasons=("CPU placement kept off GPU nodes by node affinity: nvidia.com/gpu.product DoesNotExist",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_planning_rule(case: Case) -> None:
    d = select(spec(**case.spec), cluster(*case.nodes), REGISTRY)
    path = "\n".join(d.reasons)
    assert d.backend == case.backend, path + "\n" + str(d.rejected)
    if case.tp is not None:
        assert d.placement is not None and d.placement.tensor_parallel_size == case.tp, path
    if case.replicas is not None:
        assert d.plan is not None and d.plan.replicas == case.replicas, path
    for r in case.reasons:
        assert r in path, path
    rejected = dict(d.rejected)
    for engine, why in case.rejected.items():
        assert why in rejected.get(engine, ""), rejected


def _ib(body: dict[str, Any]) -> InferenceBackend:
    return InferenceBackend.model_validate(
        {
            "apiVersion": "serving.inferencebackend.io/v1alpha1",
            "kind": "InferenceBackend",
            "metadata": {"name": "t", "namespace": "default"},
            "spec": body,
        }
    )


def _pod(body: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    ib = _ib(body)
    d = select(ib.spec, cluster(*nodes), REGISTRY)
    deployment = render(ib, d)[0]
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def test_host_request_on_a_4_vcpu_l4_node_is_3600m_cpu_14Gi_and_fits_its_allocatable() -> None:
    pod = _pod({"model": {"modelRef": "llama-3-1-8b"}}, [L4_SMALL])
    res = pod["containers"][0]["resources"]
    assert res["requests"].pop("ephemeral-storage") == "18Gi"  # the weights' disk (tests/test_hardening.py)
    assert res["requests"] == {"cpu": "3600m", "memory": "14Gi", "nvidia.com/gpu": 1}
    assert res["limits"] == {"memory": "14Gi", "nvidia.com/gpu": 1}


def test_host_request_on_a_big_node_is_4_cpus_per_gpu_and_weights_share_plus_8GiB() -> None:
    pod = _pod({"model": {"modelRef": "llama-3-1-70b"}}, [H100x8])
    res = pod["containers"][0]["resources"]["requests"]
    res.pop("ephemeral-storage")
    assert res == {"cpu": "16", "memory": "41Gi", "nvidia.com/gpu": 4}  # 131.5 / 4 = 33 GiB + 8


def test_cpu_placement_renders_node_affinity_off_gpu_nodes() -> None:
    pod = _pod(
        {"model": {"modelRef": "qwen-0-5b"}, "hardware": {"accelerator": "cpu"}},
        [L4, node("gke-l4", "l4", 1, gfd=False, labels={"cloud.google.com/gke-accelerator": "nvidia-l4"}), CPU],
    )
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "DoesNotExist"},
                {"key": "cloud.google.com/gke-accelerator", "operator": "DoesNotExist"},
            ]
        }
    ]


def test_cpu_placement_on_cpu_only_cluster_has_no_affinity() -> None:
    pod = _pod({"model": {"modelRef": "qwen-0-5b"}}, [CPU])
    assert "affinity" not in pod


def test_llamacpp_memory_request_covers_weights_plus_context_x_slots_plus_overhead() -> None:
    """Mistral-7B q4_k_m on 16 GiB: 4.1 GiB weights + 0.5 overhead + 2 x 4 GiB slots = 12.6 GiB -> 13 + 1 Gi."""
    ib = _ib({"model": {"modelRef": "mistral-7b-gguf"}, "batching": {"maxBatchSize": 4}})
    d = select(ib.spec, cluster(CPU16), REGISTRY)
    c = render(ib, d)[0]["spec"]["template"]["spec"]["containers"][0]
    args = c["args"]
    assert args[args.index("-np") + 1] == "2" and args[args.index("-c") + 1] == str(32768 * 2)
    assert c["resources"]["requests"]["memory"] == "14Gi"
    assert d.memory is not None and d.memory.required <= d.memory.available
    kv = d.memory.kv_per_token * 32768 * 2
    assert d.memory.weights + kv <= 14 * 2**30, "the limit holds the weights and every slot's context"


@pytest.mark.parametrize("nodes", [1, 2], ids=["one-node-unsatisfiable", "two-nodes-placed"])
def test_405b_status_placement_has_the_multi_node_numbers(nodes: int) -> None:
    h100s = [node(f"h100-{i}", "h100", 8, cpu="192", memory="1900Gi") for i in range(nodes)]
    d = select(spec(model={"modelRef": "llama-3-1-405b"}), cluster(*h100s), REGISTRY)
    assert (d.backend is not None) == (nodes == 2) and d.multi_node is not None
    placement = d.to_status().placement
    assert placement is not None
    assert (
        placement.nodes,
        placement.gpus_per_node,
        placement.tensor_parallel_size,
        placement.pipeline_parallel_size,
        placement.gpus_per_replica,
    ) == (2, 8, 8, 2, 16)
    out = d.to_json()
    assert out["multiNode"]["nodes"] == 2 and out["multiNode"]["availableNodes"] == nodes
    if nodes == 2:
        assert (out["nodes"], out["gpusPerNode"], out["pipelineParallelSize"], out["gpusPerReplica"]) == (2, 8, 2, 16)


def test_405b_on_two_nodes_renders_a_leaderworkerset_of_two_pods_of_8_gpus() -> None:
    h100s = [node(f"h100-{i}", "h100", 8, cpu="192", memory="1900Gi") for i in range(2)]
    d = select(spec(model={"modelRef": "llama-3-1-405b"}), cluster(*h100s), REGISTRY)
    objects = render(_ib({"model": {"modelRef": "llama-3-1-405b"}}), d)
    assert [o["kind"] for o in objects] == ["LeaderWorkerSet", "Service"]
    tpl = objects[0]["spec"]["leaderWorkerTemplate"]
    assert tpl["size"] == 2
    for role in ("leaderTemplate", "workerTemplate"):
        (c,) = tpl[role]["spec"]["containers"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 8, role
        assert c["args"][c["args"].index("--tensor-parallel-size") + 1] == "8"
        assert c["args"][c["args"].index("--pipeline-parallel-size") + 1] == "2"


def test_single_node_status_placement_says_one_node() -> None:
    d = select(spec(model={"modelRef": "llama-3-1-70b"}), cluster(H100x8), REGISTRY)
    p = d.to_status().placement
    assert p is not None and (p.nodes, p.gpus_per_node, p.pipeline_parallel_size) == (1, 4, 1)


def test_mig_slice_is_rated_at_its_share_of_the_gpu() -> None:
    """A100-40GB MIG 1g.5gb: 1 of 8 memory slices = 1/8 of 1555 GB/s and 1/7 of the compute; the slice's decode
    step is bandwidth-bound (8x slower), the whole GPU's is partly bound by the engine's fixed per-step time at this
    1B size (selection/workload.py), so tokens/s differ by less than 8x but by more than 2x."""
    whole = select(spec(model={"modelRef": "llama-3-2-1b"}), cluster(node("a", "a100-40", 1)), REGISTRY)
    mig = select(spec(model={"modelRef": "llama-3-2-1b"}), cluster(node("m", "a100-40", 1, mig="single")), REGISTRY)
    assert mig.placement is not None and mig.placement.gpu is not None and mig.placement.gpu.mig
    assert whole.placement is not None and whole.placement.gpu is not None
    ratio = mig.placement.gpu.speed / whole.placement.gpu.speed
    assert ratio < 0.3, ratio
    assert float(mig.estimate["tokensPerSecond"]) < float(whole.estimate["tokensPerSecond"]) * 0.5
    assert float(mig.estimate["tpotMillis"]) > 2 * float(whole.estimate["tpotMillis"])


def test_a_tpot_only_tensor_parallelism_reaches_names_the_narrower_placements_miss() -> None:
    """8B bf16 on L4s (300 GB/s): one request's decode step reads 16 GB over the replica's GPUs (8 GB each on two:
    33 ms at vLLM's fitted 80% of the bandwidth, before its step overheads), so a 30 ms TPOT needs more than two
    L4s whatever the replicas; the decision says which objective the narrower one misses, by how much, and that
    the wider one meets it."""
    s = spec(model={"modelRef": "llama-3-1-8b"}, backend="vllm", objectives={"tpotMillis": 30, "concurrency": 64})
    d = select(s, cluster(node("l4-8", "l4", 8, cpu="96", memory="384Gi")), REGISTRY)
    assert d.placement is not None and d.placement.gpus_per_replica >= 4
    line = next(r for r in d.reasons if r.endswith("meets it"))
    assert line.startswith("TPOT ") and "> tpotMillis 30 at concurrency" in line and ") on 2x NVIDIA-L4" in line
    assert float(d.estimate["tpotMillis"]) <= 30
