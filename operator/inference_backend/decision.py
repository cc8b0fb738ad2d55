"""The Decision: what the selection tree chose, where, and the ordered reasons that got there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inference_backend.api import inferencebackend as api
from inference_backend.api.model import Tokenizer
from inference_backend.facts import GPUFacts, HardwareClass, pod_selector
from inference_backend.quantity import gib


def bounded(
    items: tuple[str, ...] | list[str], max_items: int = api.MAX_REASONS, max_length: int = api.MAX_REASON
) -> list[str]:
    """At most ``max_items`` entries of at most ``max_length`` characters, whatever the cluster's size: the first
    ones and the last one are kept (the path's start and its conclusion), the middle is elided with a count."""
    out = [t if len(t) <= max_length else t[: max_length - 3] + "..." for t in items]
    if len(out) > max_items:
        elided = len(out) - (max_items - 1)
        out = [*out[: max_items - 2], f"... {elided} more entries elided ...", out[-1]]
    return out


class InvalidSpec(ValueError):
    """The spec cannot be acted on until the user changes it; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class WeightsCache:
    """spec.model.cache: where fetched weights persist (one of a PVC's name and a node path)."""

    claim: str | None = None
    host_path: str | None = None
    size: str | int | None = None
    storage_class: str | None = None
    """The operator creates the claim (render.py weights_claim); ``claim`` is set to its name when rendering."""
    namespace: str = ""
    """The backend's namespace, set when rendering: part of each cache directory's name (artifacts.cache_key), so a
    node path shared by every namespace never serves one namespace's download to another."""


@dataclass(frozen=True)
class ResolvedModel:
    """The model's facts after merging the registered Model with the inline ones and applying defaults."""

    uri: str | None
    format: str
    parameters: int
    dtype: str
    quantization: str
    context_length: int
    layers: int
    kv_heads: int
    head_dim: int
    shape_source: str
    attention_heads: int = 0
    """Query heads (0 when unknown: no divisibility check)."""
    kv_latent: int = 0
    """Multi-head latent attention: elements of the compressed KV per token and layer (0: plain multi-head or
    grouped-query attention, 2 x kv_heads x head_dim). See memory.kv_bytes_per_token."""
    architecture: str | None = None
    served_name: str | None = None
    credentials_secret: str | None = None
    tokenizer: Tokenizer | None = None
    model_ref: str | None = None
    active_parameters: int | None = None
    """Mixture of experts: parameters one token runs through (speed is rated by these; memory by ``parameters``)."""
    cache: WeightsCache | None = None
    """spec.model.cache (the draft of a fetched target shares it)."""

    @property
    def rated_parameters(self) -> int:
        """The parameters that set compute and bandwidth per token: the active ones of an MoE, else all."""
        return self.active_parameters or self.parameters


@dataclass(frozen=True)
class ResolvedAdapter:
    """One of spec.adapters, as the engine gets it: fetched like the weights (the model's credentials and cache)."""

    name: str
    uri: str
    rank: int | None
    """The declared rank (spec.adapters[].rank), None when not declared."""
    target_modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Adapters:
    """The adapters the chosen engine serves, and the limits rendered for them."""

    items: tuple[ResolvedAdapter, ...]
    max_rank: int
    """The rank limit rendered (the engine's flag value, or the limit the fetch step checks each file against)."""
    lora_ids: tuple[tuple[str, int], ...] | None = None
    """(name, index) of each adapter where a request names one by its index (llama-server's ``"lora": [{"id": I,
    "scale": 1.0}]``) rather than by name in the OpenAI ``model`` field; None where the model field names it."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.items)


NO_ADAPTERS = Adapters((), 0)


@dataclass(frozen=True)
class Speculation:
    enabled: bool
    reason: str
    method: str | None = None
    num_tokens: int = 0
    draft: ResolvedModel | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"enabled": self.enabled, "reason": self.reason}
        if self.enabled:
            out["method"] = self.method
            out["numSpeculativeTokens"] = self.num_tokens
            if self.draft is not None:
                out["draftModelRef"] = self.draft.model_ref
        return out


@dataclass(frozen=True)
class Current:
    """The engine and placement serving now (from the InferenceBackend's status)."""

    engine: str
    accelerator: str
    gpu_product: str | None
    gpus_per_replica: int
    gpu_selector: tuple[tuple[str, str], ...] | None = None
    """The identifying node labels the pods select (None in statuses written before it was recorded)."""

    def describe(self) -> str:
        return f"{self.gpus_per_replica}x {self.gpu_product}" if self.gpu_product else "CPU"


@dataclass(frozen=True)
class Placement:
    accelerator: str
    hardware: HardwareClass
    nodes: int
    gpu: GPUFacts | None = None
    gpus_per_replica: int = 0
    """GPUs of one replica over all its nodes (nodes x GPUs per node)."""
    pipeline_parallel: int = 1
    """Nodes one replica spans (pipeline-parallel stages, one per node); 1 on one node."""

    @property
    def tensor_parallel_size(self) -> int:
        """Tensor-parallel width: the GPUs of one replica on each of its nodes."""
        return self.gpus_per_replica // max(self.pipeline_parallel, 1)

    @property
    def gpus_per_node(self) -> int:
        """GPUs each pod of the replica requests (one pod per node)."""
        return self.tensor_parallel_size

    @property
    def multi_node(self) -> bool:
        return self.pipeline_parallel > 1

    def describe(self) -> str:
        if self.gpu is None:
            return f"CPU ({self.hardware.cpu_millis // 1000} cores, {gib(self.hardware.memory_bytes)} GiB)"
        if self.multi_node:
            return (
                f"{self.pipeline_parallel} nodes x {self.gpus_per_node}x {self.gpu.product} "
                f"({self.gpu.memory_mib} MiB each; tensor parallel {self.gpus_per_node} in each node, pipeline "
                f"parallel {self.pipeline_parallel} across nodes)"
            )
        return f"{self.gpus_per_replica}x {self.gpu.product} ({self.gpu.memory_mib} MiB each)"


@dataclass(frozen=True)
class Host:
    """Host CPU and memory one replica's pod requests, sized to fit the chosen nodes' allocatable."""

    cpu_millis: int
    memory_bytes: int


@dataclass(frozen=True)
class Plan:
    """Capacity planning of the chosen placement: what one replica holds and how many the objectives need."""

    tokens_per_sequence: int
    """KV tokens of one typical request (promptTokens + outputTokens, at most the context length)."""
    sequences: int
    """Typical requests the KV cache of one replica holds at once."""
    replicas: int
    """Replicas the load objectives (concurrency, tokensPerSecond) need at this width (at least spec.replicas)."""
    slots: int = 0
    """Engines with fixed slots (llama.cpp -np): the slots each replica runs, each with a full context."""


@dataclass(frozen=True)
class MultiNode:
    """A model larger than any one node: the smallest multi-node layout that holds it (selection/multinode.py). A
    satisfiable decision places it (Placement.pipeline_parallel > 1, rendered as a LeaderWorkerSet); an
    unsatisfiable one reports it with the nodes it needs."""

    engine: str
    gpu: GPUFacts
    gpus_per_node: int
    """Tensor-parallel width inside each node."""
    nodes: int
    """Nodes per replica (the pipeline-parallel degree)."""
    required: float
    """Bytes one replica needs (weights + overhead + one full-context sequence)."""
    per_node: float
    """Bytes one node offers at memoryFraction."""
    available_nodes: int
    """Usable nodes of this GPU kind in the cluster."""

    def describe(self) -> str:
        return (
            f"{self.nodes} nodes x {self.gpus_per_node}x {self.gpu.product} (tensor parallel "
            f"{self.gpus_per_node} in each node, pipeline parallel {self.nodes} across nodes)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.engine,
            "gpuProduct": self.gpu.product,
            "nodes": self.nodes,
            "gpusPerNode": self.gpus_per_node,
            "tensorParallelSize": self.gpus_per_node,
            "pipelineParallelSize": self.nodes,
            "requiredGiB": gib(self.required),
            "perNodeGiB": gib(self.per_node),
            "availableNodes": self.available_nodes,
        }


@dataclass(frozen=True)
class Memory:
    weights: float
    kv_cache: float
    required: float
    available: float
    kv_per_token: float

    def to_api(self) -> api.MemoryReport:
        return api.MemoryReport(
            weights_gi_b=gib(self.weights),
            kv_cache_gi_b=gib(self.kv_cache),
            required_gi_b=gib(self.required),
            available_gi_b=gib(self.available),
        )


@dataclass(frozen=True)
class Batching:
    strategy: str
    max_batch_size: int | None
    max_batch_tokens: int | None
    max_wait_millis: int | None


@dataclass(frozen=True)
class Decision:
    backend: str | None
    reasons: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...] = ()
    placement: Placement | None = None
    memory: Memory | None = None
    batching: Batching | None = None
    prefix_cache: bool = False
    speculation: Speculation = field(default_factory=lambda: Speculation(False, "not requested"))
    unsupported: tuple[str, ...] = ()
    model: ResolvedModel | None = None
    serving_dtype: str | None = None
    kv_cache_dtype: str = "auto"
    estimate: dict[str, float | str] = field(default_factory=dict)
    """ttftMillis, ttftP95Millis, tpotMillis, tokensPerSecond, concurrency (one replica at its share of the load)
    and source."""
    plan: Plan | None = None
    host: Host | None = None
    avoid_labels: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """Node-affinity expressions (key, operator, values) keeping a CPU placement off GPU nodes."""
    multi_node: MultiNode | None = None
    avoided: tuple[Current, str] | None = None
    """A placement left because its pods stayed unschedulable past the grace period, and why (kept in the status,
    so the next reconciles keep leaving it)."""
    arch: str = ""
    """``kubernetes.io/arch`` the pod selects, when the nodes it may land on mix architectures or carry GKE's arm64
    taint; empty when any node of its pool will do."""
    arch_toleration: bool = False
    """Tolerate GKE's ``kubernetes.io/arch=arm64:NoSchedule`` (the chosen nodes carry it)."""
    adapters: Adapters = NO_ADAPTERS
    """spec.adapters as the chosen engine serves them."""

    @property
    def satisfiable(self) -> bool:
        return self.backend is not None

    def to_json(self) -> dict[str, Any]:
        """The `inference-backend select -o json` object (see shared/design/api.md)."""
        p = self.placement
        out: dict[str, Any] = {
            "backend": self.backend,
            "satisfiable": self.satisfiable,
            "reasons": list(self.reasons),
            "rejected": [{"backend": b, "reason": r} for b, r in self.rejected],
            "accelerator": p.accelerator if p else None,
            "gpuProduct": p.gpu.product if p and p.gpu else None,
            "gpusPerReplica": p.gpus_per_replica if p else 0,
            "tensorParallelSize": p.tensor_parallel_size if p else 0,
            "nodes": p.pipeline_parallel if p and p.gpu else None,
            "gpusPerNode": p.gpus_per_node if p and p.gpu else None,
            "pipelineParallelSize": p.pipeline_parallel if p and p.gpu else None,
            "batching": self.batching.strategy if self.batching else None,
            "prefixCache": self.prefix_cache,
            "speculativeDecoding": self.speculation.to_json(),
            "unsupported": list(self.unsupported),
        }
        if self.memory:
            out["memory"] = self.memory.to_api().wire()
        if self.estimate:
            out["estimate"] = dict(self.estimate)
        if self.plan is not None:
            out["plan"] = {
                "tokensPerSequence": self.plan.tokens_per_sequence,
                "sequencesPerReplica": self.plan.sequences,
                "replicasNeeded": self.plan.replicas,
            }
            if self.plan.slots:
                out["plan"]["slots"] = self.plan.slots
        if self.multi_node is not None:
            out["multiNode"] = self.multi_node.to_json()
        if self.adapters.items:
            out["adapters"] = {"names": list(self.adapters.names), "maxRank": self.adapters.max_rank}
            if self.adapters.lora_ids is not None:
                out["adapters"]["loraIds"] = dict(self.adapters.lora_ids)
        return out

    def to_status(self) -> api.Decision:
        p = self.placement
        placement = None
        if p is not None:
            placement = api.Placement(
                accelerator="gpu" if p.gpu else "cpu",
                gpu_product=bounded([p.gpu.product], 1, 253)[0] if p.gpu else None,
                gpus_per_replica=p.gpus_per_replica,
                tensor_parallel_size=p.tensor_parallel_size,
                gpu_resource=bounded([p.gpu.resource], 1, 317)[0] if p.gpu else None,
                node_selector=(dict(pod_selector(p.gpu)) or None) if p.gpu and p.gpu.selector else None,
                nodes=p.pipeline_parallel if p.gpu else None,
                gpus_per_node=p.gpus_per_node if p.gpu else None,
                pipeline_parallel_size=p.pipeline_parallel if p.gpu else None,
            )
        elif self.multi_node is not None:
            mn = self.multi_node
            placement = api.Placement(
                accelerator="gpu",
                gpu_product=bounded([mn.gpu.product], 1, 253)[0],
                gpus_per_replica=mn.gpus_per_node * mn.nodes,
                tensor_parallel_size=mn.gpus_per_node,
                gpu_resource=mn.gpu.resource,
                nodes=mn.nodes,
                gpus_per_node=mn.gpus_per_node,
                pipeline_parallel_size=mn.nodes,
            )
        rejected = self.rejected[: api.MAX_REASONS]
        return api.Decision(
            reasons=bounded(self.reasons),
            rejected=[
                api.Rejection.model_validate({"backend": b, "reason": r})
                for (b, _), r in zip(rejected, bounded([r for _, r in rejected]), strict=True)
            ],
            placement=placement,
            memory=self.memory.to_api() if self.memory else None,
            estimate=_estimate(self.estimate),
            batching=self.batching.strategy if self.batching else None,
            unsupported=bounded(self.unsupported),
            avoided=_avoided(self.avoided),
        )


def _estimate(est: dict[str, float | str]) -> api.EstimateReport | None:
    if not est:
        return None
    body = dict(est)
    body["source"] = bounded([str(est.get("source", ""))])[0]
    return api.EstimateReport.model_validate(body)


def _avoided(avoided: tuple[Current, str] | None) -> api.Avoided | None:
    if avoided is None:
        return None
    current, why = avoided
    placement = api.Placement(
        accelerator="gpu" if current.gpu_product else "cpu",
        gpu_product=current.gpu_product,
        gpus_per_replica=current.gpus_per_replica,
        tensor_parallel_size=current.gpus_per_replica,
        node_selector=dict(current.gpu_selector) if current.gpu_selector else None,
    )
    return api.Avoided(backend=current.engine, placement=placement, reason=bounded([why])[0])
