"""Hugging Face Text Generation Inference 3.3.7 (`text-generation-launcher`, ghcr.io/huggingface/
text-generation-inference:3.3.7).

Flags are cited against huggingface/text-generation-inference launcher/src/main.rs (the clap `Args` struct; stored
version read: commit 009c4e0, a 2.x/3.0 launcher). Every launcher flag is also read from the environment variable
of its name in capitals (clap `env`), so those names are reserved too. Flags newer than the stored launcher are
not rendered unless verified; every rendered container is checked by tests/contracts/test_tgi_contract.py against
tests/contracts/data/tgi-3.3.7-launcher.json.
"""

from __future__ import annotations

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Decision, ResolvedModel
from inference_backend.engines import artifacts, lora
from inference_backend.engines.base import (
    HOST,
    HTTP_PORT,
    MODEL_CACHE_DIR,
    UINT32_MAX,
    ArgBuilder,
    Endpoints,
    EngineContainer,
    FlagBound,
    Json,
    PodParts,
    assemble,
    cached_pod_parts,
    gpus,
    merge_named,
    placement,
)
from inference_backend.engines.card import (
    FITTED,
    Autoscaling,
    Efficiency,
    EngineCard,
    Lora,
    Performance,
    Platforms,
    Profile,
    ScalingSignal,
)

ENGINE = "tgi"
OWN_HF_LOADER = True  # downloads hf:// repositories itself (see artifacts.py)
VERSION = "3.3.7"
IMAGE = f"ghcr.io/huggingface/text-generation-inference:{VERSION}"
ENDPOINTS = Endpoints(HTTP_PORT, health="/health", metrics="/metrics")
# launcher/src/main.rs Args: max_batch_prefill_tokens and max_batch_total_tokens are Option<u32> (clap refuses a
# larger value and the launcher exits).
FLAG_BOUNDS = {
    "--max-batch-prefill-tokens": FlagBound(
        UINT32_MAX, "spec.batching.maxBatchTokens", f"u32 (launcher/src/main.rs Args), TGI {VERSION}"
    ),
}
COMMAND = ("text-generation-launcher",)
# Metrics: the router serves GET /metrics on the API port (router/src/server.rs, the `metrics` route rendering the
# PrometheusHandle), so no metrics flag is rendered. `--prometheus-port` is NOT rendered: it is absent from the
# newest launcher reference we hold (tests/contracts/data/tgi-launcher.md, commit 032fc4c4, the 3.0.x flag set) and
# upstream issue huggingface/text-generation-inference#3062 (2025-02) asks for it as a missing option; whether it
# landed before 3.3.7 is unverified, and clap rejects an unknown argument, so the API port's /metrics is used.
# main.rs: `port` is `#[clap(long, short, env)]` (so -p is --port); `env` is -e.
ALIASES = {"-p": "--port"}
# main.rs enum Quantization (kebab-case values): awq, eetq, exl2, gptq, marlin, bitsandbytes, bitsandbytes-nf4,
# bitsandbytes-fp4, fp8.
QUANTIZE = {"awq": "awq", "gptq": "gptq", "fp8": "fp8", "bitsandbytes": "bitsandbytes"}
# main.rs enum KVCacheDtype: fp8_e4m3fn, fp8_e5m2.
KV_DTYPES = {"fp8": "fp8_e4m3fn"}
DEFAULT_MAX_CONCURRENT = 128  # main.rs max_concurrent_requests default


def container(decision: Decision, spec: InferenceBackendSpec, name: str) -> EngineContainer:
    placement(decision)  # raises on an unsatisfiable decision
    model = decision.model
    assert model is not None and decision.batching is not None
    notes: list[str] = []
    art = artifacts.resolve(model, OWN_HF_LOADER)
    a = ArgBuilder()
    _model_args(a, decision, model, art)
    _batching_args(a, decision, spec, notes)
    _kv_cache_args(a, decision, spec, notes)
    s = decision.speculation
    if s.enabled and s.method == "ngram":
        # main.rs speculate: "Other wise, it will use n-gram speculation" (Medusa heads when the model has them)
        a.add("--speculate", s.num_tokens, source="spec.speculativeDecoding.numSpeculativeTokens")
    if model.served_name:
        notes.append(
            f"model.servedName {model.served_name}: TGI serves one model and accepts any `model` value "
            "in OpenAI requests; the name is not enforced"
        )

    adapters = lora.served(decision, LORA) if decision.adapters.items else lora.Served((), ())
    parts = cached_pod_parts(decision, art, *adapters.artifacts)
    reserved = {_env_name(f.name): f.source for f in a.flags}
    if adapters.paths:
        reserved["LORA_ADAPTERS"] = "spec.adapters"
    # router: GET /health, GET /metrics on the API port
    return assemble(
        engine=ENGINE,
        version=VERSION,
        image=IMAGE,
        command=COMMAND,
        args=a,
        env=_env(decision, adapters, parts),
        aliases=ALIASES,
        decision=decision,
        spec=spec,
        notes=notes,
        endpoints=ENDPOINTS,
        init=parts.init,
        reserved_env=reserved,
        volumes=parts.volumes,
        mounts=parts.mounts,
        bounds=FLAG_BOUNDS,
    )


def _model_args(a: ArgBuilder, decision: Decision, model: ResolvedModel, art: artifacts.Artifact) -> None:
    """The model, where the router listens, the shards and the weights' number format."""
    a.add("--model-id", art.reference, source="spec.model.uri")  # main.rs model_id
    a.add("--hostname", HOST, source="the operator (listen on all addresses)")  # main.rs hostname
    a.add("--port", HTTP_PORT, source="the operator (port 8000)")  # main.rs port (long; never -p here)
    if gpus(decision) > 1:
        a.add("--num-shard", gpus(decision), source="the decision's placement (GPUs per replica)")  # num_shard
    if model.quantization in QUANTIZE:
        # main.rs quantize (value_enum); "cannot be used with --dtype"
        a.add("--quantize", QUANTIZE[model.quantization], source="spec.model.quantization")
    elif decision.serving_dtype in ("float16", "bfloat16"):
        a.add("--dtype", decision.serving_dtype, source="spec.model.dtype")  # main.rs enum Dtype


def _batching_args(a: ArgBuilder, decision: Decision, spec: InferenceBackendSpec, notes: list[str]) -> None:
    """Token limits per request and per prefill, the batch size and the requests admitted at once."""
    assert decision.model is not None and decision.batching is not None
    ctx = decision.model.context_length
    # main.rs max_input_tokens ("Legacy version: max_input_length") and max_total_tokens (prompt + generated).
    a.add("--max-input-tokens", ctx - 1, source="spec.model.contextLength")
    a.add("--max-total-tokens", ctx, source="spec.model.contextLength")
    b = decision.batching
    if b.max_batch_tokens is not None:
        prefill = b.max_batch_tokens
        if prefill < ctx - 1:
            # The launcher refuses max_batch_prefill_tokens < max_input_tokens (one prompt must fit a prefill).
            notes.append(
                f"batching.maxBatchTokens {prefill}: TGI needs the prefill budget to hold one full "
                f"prompt; --max-batch-prefill-tokens raised to {ctx - 1}"
            )
            prefill = ctx - 1
        a.add("--max-batch-prefill-tokens", prefill, source="spec.batching.maxBatchTokens")  # main.rs
    if b.max_batch_size is not None:
        a.add("--max-batch-size", b.max_batch_size, source="spec.batching.maxBatchSize")  # main.rs max_batch_size
    want = max(b.max_batch_size or 0, spec.objectives.concurrency or 0)
    if want:
        # main.rs max_concurrent_requests: beyond it requests are refused (backpressure); twice the batch so a
        # full batch can have a full batch waiting behind it.
        a.add(
            "--max-concurrent-requests",
            max(DEFAULT_MAX_CONCURRENT, 2 * want),
            source="spec.batching.maxBatchSize / spec.objectives.concurrency",
        )


def _kv_cache_args(a: ArgBuilder, decision: Decision, spec: InferenceBackendSpec, notes: list[str]) -> None:
    """The GPU memory the KV cache may take and its number format (TGI's block size is fixed)."""
    # main.rs cuda_memory_fraction (default 1.0)
    a.add("--cuda-memory-fraction", spec.kv_cache.memory_fraction, source="spec.kvCache.memoryFraction")
    if decision.kv_cache_dtype in KV_DTYPES:
        a.add("--kv-cache-dtype", KV_DTYPES[decision.kv_cache_dtype], source="spec.kvCache.dtype")  # main.rs
    if spec.kv_cache.block_size != 16:
        notes.append("kvCache.blockSize: TGI has no block size flag (its paged attention block is fixed); ignored")


def _env(decision: Decision, adapters: lora.Served, parts: PodParts) -> tuple[Json, ...]:
    """The launcher's environment: LoRA adapters, prefix caching, the hub cache, no usage reporting, HF_TOKEN."""
    # main.rs lora_adapters (env LORA_ADAPTERS): comma-separated adapter ids, each `id` or `id=path`
    # (server/text_generation_server/utils/adapter.py parse_lora_adapters); a request names one in `adapter_id`, or
    # through the OpenAI `model` field (router/src/lib.rs: adapter_id = model unless "tgi").
    lora_env = (
        ({"name": "LORA_ADAPTERS", "value": ",".join(f"{n}={p}" for n, p in adapters.paths)},) if adapters.paths else ()
    )
    return merge_named(
        lora_env,
        # main.rs resolve_attention(): PREFIX_CACHING env ("0" disables; unset = on for most models).
        ({"name": "PREFIX_CACHING", "value": "1" if decision.prefix_cache else "0"},),
        # main.rs huggingface_hub_cache (env HUGGINGFACE_HUB_CACHE): where hub downloads go.
        ({"name": "HUGGINGFACE_HUB_CACHE", "value": MODEL_CACHE_DIR},),
        # main.rs usage_stats (env USAGE_STATS): no usage reporting from the cluster.
        ({"name": "USAGE_STATS", "value": "off"},),
        parts.env,  # HF_TOKEN: read by the launcher (get_config) and the shards
    )


def _env_name(flag: str) -> str:
    """clap's `env` name of a long flag: --max-batch-size -> MAX_BATCH_SIZE."""
    return flag.lstrip("-").replace("-", "_").upper()


_TGI_PROFILE = (
    "published: vLLM blog 2023-06-20 'vLLM: Easy, Fast, and Cheap LLM Serving with PagedAttention' (vLLM up to 3.5x "
    "the throughput of TGI) and Anyscale 2023 'How continuous batching enables 23x throughput in LLM inference' "
    "(A100); TGI at 1/3.5 of vLLM at saturation, rounded up; not measured here (no GPU lent yet: bench/gpu/h200.sh)"
)
# Continuous batching; --speculate is n-gram (or Medusa heads), no separate draft model; flash-attention kernels need
# Ampere (8.0)+; no int8 weight scheme of ours maps to its --quantize. Single node only (sharded over local GPUs).
RUN_AS = (
    "text-generation-inference's image sets no USER and writes to /data and /root/.cache: left as the "
    "image runs it; the container still drops every capability"
)
"""Why its pods run as they do (card field run_as)."""


# huggingface/text-generation-inference v3.3.7: backends/v3/src/queue.rs sets the tgi_queue_size gauge,
# backends/v3/src/backend.rs tgi_batch_current_size; router/src/server.rs describes both.
_TGI = "TGI " + VERSION
AUTOSCALING = Autoscaling(
    signals={
        "queueDepth": ScalingSignal("tgi_queue_size", "gauge", 1, "backends/v3/src/queue.rs, " + _TGI),
        "runningRequests": ScalingSignal("tgi_batch_current_size", "gauge", 1, "backends/v3/src/backend.rs, " + _TGI),
    },
    lacks=f"{_TGI} has no KV cache usage gauge and no time-to-first-token histogram (router/src/server.rs describes "
    "every metric it exports)",
    scale_to_zero=False,
    cold_start="minutes: the weights loaded onto the GPUs, then the warmup prefill of the whole token budget",
)

PERFORMANCE = Performance(
    efficiency={
        "nvidia": Efficiency(
            0.45,
            0.90,
            3.0,
            150.0,
            40.0,
            "vLLM's NVIDIA factors (engines/vllm.py): TGI 3.x chunks prompts into the decode steps as vLLM's V1 "
            "engine does, with CUDA graphs and the same attention kernels, and its own benchmark puts it at "
            "1.0-1.25x vLLM (docs/source/conceptual/chunking.md, wall-time ratios); that page's three TGI 3.0 rows "
            "in the calibration set (tgiv3, one held out) are too few to fit and time whole k6 runs of 50-token "
            "answers (docs/engine-profiles.md)",
            0.0,
            0.05,
            0.5,
        ),
        "amd": Efficiency(0.15, 0.40, 0.5, 150.0, 80.0, FITTED + " (TGI ROCm on 8x MI300X: dstack rows)", 0.0, 0.5),
        "habana": Efficiency(0.40, 0.60, 2.0, 20.0, 10.0, "assumed: one MLPerf 4.0 tgi-gaudi row, too few to fit"),
    },
    older=(
        (
            "nvidia",
            "1.1",
            Efficiency(
                0.10,
                0.80,
                0.5,
                400.0,
                10.0,
                FITTED + " (TGI 1.0.3 on SageMaker: no CUDA "
                "graphs before TGI 1.1, kernels launched from Python per layer)",
                550.0,
                1.0,
            ),
        ),
        (
            "nvidia",
            "3.0",
            Efficiency(
                0.30,
                0.90,
                0.5,
                150.0,
                40.0,
                FITTED + " (TGI 2.0.4 on A10G beside vLLM 0.4.3: Hugging Face llmperf rows): before 3.0 TGI "
                "prefilled the waiting prompts first, unchunked, in steps of their own",
                100.0,
                1.5,
            ),
        ),
    ),
    # TGI 3.x is rated as vLLM is (its NVIDIA factors above): with vLLM's aiconfigurator TPOT tables too, so that
    # the two tie where the tables cover the GPU, as TGI v3's own comparison (1.0-1.25x vLLM) allows
    aiconfigurator="vllm",
    table_ttft=False,
    table_ttft_source="as vLLM's (engines/vllm.py)",
    max_sequences=0,
    max_sequences_source="TGI batches what max_batch_total_tokens (its KV budget) holds (launcher main.rs)",
    step_tokens=4096,
    step_tokens_source="TGI max_batch_prefill_tokens default 4096 (launcher main.rs)",
)
_LORA_SRC = (
    f"TGI {VERSION}: launcher/src/main.rs lora_adapters (env LORA_ADAPTERS), "
    "server/text_generation_server/utils/adapter.py (PEFT adapters, `id=path`), router/src/lib.rs (the "
    "OpenAI model field is the adapter_id), launcher resolve_attention (prefix caching off with adapters); "
    "read at stored commits, not the 3.3.7 tag (tests/contracts/data/tgi-3.3.7-launcher.json says which)"
)
LORA = Lora(
    serves=True,
    how="the OpenAI model field names the adapter (any other value, or 'tgi', is the base model)",
    formats=frozenset({"peft"}),
    max_rank=1024,
    rank_choices=(),
    default_rank=1024,
    architectures=frozenset(),
    target_modules=frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}),
    runtime="",
    prefix_cache=False,
    speculative=frozenset({"ngram"}),
    dora=False,
    source=_LORA_SRC,
)

CARD = EngineCard(
    name=ENGINE,
    title="TGI",
    version=VERSION,
    formats=frozenset({"safetensors"}),
    accelerators=frozenset({"gpu"}),
    batching=("continuous",),
    prefix_cache=True,
    speculative=frozenset({"ngram"}),
    quantizations=frozenset({"none", "awq", "gptq", "fp8", "bitsandbytes"}),
    kv_dtypes=frozenset({"fp8"}),
    multi_gpu=True,
    multi_node=False,
    min_compute=(8, 0),
    bf16_min_compute=(8, 0),
    own_hf_loader=OWN_HF_LOADER,
    kv_offload=False,
    float32_on_gpu="float16",
    # CUDA only here: TGI's -rocm and -gaudi images are other builds whose flags the contract test does not check.
    images={"gpu": IMAGE},
    devices={"nvidia": IMAGE},
    endpoints=ENDPOINTS,
    # TGI's release workflow (.github/workflows/build.yaml, docker/build-push-action) builds platforms 'linux/amd64'
    # only: no arm64 image (GH200/GB200 hosts, Graviton) exists.
    platforms={
        IMAGE: Platforms(
            frozenset({"amd64"}), "text-generation-inference .github/workflows/build.yaml: platforms 'linux/amd64'"
        )
    },
    profiles={"gpu": Profile(70, 2000, 15.0, 2, _TGI_PROFILE)},
    performance=PERFORMANCE,
    summary="Hugging Face's GPU server: continuous batching, prefix cache, n-gram speculation",
    render=container,
    layer_split=False,
    slots=False,
    run_as_user=None,
    run_as=RUN_AS,
    autoscaling=AUTOSCALING,
    prefix_cache_caveat="",
    auto_batching={},
    flag_bounds=FLAG_BOUNDS,
    lora=LORA,
)
