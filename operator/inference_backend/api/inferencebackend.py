"""The InferenceBackend kind: one served model, its objectives and how to serve it."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from inference_backend.api.common import (
    ARG_NAME_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    GGUF_QUANTIZATIONS,
    IMAGE_PATTERN,
    INT64_MAX,
    LABEL_KEYS_RULE,
    MAX_LIST,
    MAX_MAP,
    MAX_STR,
    PARAMETERS_PATTERN,
    PVC_CLAIM_RULE,
    URI_PATTERN,
    ApiModel,
    Condition,
    DType,
    EnvVar,
    Format,
    Int,
    LabelMap,
    Quantity,
    Quantization,
    ResourceRequirements,
    Toleration,
    pvc_claim_ok,
    sub,
)
from inference_backend.api.model import BackendMeta

Engine = Literal["vllm", "tgi", "sglang", "llamacpp", "onnxruntime", "pytorch"]
"""The engines' names, in registry order: equal to inference_backend.engines.NAMES (tests/test_engine_cards.py).
What each engine can do is on its card (engines/<name>.py), not here."""
Backend = Literal["auto", Engine]
Strategy = Literal["auto", "static", "dynamic", "continuous"]
Phase = Literal["Pending", "Deploying", "Ready", "Degraded", "Failed"]
MAX_REASONS = 64
"""Entries of status.decision.reasons, rejected and unsupported (the CRD's maxItems; status.py elides beyond)."""
MAX_REASON = 1024
"""Characters of one reason (the CRD's maxLength; status.py truncates beyond)."""
_GGUF_LIST = "[" + ", ".join(f"'{q}'" for q in sorted(GGUF_QUANTIZATIONS)) + "]"


HOST_PATH_PATTERN = r"^(/([^/.][^/]*|\.[^/.][^/]*|\.\.[^/]+))+/?$"
"""An absolute path below /, without . or .. segments."""


class ModelCache(ApiModel):
    """Where downloaded weights are kept across pod restarts and shared by the replicas (docs/artifacts.md): the
    first pod's fetch init container downloads into it and marks the copy complete, later pods and restarts find it
    and download nothing; the engine mounts it read-only. For s3://, gs://, https:// and hf:// weights."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.pvc), has(self.hostPath), has(self.storageClass)].filter(x, x).size() == 1",
                    "message": "model.cache: set one of pvc, storageClass and hostPath",
                },
                {
                    "rule": "!has(self.size) || has(self.pvc) || has(self.storageClass)",
                    "message": "model.cache.size applies to model.cache.pvc and model.cache.storageClass",
                },
            ]
        }
    }
    pvc: str | None = Field(default=None, pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of an existing PersistentVolumeClaim in the namespace (ReadWriteMany for replicas on several nodes).
    The pod gets fsGroup 65532, the fetch step's user, so it can write there."""
    storage_class: str | None = Field(default=None, pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """A StorageClass: the operator creates a PersistentVolumeClaim ``<name>-weights`` of it, owned by the
    InferenceBackend (deleted with it) and sized from the weights (``size`` when given), ReadWriteMany when several
    pods share it (replicas, autoscaling.maxReplicas or a replica across nodes above 1), else ReadWriteOnce; the
    first pod downloads into it once. The class must offer that access mode (RWX: a file store)."""
    size: Quantity | None = None
    """The claim's capacity: with ``pvc``, the operator refuses a cache smaller than the weights need (it does not
    create or resize that claim); with ``storageClass``, the size of the claim it creates."""
    host_path: str | None = Field(default=None, pattern=HOST_PATH_PATTERN, max_length=4096)
    """A directory on each node (hostPath, created when missing, writable by uid 65532): every node downloads once.
    Pod Security "restricted" (and "baseline") refuse hostPath volumes: such a namespace rejects the pods."""

    @model_validator(mode="after")
    def _one_of(self) -> ModelCache:
        if [self.pvc, self.host_path, self.storage_class].count(None) != 2:
            raise ValueError("model.cache: set one of pvc, storageClass and hostPath")
        if self.size is not None and self.pvc is None and self.storage_class is None:
            raise ValueError("model.cache.size applies to model.cache.pvc and model.cache.storageClass")
        return self


class ModelSource(ApiModel):
    """The model to serve: a registered Model (modelRef), inline facts (uri and the rest), or both (inline facts
    override the registered ones)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {"rule": "has(self.modelRef) || has(self.uri)", "message": "set model.modelRef or model.uri"},
                {
                    "rule": "!has(self.quantization) || !(self.quantization in " + _GGUF_LIST + ")"
                    " || !has(self.format) || self.format == 'gguf'",
                    "message": "model.quantization is a GGUF type: model.format must be gguf",
                },
                PVC_CLAIM_RULE,
            ]
        }
    }
    model_ref: str | None = Field(default=None, pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of a Model in the same namespace."""
    uri: str | None = Field(default=None, pattern=URI_PATTERN, max_length=2048)
    """Where the weights are: hf://org/name, s3://bucket/path, gs://bucket/path, pvc://claim/path, oci://image,
    https://host/file."""
    format: Format | None = None
    """Weight format: safetensors, gguf, onnx or pytorch (inferred from the uri where it is plain)."""
    architecture: str | None = Field(default=None, max_length=256)
    """Hugging Face architecture class, e.g. LlamaForCausalLM."""
    parameters: str | None = Field(default=None, pattern=PARAMETERS_PATTERN, max_length=16)
    """Parameter count: 350M, 1.5B, 8B, 70B. Needed to size the model."""
    dtype: DType | None = None
    """Weight dtype: float32, float16, bfloat16, fp8, int8 or int4."""
    quantization: Quantization | None = None
    """Weight quantization: none, awq, gptq, fp8, int8, bitsandbytes, or a GGUF type (q4_k_m, q8_0, ...)."""
    context_length: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Maximum context length in tokens served (the engine's max model length)."""
    served_name: str | None = Field(default=None, min_length=1, max_length=256, pattern=ARG_NAME_PATTERN)
    """Name clients send in OpenAI-style requests (default: the InferenceBackend's name): no whitespace or control
    characters, not starting with "-"."""
    credentials_secret: str | None = Field(default=None, pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of a Secret with the token for the model store (key HF_TOKEN for hf://, with an optional HF_ENDPOINT: a
    Hub mirror or private Hub URL; AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, optional AWS_ENDPOINT_URL and
    AWS_REGION for s3://; GOOGLE_APPLICATION_CREDENTIALS_JSON for gs://). Never inline tokens."""
    cache: ModelCache | None = None
    """Keep downloaded weights across restarts and share them between replicas: a PVC or a node path (absent: an
    emptyDir per pod, downloaded at every start)."""

    @model_validator(mode="after")
    def _cross_fields(self) -> ModelSource:  # mirrors the CEL rules above, for the offline CLI
        if self.model_ref is None and self.uri is None:
            raise ValueError("set model.modelRef or model.uri")
        if self.quantization in GGUF_QUANTIZATIONS and self.format not in (None, "gguf"):
            raise ValueError("model.quantization is a GGUF type: model.format must be gguf")
        if not pvc_claim_ok(self.uri):
            raise ValueError(PVC_CLAIM_RULE["message"])
        return self


class Objectives(ApiModel):
    """What the selection tree balances. Absent fields are not targets. The load (concurrency or
    requestsPerSecond) is that of the whole service, all replicas together: the planner divides it over the
    replicas it plans; the latency targets hold for every request at that load."""

    ttft_millis: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Target p95 time to first token at the stated load, in milliseconds."""
    tpot_millis: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Target median time per output token of one request (after its first token) at the stated load, in
    milliseconds."""
    tokens_per_second: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Target output tokens per second of the whole service, all replicas together."""
    concurrency: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Expected concurrent requests to the whole service (all replicas together): the load, as a number of requests
    in flight. Give this or requestsPerSecond."""
    requests_per_second: float | None = Field(default=None, gt=0, le=1e9)
    """Expected requests per second arriving at the whole service (all replicas together): the load, as a rate.
    Give this or concurrency (when both are given, concurrency is the load and this is checked as a rate the
    service must sustain)."""
    prompt_tokens: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Typical prompt length per request, in tokens (default 512): with outputTokens, the KV cache one request
    holds, which sizes concurrency (the engines allocate KV pages on demand, not a full context per request), and
    the prefill work of a request."""
    output_tokens: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Typical output length per request, in tokens (default 256)."""


class Hardware(ApiModel):
    """Where the model may run."""

    accelerator: Literal["auto", "gpu", "cpu"] = "auto"
    """auto (a GPU when one fits, else CPU), gpu or cpu."""
    gpu_products: list[Annotated[str, Field(min_length=1, max_length=63)]] = Field(default_factory=list, max_length=32)
    """Preferred nvidia.com/gpu.product values, most preferred first."""
    node_selector: LabelMap = Field(
        default_factory=dict, max_length=MAX_MAP, json_schema_extra={"x-kubernetes-validations": [LABEL_KEYS_RULE]}
    )
    """Node labels the engine pod must match (also restricts the nodes the selection considers)."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=MAX_LIST)
    """Tolerations for the engine pod (tainted nodes are candidates only when tolerated)."""


class Batching(ApiModel):
    """How requests are batched. Absent sizes take the engine's defaults."""

    strategy: Strategy = "auto"
    """auto (the best the engine has: continuous, then dynamic, then static), static, dynamic or continuous."""
    max_batch_size: Int | None = Field(default=None, ge=1, le=65536)
    """Sequences in one batch."""
    max_batch_tokens: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Tokens in one forward pass (prefill budget)."""
    max_wait_millis: Int | None = Field(default=None, ge=0, le=60000)
    """Dynamic batching window: how long to wait for more requests before running a batch."""


class KVCache(ApiModel):
    """KV cache sizing."""

    memory_fraction: float = Field(default=0.9, gt=0, le=1)
    """Share of accelerator (or node) memory the engine may take for weights and KV cache, in (0, 1]."""
    block_size: Int = Field(default=16, ge=1, le=256)
    """PagedAttention block size in tokens, where the engine has blocks."""
    dtype: Literal["auto", "fp8", "float16", "bfloat16", "q8_0", "q4_0"] = "auto"
    """KV cache dtype: auto (the model's), fp8, float16, bfloat16, or the block-quantized types q8_0 and q4_0."""
    cpu_offload_gi_b: float = Field(default=0, ge=0, le=1048576, alias="cpuOffloadGiB")
    """CPU memory for KV offload/swap, in GiB (0 = none, at most 1048576 = 1 PiB)."""


class PrefixCache(ApiModel):
    """Reuse of the KV cache of shared prompt prefixes."""

    enabled: bool = True
    """Reuse the KV cache of shared prompt prefixes (on by default)."""


class SpeculativeDecoding(ApiModel):
    """Speculative decoding: a draft proposes tokens, the target verifies them in one pass."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.method != 'draft' || has(self.draftModelRef)",
                    "message": "speculativeDecoding.draftModelRef is required when method is draft",
                },
            ]
        }
    }
    draft_model_ref: str | None = Field(default=None, pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """A registered Model used as the draft; it must share tokenizer and vocabulary with the target."""
    num_speculative_tokens: Int = Field(default=5, ge=1, le=16)
    """Draft tokens verified per step (the verification block), 1 to 16."""
    method: Literal["draft", "ngram"] = "draft"
    """draft (a draft model) or ngram (prompt lookup, no draft model)."""

    @model_validator(mode="after")
    def _cross_fields(self) -> SpeculativeDecoding:
        if self.method == "draft" and self.draft_model_ref is None:
            raise ValueError("speculativeDecoding.draftModelRef is required when method is draft")
        return self


class EngineOverrides(ApiModel):
    """Escape hatches, applied last and validated: an extra arg may not repeat a flag the operator sets."""

    image: str = Field(default="", pattern=IMAGE_PATTERN, max_length=MAX_STR)
    """Override the engine image (default: the pinned image of the chosen engine)."""
    extra_args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=128)
    """Extra engine arguments appended after the rendered ones."""
    env: list[EnvVar] = Field(default_factory=list, max_length=MAX_LIST)
    """Extra environment variables for the engine container."""


ScalingMetric = Literal["queueDepth", "runningRequests", "kvCacheUsage", "ttft"]
"""What the autoscaler scales on, each read from the chosen engine's own Prometheus metric (its card's
``autoscaling``; docs/autoscaling.md): queueDepth (requests waiting), runningRequests (requests being generated),
kvCacheUsage (share of the KV cache in use, percent) and ttft (p95 time to first token, milliseconds)."""
MAX_REPLICAS = 1000
"""The bound of spec.replicas, minReplicas and maxReplicas."""
MAX_STABILIZATION = 3600
"""The HPA's bound on a stabilization window (autoscaling/v2 HPAScalingRules: 0 to 3600 seconds)."""


class ScaleToZero(ApiModel):
    """The opt-in to autoscaling.minReplicas 0. At zero replicas no engine runs, so no engine metric exists: a
    query on something outside the engine (the gateway's or ingress's request rate for this backend) wakes it."""

    cooldown_seconds: Int = Field(ge=30, le=86400)
    """Seconds without load (every trigger at 0) before the last replica is removed (KEDA's cooldownPeriod), 30
    to 86400. Each wake-up is a cold start: the weights load again."""
    wake_query: str = Field(min_length=1, max_length=MAX_STR)
    """A PromQL query, on the operator's Prometheus, whose value is above 0 while clients want this backend (for
    example the ingress's request rate for its host). It wakes the backend from zero to one replica; the engine
    metric scales it from there."""


class ScalingBehavior(ApiModel):
    """How fast the replica count may follow the signal (the HPA's stabilization windows)."""

    scale_up_stabilization_seconds: Int | None = Field(default=None, ge=0, le=MAX_STABILIZATION)
    """Seconds of recommendations the HPA looks back over before scaling up (it takes their lowest); default 0."""
    scale_down_stabilization_seconds: Int | None = Field(default=None, ge=0, le=MAX_STABILIZATION)
    """Seconds of recommendations the HPA looks back over before scaling down (it takes their highest); default
    300."""


_AUTOSCALING_RULES = [
    {
        "rule": "self.minReplicas <= self.maxReplicas",
        "message": "autoscaling.minReplicas must be at most autoscaling.maxReplicas",
    },
    {
        "rule": "self.minReplicas > 0 || has(self.scaleToZero)",
        "message": "autoscaling.minReplicas 0 scales to zero: set autoscaling.scaleToZero (cooldownSeconds and "
        "wakeQuery) to opt in",
    },
    {
        "rule": "!has(self.scaleToZero) || self.minReplicas == 0",
        "message": "autoscaling.scaleToZero is set: autoscaling.minReplicas must be 0",
    },
    {
        "rule": "self.metric != 'kvCacheUsage' || self.target <= 100.0",
        "message": "autoscaling.target is a percentage of the KV cache for metric kvCacheUsage: at most 100",
    },
]


class Autoscaling(ApiModel):
    """Replicas that follow the load: the operator renders a KEDA ScaledObject on the chosen engine's own metric
    and stops owning the Deployment's replicas (docs/autoscaling.md)."""

    model_config = ApiModel.model_config | ConfigDict(
        json_schema_extra={"x-kubernetes-validations": _AUTOSCALING_RULES}  # type: ignore[dict-item]
    )
    min_replicas: Int = Field(default=1, ge=0, le=MAX_REPLICAS)
    """Fewest replicas (default 1). 0 (scale to zero) needs scaleToZero and an engine whose card allows it."""
    max_replicas: Int = Field(ge=1, le=MAX_REPLICAS)
    """Most replicas, 1 to 1000 (GPU capacity for them is not reserved up front: docs/autoscaling.md)."""
    metric: ScalingMetric
    """queueDepth, runningRequests, kvCacheUsage or ttft: read from the engine's own metric."""
    target: float = Field(gt=0, le=1_000_000)
    """The value per replica the autoscaler holds the metric at: requests waiting (queueDepth) or running
    (runningRequests) per replica, percent of the KV cache in use (kvCacheUsage, at most 100), or the p95 time to
    first token in milliseconds (ttft)."""
    scale_to_zero: ScaleToZero | None = None
    """The opt-in to minReplicas 0, with its cooldown and the query that wakes the backend."""
    behavior: ScalingBehavior = sub(ScalingBehavior)
    """Stabilization windows."""

    @model_validator(mode="after")
    def _cross_fields(self) -> Autoscaling:  # mirrors the CEL rules above, for the offline CLI
        for rule, field in zip(
            _AUTOSCALING_RULES,
            (
                self.min_replicas <= self.max_replicas,
                self.min_replicas > 0 or self.scale_to_zero is not None,
                self.scale_to_zero is None or self.min_replicas == 0,
                self.metric != "kvCacheUsage" or self.target <= 100,
            ),
            strict=True,
        ):
            if not field:
                raise ValueError(rule["message"])
        return self


class Rollout(ApiModel):
    """How a change of the pod template replaces the pods (docs/rollouts.md)."""

    strategy: Literal["auto", "surge", "recreate"] = "auto"
    """surge: start a new pod before stopping an old one (needs room for one more replica, GPUs included; while
    there is none, the change waits and the old pods keep serving). recreate: stop one old pod, then start its
    replacement (no extra GPUs; a one-replica backend is down meanwhile). auto: surge when the placement's pool has
    free devices for one more replica when the rollout starts (always on CPU), else recreate."""


ADAPTER_NAME_PATTERN = r"^[A-Za-z0-9_][-A-Za-z0-9_.:]*$"
"""An adapter's name: what clients put in the OpenAI ``model`` field, and the directory the adapter is fetched into
(so no "/" or "="; never a leading "-" or ".")."""
MAX_ADAPTERS = 64
MAX_ADAPTER_RANK = 1024


class Adapter(ApiModel):
    """A LoRA adapter served beside the base model under its own name (docs/adapters.md)."""

    name: str = Field(min_length=1, max_length=128, pattern=ADAPTER_NAME_PATTERN)
    """What clients put in the OpenAI ``model`` field to use this adapter (SGLang: ``<servedName>:<name>``; see
    docs/adapters.md). Letters, digits and ``_ - . :``, not starting with ``-`` or ``.``; unique in the list and
    different from the base model's served name."""
    uri: str = Field(pattern=URI_PATTERN, max_length=2048)
    """Where the adapter is, in any model store the weights may be in (hf://, s3://, gs://, https://, pvc://,
    oci://): a PEFT directory (adapter_config.json and adapter_model.safetensors), or for llama.cpp a GGUF adapter
    file. Fetched like the weights: the same init container, cache (spec.model.cache) and credentialsSecret."""
    rank: Int | None = Field(default=None, ge=1, le=MAX_ADAPTER_RANK)
    """The adapter's LoRA rank (adapter_config.json ``r``; `inference-backend model inspect DIR` prints it). When
    given, it is checked against the chosen engine's limit before anything is rendered and sizes the engine's
    adapter slots; when absent, the engine's default limit is assumed and the fetch step checks the file."""
    target_modules: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=64
    )
    """The modules the adapter adapts (adapter_config.json ``target_modules``), when known: checked against the
    modules the engine can adapt before rendering (the fetch step checks the file either way)."""


class InferencePoolRouting(ApiModel):
    """A Gateway API Inference Extension InferencePool over the backend's pods, with its endpoint picker."""

    enabled: bool = False
    """Render an InferencePool (inference.networking.k8s.io/v1) selecting the serving pods, and the endpoint picker
    it names (the Inference Extension's picker at the pinned release, with its Service and least RBAC). A Gateway's
    HTTPRoute then sends requests to the pool instead of the Service (docs/routing.md)."""


class Routing(ApiModel):
    """How requests reach the replicas."""

    inference_pool: InferencePoolRouting = sub(InferencePoolRouting)
    """Inference-aware routing through an InferencePool and its endpoint picker (off by default: the Service
    spreads requests blindly)."""


_ADAPTER_NAME_RULE = {
    "rule": "!has(self.adapters) || !has(self.model.servedName) || self.adapters.all(a, a.name != "
    "self.model.servedName)",
    "message": "adapters: an adapter's name is the base model's servedName",
}


class InferenceBackendSpec(ApiModel):
    """The desired serving of one model."""

    model_config = ApiModel.model_config | ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [_ADAPTER_NAME_RULE]}  # type: ignore[list-item]
    )

    # Rules that depend on what the engines can do (a GPU-only engine on CPU, a KV cache type only some engines
    # have) are made from the engine cards: engines/rules.py, written into the CRD by crdgen.py.

    model: ModelSource
    """The model to serve."""
    backend: Backend = "auto"
    """auto (let the selection tree decide) or one engine. An explicit backend is honoured or refused with reasons,
    never replaced. (The CRD's text lists the engines from their cards.)"""
    objectives: Objectives = sub(Objectives)
    """Latency and throughput targets the selection balances."""
    hardware: Hardware = sub(Hardware)
    """Hardware preferences and scheduling constraints."""
    batching: Batching = sub(Batching)
    """Request batching."""
    kv_cache: KVCache = sub(KVCache)
    """KV cache sizing."""
    prefix_cache: PrefixCache = sub(PrefixCache)
    """Prefix caching."""
    speculative_decoding: SpeculativeDecoding | None = None
    """Speculative decoding; absent means off."""
    replicas: Int = Field(default=1, ge=0, le=MAX_REPLICAS)
    """Engine replicas (what `kubectl scale ib` sets, through the scale subresource). With spec.autoscaling the
    autoscaler sets the Deployment's replicas instead, and this field is not used."""
    engine: EngineOverrides = sub(EngineOverrides)
    """Escape hatches for the engine container."""
    resources: ResourceRequirements | None = None
    """Override the engine container's requests/limits (default: derived from the decision)."""
    rollout: Rollout = sub(Rollout)
    """How pods are replaced when the pod template changes."""
    autoscaling: Autoscaling | None = None
    """Replicas that follow the load (absent: spec.replicas, fixed)."""
    adapters: list[Adapter] = Field(
        default_factory=list,
        max_length=MAX_ADAPTERS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """LoRA adapters served beside the base model, each under its own name (docs/adapters.md). An engine that
    serves none is not selected (and an explicit one is refused, naming spec.adapters)."""

    routing: Routing = sub(Routing)
    """Inference-aware routing (docs/routing.md)."""

    @model_validator(mode="after")
    def _adapter_names(self) -> InferenceBackendSpec:  # the CRD's list-map keys hold names unique too
        seen: set[str] = set()
        for i, adapter in enumerate(self.adapters):
            if adapter.name in seen:
                raise ValueError(f"adapters[{i}].name {adapter.name!r} is listed twice")
            if adapter.name == self.model.served_name:
                raise ValueError(f"adapters[{i}].name {adapter.name!r} is the base model's servedName")
            seen.add(adapter.name)
        return self


class Rejection(ApiModel):
    """A candidate engine that was not chosen."""

    backend: Engine
    """The engine."""
    reason: str = Field(max_length=MAX_REASON)
    """Why it was not chosen."""


class Placement(ApiModel):
    """Where and how wide one replica runs."""

    accelerator: Literal["gpu", "cpu"] | None = None
    """gpu or cpu."""
    gpu_product: str | None = Field(default=None, max_length=253)
    """nvidia.com/gpu.product of the chosen nodes."""
    gpus_per_replica: Int = Field(default=0, ge=0, le=INT64_MAX)
    """GPUs per replica over all its nodes (nodes x gpusPerNode; 0 on CPU)."""
    tensor_parallel_size: Int = Field(default=0, ge=0, le=INT64_MAX)
    """Tensor-parallel degree (gpusPerReplica / pipelineParallelSize: the GPUs on each node; 0 on CPU)."""
    gpu_resource: str | None = Field(default=None, max_length=317)
    """Extended resource requested: nvidia.com/gpu, or nvidia.com/mig-<profile> for MIG slices."""
    node_selector: dict[str, str] | None = None
    """The node label identifying the GPU that the pods select (GFD's product, GKE's accelerator, Karpenter's GPU
    name, AMD's product name or the instance type): with gpuResource, the pool whose capacity is counted."""
    nodes: int | None = None
    """Nodes one replica spans (1 for a single-node placement; more when the model is larger than any one node: one
    LeaderWorkerSet group of that size per replica, a leader pod and nodes - 1 worker pods)."""
    gpus_per_node: int | None = None
    """GPUs of one replica on each of its nodes."""
    pipeline_parallel_size: int | None = None
    """Pipeline-parallel degree (stages across nodes; 1 on one node)."""


class MemoryReport(ApiModel):
    """The memory-fit arithmetic, in GiB."""

    weights_gi_b: float = Field(alias="weightsGiB")
    """Model weights (plus draft weights when speculating)."""
    kv_cache_gi_b: float = Field(alias="kvCacheGiB")
    """Memory left for the KV cache after weights and overhead."""
    required_gi_b: float = Field(alias="requiredGiB")
    """Weights + overhead + the KV cache of one full-context sequence."""
    available_gi_b: float = Field(alias="availableGiB")
    """memoryFraction x the memory of the GPUs of one replica (or of the node, on CPU)."""


class EstimateReport(ApiModel):
    """What one replica of the chosen placement is estimated to deliver at the per-replica share of the stated
    load (selection/workload.py; docs/engine-profiles.md gives the model and its measured error)."""

    ttft_millis: float = Field(ge=0)
    """Median time to first token, ms."""
    ttft_p95_millis: float = Field(ge=0)
    """95th-percentile time to first token, ms (what objectives.ttftMillis is compared with)."""
    tpot_millis: float = Field(ge=0)
    """Median time per output token of one request, ms."""
    tokens_per_second: float = Field(ge=0)
    """Output tokens per second of one replica at that load, all streams together."""
    concurrency: float = Field(ge=0)
    """Requests in one replica at that load (a requestsPerSecond load converted by Little's law)."""
    source: str = Field(max_length=MAX_REASON)
    """The data the estimate comes from: an aiconfigurator table, a measured CPU row, or the roofline with fitted
    efficiencies (each with its source)."""


class Avoided(ApiModel):
    """A placement the operator left because its pods stayed unschedulable past the grace period."""

    backend: str = Field(max_length=64)
    """The engine that was placed there."""
    placement: Placement
    """Where its pods could not be scheduled."""
    reason: str = Field(max_length=MAX_REASON)
    """How long, and the scheduler's message."""


class Decision(ApiModel):
    """The selection's outcome and how it got there."""

    reasons: list[Annotated[str, Field(max_length=MAX_REASON)]] = Field(default_factory=list, max_length=MAX_REASONS)
    """The decision path, in order (at most 64 entries of 1024 characters: the operator elides the middle)."""
    rejected: list[Rejection] = Field(default_factory=list, max_length=MAX_REASONS)
    """Candidates not chosen, each with its reason."""
    placement: Placement | None = None
    """Hardware of one replica."""
    memory: MemoryReport | None = None
    """Memory fit of one replica."""
    estimate: EstimateReport | None = None
    """Estimated performance of one replica at the stated load."""
    batching: str | None = Field(default=None, max_length=64)
    """The batching strategy in effect."""
    unsupported: list[Annotated[str, Field(max_length=MAX_REASON)]] = Field(
        default_factory=list, max_length=MAX_REASONS
    )
    """Requested features the chosen engine lacks, and what is done instead."""
    avoided: Avoided | None = None
    """The placement left for this one, when its pods stayed unschedulable past the grace period."""


class RolloutStatus(ApiModel):
    """The rollout strategy in effect (spec.rollout resolved)."""

    strategy: Literal["surge", "recreate"]
    """surge (maxSurge 1, maxUnavailable 0) or recreate (maxSurge 0, maxUnavailable 1)."""
    reason: str = Field(max_length=MAX_REASON)
    """Why: the spec's choice, or what auto found (the free devices of the pool)."""


class AutoscalingStatus(ApiModel):
    """The autoscaler the operator rendered for spec.autoscaling, as last applied."""

    scaled_object: str = Field(max_length=253)
    """The KEDA ScaledObject's name (in the backend's namespace)."""
    target: str = Field(max_length=300)
    """What it scales: Deployment/<name>."""
    metric: str = Field(max_length=MAX_REASON)
    """The engine metric the trigger reads, and its source."""
    query: str = Field(max_length=4096)
    """The PromQL query of the trigger."""
    applied_hash: str = Field(max_length=64)
    """Hash of the ScaledObject last applied (the operator applies it again only when it changes)."""


class RoutingStatus(ApiModel):
    """spec.routing.inferencePool as applied."""

    inference_pool: str = Field(max_length=253)
    """The InferencePool's name (the backend's), for a Gateway's HTTPRoute backendRef."""
    endpoint_picker: str = Field(max_length=63)
    """The endpoint picker's Deployment and Service."""
    applied_hash: str | None = Field(default=None, max_length=64)
    """Hash of the InferencePool last applied."""
    message: str | None = Field(default=None, max_length=MAX_REASON)
    """Why the pool is not applied (its CRD is not installed), while that holds."""
    scorers: list[Annotated[str, Field(max_length=MAX_REASON)]] | None = Field(default=None, max_length=8)
    """The endpoint picker's scorers: each with its weight and the engine metric it reads, or why it is left out
    (the engine exports no such metric, its prefix cache is off, no spec.adapters)."""


class ReplicaAdapters(ApiModel):
    """The LoRA adapters one serving pod's engine lists (its GET /v1/models)."""

    pod: str = Field(max_length=253)
    """The pod's name."""
    adapters: list[Annotated[str, Field(max_length=MAX_STR)]] = Field(default_factory=list, max_length=256)
    """The adapter names it serves, sorted."""


class InferenceBackendStatus(ApiModel):
    """Observed state, written by the operator only."""

    observed_generation: Int | None = Field(default=None, ge=0, le=INT64_MAX)
    """The metadata.generation last reconciled."""
    phase: Phase | None = None
    """Pending, Deploying, Ready, Degraded or Failed."""
    backend: str | None = Field(default=None, max_length=64)
    """The engine chosen."""
    decision: Decision | None = None
    """Why this engine and placement."""
    endpoint: str | None = Field(default=None, max_length=MAX_STR)
    """In-cluster URL of the OpenAI-compatible API."""
    replicas: Int | None = Field(default=None, ge=0, le=INT64_MAX)
    """Desired replicas: the Deployment's (the scale subresource's status.replicas)."""
    selector: str | None = Field(default=None, max_length=MAX_STR)
    """The label selector of the backend's pods, as a string (the scale subresource's labelSelectorPath, which an
    HPA on the InferenceBackend reads)."""
    ready_replicas: Int | None = Field(default=None, ge=0, le=INT64_MAX)
    """Replicas ready to serve."""
    ready: str | None = Field(default=None, max_length=64)
    """readyReplicas/replicas, for kubectl get."""
    spec_hash: str | None = Field(default=None, max_length=128)
    """Hash of the rendered pod template last applied."""
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    """BackendSelected, Fits, SpeculativeDecoding, Ready, Reconciled, (with spec.autoscaling) Autoscaling and (with
    adapters loaded while the pods serve) AdaptersLoaded."""
    rollout: RolloutStatus | None = None
    """The strategy of the Deployment's rollouts, and why."""
    autoscaling: AutoscalingStatus | None = None
    """The autoscaler rendered for spec.autoscaling (absent without it)."""
    routing: RoutingStatus | None = None
    """The InferencePool and endpoint picker of spec.routing.inferencePool (absent without it)."""
    adapters: list[ReplicaAdapters] | None = Field(default=None, max_length=1024)
    """spec.adapters loaded while the pods serve (docs/adapters.md): the adapters each ready replica serves, read
    from its engine (absent where the adapters are given at start)."""


class InferenceBackend(ApiModel):
    """One served model (kind InferenceBackend, short name ib)."""

    KIND: ClassVar[str] = "InferenceBackend"
    api_version: Literal["serving.inferencebackend.io/v1alpha1"] = "serving.inferencebackend.io/v1alpha1"
    """API version."""
    kind: Literal["InferenceBackend"] = "InferenceBackend"
    """Kind."""
    metadata: BackendMeta
    """Standard object metadata."""
    spec: InferenceBackendSpec
    """Desired state."""
    status: InferenceBackendStatus | None = None
    """Observed state."""

    def as_dict(self) -> dict[str, Any]:
        return self.wire()
