"""What an engine is and can do: its card, declared in the engine's own module beside its renderer.

The selection tree, the renderer dispatch, the CRD generator and the benchmarks read engines only through the
registry of cards (``inference_backend.engines.REGISTRY``); nothing outside ``engines/`` names an engine to decide
what it can do. A card has no optional fields: ``tests/test_engine_cards.py`` fails when one is left empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Literal

from inference_backend.engines.base import Endpoints, FlagBound, Renderer

Accelerator = Literal["gpu", "cpu"]
GpuVendor = Literal["nvidia", "amd", "habana"]
Float32OnGpu = Literal["float32", "float16"]


@dataclass(frozen=True)
class MeasuredRow:
    """One engine measured at a real model shape and weight format on a reference machine (bench/profiles_7b.py).

    The selection prefers such a row to the scaled profile wherever the model's weight format matches."""

    weights: str
    """Weight format as the selection names it: a quantization (``q8_0``, ``q4_k_m``, ``int4``) or a dtype."""
    parameters: int
    bytes_per_param: float
    """Weight bytes of the served file(s) per parameter."""
    cores: int
    prompt_tokens: int
    ttft_ms: float
    """Time to first token of one ``prompt_tokens`` prompt at concurrency 1."""
    tokens_per_second_1: float
    """Output tokens/s of one stream."""
    tokens_per_second_8: float
    """Aggregate output tokens/s at concurrency 8."""
    peak_rss_gib: float
    provenance: str
    """"measured: <hardware, model shape, engine version, date, command>"."""
    tokens_per_second_at: tuple[tuple[int, float], ...] = ()
    """(concurrency, aggregate output tokens/s) at further loads (``--concurrency 4,16``): the batch growth the
    workload model reads besides concurrency 1 and 8."""


@dataclass(frozen=True)
class Profile:
    """Performance of one engine on a reference machine, for a 7B model; scaled by the selection."""

    ttft_ms: float
    """p95 time to first token for a 512-token prompt at low load."""
    tokens_per_second: float
    """Aggregate output tokens/s of one replica at saturation."""
    memory_gib_per_7b: float
    """Memory taken by a 7B model's weights plus runtime (before KV cache)."""
    bytes_per_param: float
    """Weight bytes per parameter of the reference model (decoding speed scales with the bytes read)."""
    provenance: str
    """Where the values come from: "measured: <hardware, model, engine version, date, command>", "published: <source>"
    or "estimate: <reasoning>"."""
    reference_cores: int = 16
    """CPU rows: the cores the reference measurement used (the selection scales by a node's cores over these)."""
    measured: tuple[MeasuredRow, ...] = ()
    """Rows measured at a real shape (7B) per weight format; preferred to the scaled figures above where they match."""


@dataclass(frozen=True)
class Efficiency:
    """One engine's efficiencies on one vendor's devices: the few physically meaningful factors the workload model
    (selection/workload.py) fits per engine and vendor, with their source."""

    prefill: float
    """Share of the dense tensor rate its prefill GEMMs reach."""
    decode: float
    """Share of the memory bandwidth its decode steps reach."""
    step_ms: float
    """Fixed time per engine step beyond the kernels (scheduler, sampling, launch gaps)."""
    seq_us: float
    """Time per running sequence per step beyond the kernels (bookkeeping, sampling, detokenisation)."""
    request_ms: float
    """Time per request outside the steps (HTTP, tokenisation), added to TTFT."""
    source: str
    layer_us: float = 0.0
    """Host time per layer per step to launch its kernels (eager engines without CUDA graphs): a step takes at
    least ``layers x layer_us``, whatever the devices' speed."""
    burst: float = 0.1
    """Share of a synchronized wave's prefill queue a request in a closed loop of c users waits beyond the
    steady-state queue: how far the benchmark's users stay in step (all started together, equal lengths) and how the
    scheduler admits such a wave (vLLM >= 0.6 mixes it into decode steps by chunks; SGLang's default and older
    engines prefill the waiting prompts first, together). A burst (requests sent together, once) is simulated step
    by step instead (selection/workload.py ``burst``)."""
    moe: float = 1.0
    """Share of its dense prefill rate a mixture of experts' token computations reach: the expert GEMMs each run
    over the few tokens routed to them, behind the router's permutes (1: as dense)."""
    bandwidth_gbs: float = 0.0
    """The most memory bandwidth per device (GB/s) its decode kernels draw, whatever the part offers (0: no such
    ceiling): kernels that keep too few bytes in flight to fill HBM (llama.cpp's matrix-vector kernels, one block
    per row) stop near this on A100s and H100s while reaching their share of a GDDR part's."""
    kv: float = 0.0
    """Share of the memory bandwidth its decode attention reaches reading the KV cache (0: ``decode``'s, as its
    weight GEMMs): a separate kernel (paged attention, or llama.cpp's KQ/KQV matrix products without flash
    attention) whose reads grow with every sequence's context; where a length sweep of one engine and device shows
    the time per token growing with context far faster than the KV bytes over ``decode``'s bandwidth (ROCm vLLM
    0.6 and llama.cpp HIP on MI300X in LLM-Inference-Bench), this is that slower rate."""


FITTED = "fitted by bench/perf_model.py (make bench-model) to the calibration set's non-held-out rows"
"""Source of a fitted factor (tests/data/perf-calibration/, docs/engine-profiles.md)."""


@dataclass(frozen=True)
class Performance:
    """What the workload model needs of an engine beyond the devices: its efficiencies and its batch."""

    efficiency: Mapping[str, Efficiency]
    """GPU vendor -> efficiencies of the pinned release (a vendor missing here: its NVIDIA factors, derated)."""
    max_sequences: int
    """The most sequences one replica decodes together by default; 0 when only the KV cache bounds them."""
    max_sequences_source: str
    older: tuple[tuple[str, str, Efficiency], ...] = ()
    """(vendor, first release without them, efficiencies) of older releases, oldest first: a calibration row that
    names such a release is rated with the first entry whose cut-off is after it (the operator runs the pinned
    release)."""
    variants: tuple[tuple[str, str, Efficiency], ...] = ()
    """(vendor, variant, efficiencies) of another way of running the engine that published rows measured and the
    operator does not render (PyTorch compiled by gpt-fast's torch.compile with CUDA graphs, where our runner runs
    transformers' eager forward): rows of that variant are rated, fitted and reported with these, apart."""
    formats: tuple[tuple[str, str, Efficiency], ...] = ()
    """(vendor, compute format, efficiencies) where the engine runs another code path on that vendor's devices for
    that format (ROCm vLLM's FP8 GEMMs and attention, tuned by AMD, against its untuned 16-bit path): placements
    computing in that format are rated with these, before any older release's."""
    max_sequences_large_gpu: int = 0
    """On GPUs of 70 GiB or more, when the default differs there (vLLM)."""
    large_gpu_except: tuple[str, ...] = ()
    """GPU products (lower-case substrings of the name) that keep the smaller defaults whatever their memory (vLLM:
    A100s)."""
    aiconfigurator: str = ""
    """aiconfigurator's backend whose tables rate the engine (selection/perf_tables.py: its own, or for TGI 3.x
    vLLM's), else ""."""
    table_ttft: bool = True
    """Whether the tables' TTFT corrects the roofline's (their TPOT always does); False where the engine's measured
    rows say the table's TTFT is further off than the roofline's (table_ttft_source says by how much)."""
    table_ttft_source: str = ""
    step_tokens: int = 0
    """The most tokens (decoding sequences + prompt chunks) one step carries by default; 0: no such budget."""
    step_tokens_large_gpu: int = 0
    """The same on GPUs of 70 GiB or more, when it differs there (vLLM)."""
    step_tokens_source: str = ""
    micro_batch: int = 0
    """Tokens of a prompt one device processes at a time where layers are split over devices (llama.cpp's
    -ub): a prompt's micro-batches are pipelined through the devices; 0: no such pipelining."""


Signal = Literal["queueDepth", "runningRequests", "kvCacheUsage", "ttft"]
"""spec.autoscaling.metric values (the API's ScalingMetric)."""
SIGNALS: tuple[Signal, ...] = ("queueDepth", "runningRequests", "kvCacheUsage", "ttft")


@dataclass(frozen=True)
class ScalingSignal:
    """One engine metric an autoscaler reads for a spec.autoscaling.metric value."""

    metric: str
    """The Prometheus family as the engine exposes it on its metrics endpoint (a histogram's base name)."""
    kind: Literal["gauge", "histogram"]
    """gauge: summed over the backend's pods and divided by the replicas (the target is per replica); histogram:
    its p95 over the backend's pods (the target is the value to hold)."""
    scale: float
    """Factor from the engine's unit to the target's: 100 for a 0-1 ratio (the target is a percent), 1000 for
    seconds (the target is milliseconds), 1 otherwise."""
    source: str
    """Where the engine defines it: file and pinned version."""


@dataclass(frozen=True)
class Autoscaling:
    """What an autoscaler can read from the engine, and whether it may scale to zero."""

    signals: Mapping[Signal, ScalingSignal]
    """The spec.autoscaling.metric values the engine has a metric for; a value missing here is refused, naming
    spec.autoscaling.metric."""
    lacks: str
    """Why the missing signals are missing ("" when it has all four)."""
    scale_to_zero: bool
    """Whether spec.autoscaling.minReplicas 0 is allowed: a cold start (weights loaded again, no compile or graph
    capture) short enough for the first request after a wake-up to wait for."""
    cold_start: str
    """What a cold start of one replica costs, the reason for ``scale_to_zero``."""


@dataclass(frozen=True)
class Platforms:
    """The CPU architectures one image is published for, as ``kubernetes.io/arch`` values, with the source."""

    archs: frozenset[str]
    source: str


AdapterFormat = Literal["peft", "gguf"]


@dataclass(frozen=True)
class Lora:
    """What an engine does with LoRA adapters (spec.adapters), each limit with its upstream source."""

    serves: bool
    """Serves LoRA adapters beside the base model; when False, an InferenceBackend with spec.adapters is not placed
    on it (an explicit spec.backend is refused, naming spec.adapters), and ``how`` says why."""
    how: str
    """How a client selects an adapter (the OpenAI ``model`` field), or why the engine serves none."""
    formats: frozenset[AdapterFormat]
    """The adapter files it loads: peft (adapter_config.json + adapter_model.safetensors) or gguf (llama.cpp's
    convert_lora_to_gguf.py)."""
    max_rank: int
    """The largest adapter rank it serves (0 when it serves none)."""
    rank_choices: tuple[int, ...]
    """The values its maximum-rank flag accepts (the rendered value is the smallest one covering every adapter);
    empty when any rank up to ``max_rank`` is taken as is or no such flag is rendered."""
    default_rank: int
    """The rank limit rendered when no adapter declares its rank (spec.adapters[].rank): the fetch step refuses a
    file above it."""
    architectures: frozenset[str]
    """The base-model architectures (config.json architectures[0]) it applies LoRA to; empty: every one it serves."""
    target_modules: frozenset[str]
    """The modules an adapter may adapt; empty: any the base model has."""
    runtime: str
    """How adapters are loaded and unloaded while it runs (its endpoint and the setting that enables it), or "" when
    a change of spec.adapters rolls the pods out."""
    prefix_cache: bool
    """Its prefix cache stays on with adapters loaded (TGI turns it off)."""
    speculative: frozenset[str]
    """The speculation methods it keeps with adapters loaded (the others are turned off, with the reason)."""
    dora: bool
    """Serves DoRA adapters (adapter_config.json use_dora); the fetch step refuses them otherwise."""
    source: str
    """Where upstream says all of the above: files and the pinned version."""
    info_metric: str = ""
    """The gauge naming the adapters each replica runs and queues in the form the Gateway API Inference Extension's
    model-server protocol reads (vLLM's ``vllm:lora_requests_info``: labels running_lora_adapters,
    waiting_lora_adapters, max_lora), which the endpoint picker's LoRA affinity scorer reads (picker.py); "" where
    the engine exports none, and then the picker does not score adapters."""
    info_metric_source: str = ""
    """Where the engine defines ``info_metric``: file and pinned version."""
    by_index: bool = False
    """A request names an adapter by its index in spec.adapters (llama-server's ``lora`` field), not by its name in
    the OpenAI ``model`` field: the decision then publishes each name's index (``Adapters.lora_ids``)."""
    runtime_switch: str = ""
    """The environment variable that turns ``runtime`` on (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING), set where the
    operator loads adapters at run time (engines/lora.py ``runtime``); "" where it does not."""


NO_LORA_SOURCE = "this engine's module"


REFERENCE = {"gpu": "1x NVIDIA A100 80GB, Llama-2-7B bf16", "cpu": "this project's 2-core build machine, scaled to 7B"}
NOT_MEASURED_ON_GPU = "estimate: not measured on a GPU yet (bench/gpu/h200.sh measures it when a GPU is lent); "


@dataclass(frozen=True)
class EngineCard:
    """One engine's capabilities, quirks, images, endpoints and performance profile, with its renderer."""

    name: str
    """The spec.backend value (one word of the API's Engine Literal)."""
    title: str
    """The engine's own name, as its project writes it."""
    version: str
    """The pinned upstream release every flag in the engine's module is cited against."""
    formats: frozenset[str]
    """Weight formats it loads (spec.model.format)."""
    accelerators: frozenset[Accelerator]
    """Where it runs: "gpu", "cpu" or both."""
    batching: tuple[str, ...]
    """Batching strategies the engine has natively, best first (the first is used when the spec asks for another)."""
    prefix_cache: bool
    speculative: frozenset[str]
    """Speculative methods: draft (a draft model), ngram (prompt lookup)."""
    quantizations: frozenset[str]
    kv_dtypes: frozenset[str]
    """spec.kvCache.dtype values it has (besides auto, which every engine has)."""
    multi_gpu: bool
    """Can split one replica over several GPUs (tensor parallel or layer split)."""
    multi_node: bool
    """Can split one replica over several nodes (pipeline or tensor parallel across nodes) in the pinned release."""
    min_compute: tuple[int, int]
    """Lowest CUDA compute capability its GPU kernels support."""
    bf16_min_compute: tuple[int, int]
    """Lowest compute capability at which it computes in bfloat16 (below it a bfloat16 model is served in float16)."""
    own_hf_loader: bool
    """Loads ``hf://`` repositories itself; otherwise an init container fetches the weights into a volume."""
    kv_offload: bool
    """Honours spec.kvCache.cpuOffloadGiB (offloads KV blocks to host memory)."""
    float32_on_gpu: Float32OnGpu
    """The dtype a float32 checkpoint computes in on a GPU."""
    images: Mapping[Accelerator, str]
    """The pinned image per accelerator it runs on."""
    devices: Mapping[GpuVendor, str]
    """The GPU vendors its pinned release has a build for, each with its image (nvidia: the CUDA image, the same as
    ``images["gpu"]``; amd: ROCm/HIP; habana: Gaudi). A vendor missing here is one the selection never places it
    on, and the reasons say so."""
    platforms: Mapping[str, Platforms]
    """Per image it renders (every one of ``images`` and ``devices``): the architectures its registry publishes it
    for, with the source. The selection keeps only nodes whose ``kubernetes.io/arch`` the image has."""
    endpoints: Endpoints
    profiles: Mapping[Accelerator, Profile]
    """Performance per accelerator it runs on, each with provenance."""
    performance: Performance
    """Efficiencies per GPU vendor and the default batch, for the workload model (selection/workload.py)."""
    summary: str
    """One line for docs and `kubectl describe`: what it is best at."""
    render: Renderer
    layer_split: bool
    """Splits a replica over GPUs by layers (llama.cpp --split-mode layer), so no attention-head divisibility."""
    slots: bool
    """Runs a fixed number of slots, each allocating a full context up front (llama.cpp -np with -c = context x
    slots): the memory fit counts every slot."""
    run_as_user: int | None
    """The non-root uid its pods run as (pod securityContext runAsNonRoot/runAsUser/fsGroup, so a Pod Security
    "restricted" namespace admits them); None where the pinned image needs root, with the reason in ``run_as``."""
    run_as: str
    """Why: the image's USER (with its source), or what in the image needs root."""
    autoscaling: Autoscaling
    """The metrics spec.autoscaling scales on (each with its source) and whether it may scale to zero."""
    prefix_cache_caveat: str
    """Where ``prefix_cache`` does not hold for every model it loads (the selection cannot tell those models apart):
    said in the decision's "prefix cache: on" reason, so `kubectl describe` shows it."""
    auto_batching: Mapping[Accelerator, str]
    """The strategy ``batching.strategy: auto`` resolves to per accelerator, where it is not ``batching[0]`` (one of
    ``batching``)."""
    flag_bounds: Mapping[str, FlagBound]
    """Flags whose parser reads a bounded integer type (llama.cpp's int32s, TGI's u32s), each with its maximum and
    source: every rendered value is checked against it (engines/base.py check_bounds) and the spec field it comes
    from verbatim is bounded in the CRD by the smallest maximum (engines/rules.py). Empty where the flags are
    Python ints."""
    lora: Lora
    """LoRA adapters: whether it serves them, how a client names one, its limits and run-time loading."""

    @property
    def gpu_required(self) -> bool:
        return "cpu" not in self.accelerators

    def image_for(self, accelerator: Accelerator, vendor: str = "nvidia") -> str | None:
        """The pinned image of a placement: the vendor's build on a GPU, the CPU image on CPU."""
        if accelerator == "gpu":
            return next((image for v, image in self.devices.items() if v == vendor), None)
        return self.images.get("cpu")

    def missing(self) -> list[str]:
        """Fields left empty, and accelerators without an image or a profile (a complete card returns [])."""
        out = [f.name for f in fields(self) if f.name not in _MAY_BE_EMPTY and _empty(getattr(self, f.name))]
        for acc in sorted(self.accelerators):
            if acc not in self.images:
                out.append(f"images[{acc}]")
            if acc not in self.profiles:
                out.append(f"profiles[{acc}]")
        for image in sorted({*self.images.values(), *self.devices.values()}):
            if image not in self.platforms or not self.platforms[image].archs or not self.platforms[image].source:
                out.append(f"platforms[{image}]")
        if "gpu" in self.accelerators and self.devices.get("nvidia") != self.images.get("gpu"):
            out.append("devices[nvidia]")
        for acc, strategy in self.auto_batching.items():
            if acc not in self.accelerators or strategy not in self.batching:
                out.append(f"auto_batching[{acc}]")
        a = self.autoscaling
        if not a.signals:
            out.append("autoscaling.signals")
        if not a.cold_start:
            out.append("autoscaling.cold_start")
        if len(a.signals) < len(SIGNALS) and not a.lacks:
            out.append("autoscaling.lacks")
        for signal, sig in a.signals.items():
            if signal not in SIGNALS or not sig.metric or not sig.source or sig.scale <= 0:
                out.append(f"autoscaling.signals[{signal}]")
        lo = self.lora
        if not lo.how or not lo.source:
            out.append("lora.how" if not lo.how else "lora.source")
        if lo.serves and (lo.max_rank <= 0 or not lo.formats or not 0 < lo.default_rank <= lo.max_rank):
            out.append("lora.max_rank")
        if (
            lo.serves
            and lo.rank_choices
            and (lo.default_rank not in lo.rank_choices or max(lo.rank_choices) != lo.max_rank)
        ):
            out.append("lora.rank_choices")
        return out


# A card may truthfully have no speculation method or no prefix cache; every other field must say something.
_MAY_BE_EMPTY = frozenset(
    {
        "layer_split",
        "slots",
        "run_as_user",
        "speculative",
        "prefix_cache",
        "multi_gpu",
        "multi_node",
        "own_hf_loader",
        "kv_offload",
        "prefix_cache_caveat",
        "min_compute",
        "bf16_min_compute",
        "kv_dtypes",
        "auto_batching",
        "flag_bounds",
    }
)


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, (str, tuple, frozenset, dict)) and not value)


__all__ = [
    "FITTED",
    "NOT_MEASURED_ON_GPU",
    "REFERENCE",
    "SIGNALS",
    "Accelerator",
    "AdapterFormat",
    "Autoscaling",
    "Efficiency",
    "Endpoints",
    "EngineCard",
    "FlagBound",
    "Float32OnGpu",
    "GpuVendor",
    "Lora",
    "Performance",
    "Platforms",
    "Profile",
    "Renderer",
    "ScalingSignal",
    "Signal",
]
