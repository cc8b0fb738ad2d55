"""Table-driven scenarios for the selection tree: every branch, and the memory-fit edges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from ib_testkit.factories import MODELS, cluster, node, spec
from inference_backend.facts import pool_of
from inference_backend.selection import Current, InvalidSpec, select

H100x8 = [node("h100-a", "h100", 8, cpu="192", memory="1900Gi")]
L4x1 = [node("l4-a", "l4", 1), node("l4-b", "l4", 1)]
CPU = [node("cpu-a", cpu="32", memory="128Gi")]
SMALL_CPU = [node("cpu-small", cpu="4", memory="8Gi")]
T4 = [node("t4-a", "t4", 1)]
MIXED = H100x8 + L4x1 + CPU
NOLABELS = [node("gpu-x", "l4", 1, gfd=False)] + CPU
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
DEDICATED_TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@dataclass
class Case:
    id: str
    spec: dict[str, Any]
    nodes: list[dict[str, Any]]
    backend: str | None
    accelerator: str | None = None
    gpu: str | None = None
    tp: int = 0
    speculation: bool | None = None
    reason: str | None = None
    rejected: dict[str, str] = field(default_factory=dict)
    batching: str | None = None
    unsupported: str | None = None


def m(**kw: Any) -> dict[str, Any]:
    return kw


CASES = [
    # --- format branch
    Case(
        "safetensors-gpu-vllm",
        m(model=m(modelRef="llama-3-1-8b")),
        MIXED,
        "vllm",
        "gpu",
        "NVIDIA-L4",
        1,
        reason="format safetensors, quantization none: candidates vllm, tgi, sglang, pytorch",
        rejected={"llamacpp": "format safetensors is not one it serves", "tgi": "registry order"},
    ),
    Case(
        "gguf-llamacpp-cpu-only",
        m(model=m(modelRef="llama-3-2-3b-gguf")),
        CPU,
        "llamacpp",
        "cpu",
        reason="candidates llamacpp",
        rejected={"vllm": "format gguf"},
    ),
    Case("gguf-on-gpu-when-auto", m(model=m(modelRef="llama-3-2-3b-gguf")), MIXED, "llamacpp", "gpu", "NVIDIA-L4", 1),
    Case(
        "onnx-cpu",
        m(model=m(uri="s3://b/phi/model.onnx", parameters="3.8B")),
        CPU,
        "onnxruntime",
        "cpu",
        reason="format onnx inferred from the uri suffix .onnx",
    ),
    Case(
        "pytorch-format",
        m(model=m(uri="pvc://c/m.pt", parameters="350M")),
        CPU,
        "pytorch",
        "cpu",
        reason="format pytorch inferred",
    ),
    Case(
        "safetensors-cpu-only-pytorch",
        m(model=m(modelRef="qwen-0-5b")),
        CPU,
        "pytorch",
        "cpu",
        rejected={"vllm": "needs a GPU; no usable GPU node", "tgi": "needs a GPU"},
    ),
    # --- explicit backend: honoured or refused, never replaced
    Case(
        "explicit-tgi",
        m(backend="tgi", model=m(modelRef="llama-3-1-8b")),
        MIXED,
        "tgi",
        "gpu",
        "NVIDIA-L4",
        1,
        reason="backend tgi requested explicitly",
        rejected={"vllm": "not requested (spec.backend is tgi)"},
    ),
    Case(
        "explicit-wrong-format",
        m(backend="vllm", model=m(modelRef="llama-3-2-3b-gguf")),
        MIXED,
        None,
        reason="backend vllm requested but format gguf is not one it serves",
    ),
    Case(
        "explicit-gpu-engine-no-gpu",
        m(backend="vllm", model=m(modelRef="llama-3-1-8b")),
        CPU,
        None,
        rejected={"vllm": "needs a GPU; no usable GPU node"},
    ),
    Case("explicit-pytorch-on-gpu", m(backend="pytorch", model=m(modelRef="llama-3-1-8b")), MIXED, "pytorch", "gpu"),
    Case(
        "explicit-llamacpp-cpu",
        m(backend="llamacpp", model=m(modelRef="llama-3-2-3b-gguf"), hardware=m(accelerator="cpu")),
        MIXED,
        "llamacpp",
        "cpu",
    ),
    # --- hardware preference
    Case("accelerator-cpu", m(model=m(modelRef="qwen-0-5b"), hardware=m(accelerator="cpu")), MIXED, "pytorch", "cpu"),
    Case("accelerator-gpu-none", m(model=m(modelRef="qwen-0-5b"), hardware=m(accelerator="gpu")), CPU, None),
    Case(
        "gpu-products-preference",
        m(model=m(modelRef="llama-3-1-8b"), hardware=m(gpuProducts=["NVIDIA-H100-80GB-HBM3"])),
        MIXED,
        "vllm",
        "gpu",
        "NVIDIA-H100-80GB-HBM3",
        1,
    ),
    Case(
        "node-selector",
        m(model=m(modelRef="llama-3-1-8b"), hardware=m(nodeSelector={"kubernetes.io/hostname": "h100-a"})),
        MIXED,
        "vllm",
        "gpu",
        "NVIDIA-H100-80GB-HBM3",
        1,
        reason="nodes left out: not matching hardware.nodeSelector",
    ),
    Case(
        "tainted-gpu-untolerated",
        m(model=m(modelRef="llama-3-1-8b")),
        [node("l4-t", "l4", 1, taints=[DEDICATED_TAINT])] + CPU,
        "pytorch",
        "cpu",
        reason="nodes left out: tainted dedicated=ml:NoSchedule (not tolerated)",
    ),
    # GKE taints GPU nodes nvidia.com/gpu=present:NoSchedule and its ExtendedResourceToleration admission adds
    # the toleration to every pod requesting nvidia.com/gpu: GPU placements use them, CPU placements do not.
    Case(
        "gke-gpu-taint-tolerated-as-gke-does",
        m(model=m(modelRef="llama-3-1-8b")),
        [node("l4-t", "l4", 1, taints=[GPU_TAINT])] + CPU,
        "vllm",
        "gpu",
        "NVIDIA-L4",
        1,
        reason="tolerated by pods requesting the accelerator",
    ),
    Case(
        "gke-gpu-taint-keeps-cpu-pods-off",
        m(model=m(modelRef="qwen-0-5b"), hardware=m(accelerator="cpu")),
        [node("l4-t", "l4", 1, taints=[GPU_TAINT])],
        None,
    ),
    Case(
        "tainted-gpu-tolerated",
        m(model=m(modelRef="llama-3-1-8b"), hardware=m(tolerations=TOLERATE_GPU)),
        [node("l4-t", "l4", 1, taints=[GPU_TAINT])] + CPU,
        "vllm",
        "gpu",
        "NVIDIA-L4",
        1,
    ),
    Case(
        "cordoned-and-notready",
        m(model=m(modelRef="llama-3-1-8b")),
        [node("l4-c", "l4", 1, unschedulable=True), node("l4-n", "l4", 1, ready=False)] + CPU,
        "pytorch",
        "cpu",
        reason="nodes left out: NotReady, unschedulable (cordoned)",
    ),
    Case(
        "gpu-without-gfd-labels",
        m(model=m(modelRef="qwen-0-5b")),
        NOLABELS,
        "vllm",
        "gpu",
        "unknown",
        1,
        reason="no nvidia.com/gpu.memory label; assuming 15360 MiB per GPU (conservative)",
    ),
    Case(
        "t4-lacks-bf16-tgi-needs-ampere",
        m(model=m(modelRef="qwen-0-5b")),
        T4,
        "vllm",
        "gpu",
        "Tesla-T4",
        1,
        reason="lacks bfloat16: serving in float16",
        rejected={"tgi": "compute 7.5, tgi needs 8.0+"},
    ),
    Case(
        "mig-single-no-tp",
        m(model=m(modelRef="llama-3-2-1b")),
        [node("a100-mig", "a100-40", 1, mig="single")],
        "vllm",
        "gpu",
        "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb",
        1,
    ),
    Case(
        "mig-mixed-resource",
        m(model=m(modelRef="llama-3-1-8b")),
        [node("a100-mm", "a100-40", 1, mig="mixed")],
        "vllm",
        "gpu",
        "NVIDIA-A100-SXM4-40GB-MIG-3g.40gb",
        1,
    ),
    # --- memory fit and tensor parallelism
    Case("70b-needs-tp4", m(model=m(modelRef="llama-3-1-70b")), H100x8, "vllm", "gpu", "NVIDIA-H100-80GB-HBM3", 4),
    # 70B bf16 = 131.5 GiB of weights: no single-GPU L4 node holds it, so the decision names the nodes it would
    # take (152.6 GiB / 20.2 GiB per L4 node -> 8 nodes; there are 2) and never falls back to CPU.
    Case(
        "70b-on-1xl4-nodes-needs-8-nodes-of-20.2GiB-not-cpu",
        m(model=m(modelRef="llama-3-1-70b")),
        L4x1 + CPU,
        None,
        reason="it needs 8 nodes of 1x NVIDIA-L4 (8 nodes x 1x NVIDIA-L4 (tensor parallel 1 in each node, pipeline "
        "parallel 8",
        rejected={"vllm": "across nodes: needs 8 nodes of 1x NVIDIA-L4; 2 usable"},
    ),
    Case(
        "70b-tp2-with-fraction-1",
        m(model=m(modelRef="llama-3-1-70b"), kvCache=m(memoryFraction=1.0)),
        H100x8,
        "vllm",
        "gpu",
        "NVIDIA-H100-80GB-HBM3",
        2,
    ),
    Case(
        "cpu-too-small",
        m(model=m(modelRef="llama-3-1-8b")),
        SMALL_CPU,
        None,
        rejected={"pytorch": "does not fit: needs"},
    ),
    # 8B at 131072 context: 15 GiB weights + 16 GiB for one full-context sequence > 20.2 GiB of one L4: the two L4
    # nodes hold it, one pipeline stage each; GPU nodes are not used for CPU placements under accelerator auto.
    Case(
        "context-131072-8b-needs-33.2GiB-on-l4-only-2-nodes-pp2-not-cpu",
        m(model=m(modelRef="llama-3-1-8b", contextLength=131072)),
        L4x1,
        "vllm",
        "gpu",
        "NVIDIA-L4",
        1,
        reason="chosen: vllm on 2 nodes x 1x NVIDIA-L4 (23034 MiB each; tensor parallel 1 in each node, pipeline "
        "parallel 2 across nodes)",
        rejected={"tgi": "does not fit: needs 33.2 GiB per replica; 1x NVIDIA-L4 offers 20.2 GiB"},
    ),
    Case(
        "cpu-on-gpu-only-nodes-when-accelerator-cpu",
        m(model=m(modelRef="qwen-0-5b"), hardware=m(accelerator="cpu")),
        L4x1,
        "pytorch",
        "cpu",
        reason="no CPU-only node: CPU placements considered on GPU nodes",
    ),
    # TP=2 does not fit (131.5 GiB weights + 9.6 overhead + 2.5 for one 8192-token sequence > 143.4 GiB); TP=4
    # leaves 142.7 GiB of KV = 608 requests of 768 tokens x 320 KiB (>= 60): 4 GPUs, not the 8 of full contexts.
    Case(
        "concurrency-60-70b-768-token-requests-tp4-holds-608-fewest-gpus",
        m(model=m(modelRef="llama-3-1-70b"), objectives=m(concurrency=60)),
        H100x8,
        "vllm",
        "gpu",
        "NVIDIA-H100-80GB-HBM3",
        4,
        reason="one replica holds 608 requests of 768 tokens",
    ),
    # --- objectives
    Case(
        "throughput-objective-prefers-vllm",
        m(model=m(modelRef="llama-3-1-8b"), objectives=m(tokensPerSecond=1000)),
        MIXED,
        "vllm",
        "gpu",
        "NVIDIA-H100-80GB-HBM3",
        1,
        rejected={"pytorch": "ranked below vllm: the load objectives need"},
    ),
    # vLLM's TTFT at one request on one H100 is about 60 ms (GPUStack measured 60 ms for vLLM 0.11 with 232-token
    # prompts), so the objective leaves room for it there; on an L4 a 512-token prefill alone takes about 150 ms
    Case(
        "ttft-objective-moves-to-faster-gpu",
        m(model=m(modelRef="llama-3-1-8b"), objectives=m(ttftMillis=100)),
        MIXED,
        "vllm",
        "gpu",
        "NVIDIA-H100-80GB-HBM3",
        1,
    ),
    Case(
        "objective-unmet-still-serves",
        m(model=m(modelRef="qwen-0-5b"), objectives=m(ttftMillis=1)),
        CPU,
        "pytorch",
        "cpu",
        reason="objective not met: TTFT p95",
    ),
    # --- batching
    Case("batching-auto-continuous", m(model=m(modelRef="llama-3-1-8b")), MIXED, "vllm", batching="continuous"),
    # continuous batching subsumes dynamic and static: the faster engine stays, with a reason
    Case(
        "batching-dynamic-maps-to-continuous-on-vllm",
        m(model=m(modelRef="llama-3-1-8b"), batching=m(strategy="dynamic")),
        MIXED,
        "vllm",
        batching="continuous",
        reason="batching: continuous (dynamic requested",
        unsupported="batching.strategy dynamic: mapped to vllm's continuous batching",
    ),
    Case(
        "batching-static-maps-to-continuous-on-tgi",
        m(backend="tgi", model=m(modelRef="llama-3-1-8b"), batching=m(strategy="static")),
        MIXED,
        "tgi",
        batching="continuous",
        unsupported="batching.strategy static: mapped to tgi's continuous",
    ),
    # auto: continuous on CPU (joining rows share one forward), dynamic on a GPU (a joining group adds a forward)
    Case(
        "onnx-auto-continuous-on-cpu",
        m(model=m(uri="s3://b/m.onnx", parameters="1B")),
        CPU,
        "onnxruntime",
        batching="continuous",
        reason="batching: continuous (auto)",
    ),
    Case(
        "onnx-auto-dynamic-on-gpu",
        m(backend="onnxruntime", model=m(uri="s3://b/m.onnx", parameters="1B")),
        MIXED,
        "onnxruntime",
        "gpu",
        batching="dynamic",
        reason="batching: dynamic (auto)",
    ),
    Case(
        "onnx-dynamic-kept-on-cpu",
        m(model=m(uri="s3://b/m.onnx", parameters="1B"), batching=m(strategy="dynamic")),
        CPU,
        "onnxruntime",
        batching="dynamic",
    ),
    Case(
        "onnx-prefix-cache-says-which-format",
        m(model=m(uri="s3://b/m.onnx", parameters="1B"), prefixCache=m(enabled=True)),
        CPU,
        "onnxruntime",
        reason="prefix cache: on (on a GPU, our exporter's ONNX format only: there onnxruntime-genai's Generator",
    ),
    Case(
        "maxwait-ignored-continuous",
        m(model=m(modelRef="llama-3-1-8b"), batching=m(maxWaitMillis=5)),
        MIXED,
        "vllm",
        unsupported="maxWaitMillis",
    ),
    # --- speculative decoding
    Case(
        "spec-draft-vllm",
        m(model=m(modelRef="llama-3-1-8b"), speculativeDecoding=m(draftModelRef="llama-3-2-1b")),
        MIXED,
        "vllm",
        speculation=True,
    ),
    Case(
        "spec-ngram-tgi",
        m(
            backend="tgi",
            model=m(modelRef="llama-3-1-8b"),
            speculativeDecoding=m(method="ngram", numSpeculativeTokens=3),
        ),
        MIXED,
        "tgi",
        speculation=True,
    ),
    Case(
        "spec-draft-tgi-off",
        m(backend="tgi", model=m(modelRef="llama-3-1-8b"), speculativeDecoding=m(draftModelRef="llama-3-2-1b")),
        MIXED,
        "tgi",
        speculation=False,
        reason="tgi has no draft speculation",
    ),
    Case(
        "spec-tokenizer-mismatch",
        m(model=m(modelRef="llama-3-1-8b"), speculativeDecoding=m(draftModelRef="qwen-0-5b")),
        MIXED,
        "vllm",
        speculation=False,
        reason="tokenizer qwen2 of the draft differs from the target's llama3",
    ),
    Case(
        "spec-arch-mismatch",
        m(model=m(modelRef="llama-3-1-8b"), speculativeDecoding=m(draftModelRef="llama-3-2-1b-otherarch")),
        MIXED,
        "vllm",
        speculation=False,
        reason="architecture MistralForCausalLM of the draft differs",
    ),
    Case(
        "spec-draft-not-registered",
        m(model=m(modelRef="llama-3-1-8b"), speculativeDecoding=m(draftModelRef="nope")),
        MIXED,
        "vllm",
        speculation=False,
        reason="draft model nope: Model 'nope' not found",
    ),
    Case(
        "spec-draft-no-tokenizer",
        m(model=m(modelRef="llama-3-1-8b"), speculativeDecoding=m(draftModelRef="llama-3-2-1b-notok")),
        MIXED,
        "vllm",
        speculation=False,
        reason="has no tokenizer facts",
    ),
    Case(
        "spec-inline-target-unknown-tokenizer",
        m(model=m(uri="hf://x/y", parameters="8B"), speculativeDecoding=m(draftModelRef="llama-3-2-1b")),
        MIXED,
        "vllm",
        speculation=False,
        reason="the target has no tokenizer facts",
    ),
    Case(
        "spec-draft-larger-than-target",
        m(model=m(modelRef="llama-3-2-1b"), speculativeDecoding=m(draftModelRef="llama-3-1-8b")),
        MIXED,
        "vllm",
        speculation=False,
        reason="not smaller than the target",
    ),
    Case(
        "spec-gguf-draft-llamacpp",
        m(
            model=m(modelRef="llama-3-2-3b-gguf"),
            hardware=m(accelerator="cpu"),
            speculativeDecoding=m(draftModelRef="llama-3-2-1b-gguf"),
        ),
        MIXED,
        "llamacpp",
        speculation=True,
    ),
    Case(
        "spec-draft-format-mismatch-llamacpp",
        m(
            model=m(modelRef="llama-3-2-3b-gguf"),
            hardware=m(accelerator="cpu"),
            speculativeDecoding=m(draftModelRef="llama-3-2-1b"),
        ),
        MIXED,
        "llamacpp",
        speculation=False,
        reason="draft format safetensors is not one llamacpp loads",
    ),
    Case(
        "spec-ngram-onnx-off",
        m(model=m(uri="s3://b/m.onnx", parameters="1B"), speculativeDecoding=m(method="ngram")),
        CPU,
        "onnxruntime",
        speculation=False,
        reason="onnxruntime has no ngram speculation",
    ),
    Case(
        "spec-draft-does-not-fit",
        m(model=m(modelRef="llama-3-1-8b", contextLength=16384), speculativeDecoding=m(draftModelRef="llama-3-2-1b")),
        L4x1,
        "vllm",
        speculation=False,
        reason="the draft model does not fit beside the target",
    ),
    Case(
        "spec-prefers-engine-with-draft",
        m(model=m(modelRef="llama-3-1-8b"), speculativeDecoding=m(draftModelRef="llama-3-2-1b")),
        L4x1 + CPU,
        "vllm",
    ),
    # --- quantization
    Case(
        "awq-excludes-pytorch",
        m(model=m(uri="hf://x/awq", parameters="8B", quantization="awq")),
        CPU,
        None,
        rejected={"pytorch": "quantization awq is not one it runs"},
    ),
    Case(
        "gguf-quant-from-filename",
        m(model=m(uri="hf://x/y/model.Q8_0.gguf", parameters="7B")),
        CPU,
        "llamacpp",
        reason="quantization q8_0 inferred from the GGUF file name",
    ),
    Case(
        "kv-fp8-unsupported-pytorch",
        m(backend="pytorch", model=m(modelRef="qwen-0-5b"), kvCache=m(dtype="fp8")),
        CPU,
        "pytorch",
        unsupported="kvCache.dtype fp8",
    ),
    Case(
        "cpu-offload-non-vllm",
        m(backend="tgi", model=m(modelRef="llama-3-1-8b"), kvCache=m(cpuOffloadGiB=4)),
        MIXED,
        "tgi",
        unsupported="kvCache.cpuOffloadGiB",
    ),
    # --- empty cluster
    Case("no-nodes", m(model=m(modelRef="llama-3-1-8b")), [], None, reason="usable: no node"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_scenario(case: Case) -> None:
    d = select(spec(**case.spec), cluster(*case.nodes), MODELS)
    path = "\n".join(d.reasons)
    assert d.backend == case.backend, path + "\n" + str(d.rejected)
    assert d.reasons, "reasons are never empty"
    if case.accelerator:
        assert d.placement is not None and d.placement.accelerator == case.accelerator, path
    if case.gpu:
        assert d.placement is not None and d.placement.gpu is not None and d.placement.gpu.product == case.gpu, path
    if case.gpu:
        assert d.placement is not None and d.placement.tensor_parallel_size == case.tp
        assert d.placement.gpus_per_replica == case.tp * d.placement.pipeline_parallel, "nodes x GPUs per node"
    if case.speculation is not None:
        assert d.speculation.enabled is case.speculation, d.speculation
    if case.reason:
        assert case.reason in path or case.reason in d.speculation.reason, path
    rejected = dict(d.rejected)
    for engine, why in case.rejected.items():
        assert why in rejected.get(engine, ""), rejected
    if case.batching:
        assert d.batching is not None and d.batching.strategy == case.batching
    if case.unsupported:
        assert any(case.unsupported in u for u in d.unsupported), d.unsupported


def test_at_least_thirty_scenarios() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ({"modelRef": "missing"}, "spec.model.modelRef"),
        ({"uri": "s3://bucket/weights"}, "spec.model.format"),
        ({"uri": "hf://x/y"}, "spec.model.parameters"),
    ],
)
def test_invalid_spec_names_the_field(model: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as exc:
        select(spec(model=model), cluster(*MIXED), MODELS)
    assert exc.value.field == field


def test_adding_nodes_does_not_move_a_healthy_backend() -> None:

    s = spec(model={"modelRef": "llama-3-1-8b"}, hardware={"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]})
    first = select(s, cluster(*L4x1), MODELS)
    assert first.placement is not None and first.placement.gpu is not None
    current = Current("vllm", "gpu", first.placement.gpu.product, 1)
    fresh = select(s, cluster(*L4x1, *H100x8), MODELS, keep=None)
    kept = select(s, cluster(*L4x1, *H100x8), MODELS, keep=current)
    assert kept.placement is not None and kept.placement.gpu is not None
    assert kept.placement.gpu.product == "NVIDIA-L4"
    assert any("kept the current placement" in r for r in kept.reasons)
    assert fresh.placement is not None and fresh.placement.gpu is not None
    assert fresh.placement.gpu.product == "NVIDIA-H100-80GB-HBM3"
    assert fresh.backend == kept.backend


def test_invalid_placement_selects_again() -> None:

    s = spec(model={"modelRef": "llama-3-1-8b"})
    gone = Current("vllm", "gpu", "NVIDIA-A10G", 1)
    d = select(s, cluster(*L4x1), MODELS, keep=gone)
    assert d.placement is not None and d.placement.gpu is not None and d.placement.gpu.product == "NVIDIA-L4"
    assert any("no longer valid: selecting again" in r for r in d.reasons)


def test_gpus_in_use_spread_backends_over_free_gpus() -> None:
    s = spec(model={"modelRef": "qwen-0-5b"})
    nodes = cluster(node("l4-a", "l4", 1), node("a10g-a", "a10g", 1))
    first = select(s, nodes, MODELS)
    assert first.placement is not None and first.placement.gpu is not None
    taken = first.placement.gpu
    second = select(s, nodes, MODELS, gpus_in_use={pool_of(taken): 1})
    assert second.placement is not None and second.placement.gpu is not None
    assert second.placement.gpu.product != taken.product
    both = select(s, nodes, MODELS, gpus_in_use={pool_of(taken): 1, pool_of(second.placement.gpu): 1})
    assert both.backend is not None, "still selected: pods wait for a GPU"
    assert any("no free" in r and "pods wait" in r for r in both.reasons)


def test_one_product_in_two_pools_counts_capacity_per_pool() -> None:
    """An A10G identified by GFD on one node and by its instance type on another: a pod selects one or the other,
    so the GPU the first backend holds on one node does not leave one free there for the second."""
    s = spec(model={"modelRef": "qwen-0-5b"})
    gfd = node("a10g-gfd", "a10g", 1)
    bare = node("a10g-bare", "a10g", 1, gfd=False, labels={"node.kubernetes.io/instance-type": "g5.2xlarge"})
    nodes = cluster(gfd, bare)
    first = select(s, nodes, MODELS)
    assert first.placement is not None and first.placement.gpu is not None
    assert {g.product for cls in nodes for g in cls.gpus} == {first.placement.gpu.product}, "one product, two pools"
    second = select(s, nodes, MODELS, gpus_in_use={pool_of(first.placement.gpu): 1})
    assert second.placement is not None and second.placement.gpu is not None
    assert second.placement.gpu.product == first.placement.gpu.product
    assert pool_of(second.placement.gpu) != pool_of(first.placement.gpu), "the other node's pool"
    assert not any("no free" in r for r in second.reasons)
    full = select(s, nodes, MODELS, gpus_in_use={pool_of(first.placement.gpu): 1, pool_of(second.placement.gpu): 1})
    assert any("no free" in r and "pods wait" in r for r in full.reasons)


def test_kept_placement_stays_in_its_pool() -> None:
    """Re-selecting a backend already placed on the second pool of a product keeps that pool: a product match alone
    would send it to the pool that sorts first, rolling its pods onto nodes another backend fills."""
    s = spec(model={"modelRef": "qwen-0-5b"})
    gfd = node("a10g-gfd", "a10g", 1)
    bare = node("a10g-bare", "a10g", 1, gfd=False, labels={"node.kubernetes.io/instance-type": "g5.2xlarge"})
    nodes = cluster(gfd, bare)
    first = select(s, nodes, MODELS)
    assert first.placement is not None and first.placement.gpu is not None and first.backend is not None
    second = select(s, nodes, MODELS, gpus_in_use={pool_of(first.placement.gpu): 1})
    assert second.placement is not None and second.placement.gpu is not None and second.backend is not None
    placed = second.to_status().placement
    assert placed is not None and placed.node_selector
    keep = Current(second.backend, "gpu", second.placement.gpu.product, 1, tuple(sorted(placed.node_selector.items())))
    again = select(s, nodes, MODELS, keep=keep)
    assert again.placement is not None and again.placement.gpu is not None
    assert pool_of(again.placement.gpu) == pool_of(second.placement.gpu)
