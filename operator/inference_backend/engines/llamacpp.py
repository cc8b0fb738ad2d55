"""llama.cpp `llama-server` at one pinned build (ghcr.io/ggml-org/llama.cpp:server[-cuda]-b<LLAMA_CPP_BUILD>).

Flags are cited against ggml-org/llama.cpp common/arg.cpp (common_params_parser_init; stored version read: commit
145b628, a late-2025 build with --fit and the router server) and, for the speculative-decoding flags renamed
since, upstream PR #22397 "spec : refactor params" (2026-04): `--draft`, `--draft-n`, `--draft-max` were replaced by
`--spec-draft-n-max` and are fatal ("the argument has been removed") on builds after it. Every flag emitted here is in
tests/contracts/data/llama-server-b11312.flags.txt (from the pinned binary's --help), and
tests/contracts/test_llamacpp_contract.py boots the pinned llama-server with exactly the rendered args.
"""

from __future__ import annotations

from inference_backend.api.common import GGUF_QUANTIZATIONS
from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Decision, InvalidSpec
from inference_backend.engines import artifacts, lora
from inference_backend.engines.base import (
    HOST,
    HTTP_PORT,
    INT32_MAX,
    MODEL_CACHE_DIR,
    ArgBuilder,
    Endpoints,
    EngineContainer,
    FlagBound,
    assemble,
    cached_pod_parts,
    cpu_cores,
    device_image,
    gpus,
    merge_named,
    placement,
    served_name,
)
from inference_backend.engines.card import (
    FITTED,
    NOT_MEASURED_ON_GPU,
    Autoscaling,
    Efficiency,
    EngineCard,
    GpuVendor,
    Lora,
    Performance,
    Platforms,
    Profile,
    ScalingSignal,
)
from inference_backend.engines.profiles_7b import measured_rows
from inference_backend.engines.profiles_measured import MEASURED_CPU

ENGINE = "llamacpp"
LLAMA_CPP_BUILD = 11312
"""The llama.cpp build (bNNNN) the images are pinned to: the one vendored by llama-cpp-python 0.3.36, the same
pin as hack/llama-cpp.version (LLAMA_CPP_BUILD), whose binary the contract tests boot; a test keeps the two equal.
After PR #22397 (see module doc)."""
OWN_HF_LOADER = True  # downloads hf:// repositories itself (see artifacts.py)
VERSION = f"b{LLAMA_CPP_BUILD}"
IMAGE_CPU = f"ghcr.io/ggml-org/llama.cpp:server-{VERSION}"
IMAGE_CUDA = f"ghcr.io/ggml-org/llama.cpp:server-cuda-{VERSION}"
# AMD: the HIP build of the same server (llama.cpp docs/docker.md: "server-rocm", compiled with ROCm; published per
# build as server-rocm-b<N>); same flags, -ngl offloads to the HIP device the amd.com/gpu request maps in.
IMAGE_ROCM = f"ghcr.io/ggml-org/llama.cpp:server-rocm-{VERSION}"
DEVICES: dict[GpuVendor, str] = {"nvidia": IMAGE_CUDA, "amd": IMAGE_ROCM}
_DOCKER_MD = 'llama.cpp docs/docker.md, "Images"'
PLATFORMS = {
    IMAGE_CPU: Platforms(
        frozenset({"amd64", "arm64", "s390x"}), f"{_DOCKER_MD}: server (linux/amd64, linux/arm64, linux/s390x)"
    ),
    IMAGE_CUDA: Platforms(frozenset({"amd64", "arm64"}), f"{_DOCKER_MD}: server-cuda (linux/amd64, linux/arm64)"),
    IMAGE_ROCM: Platforms(frozenset({"amd64"}), f"{_DOCKER_MD}: server-rocm (linux/amd64)"),
}
ENDPOINTS = Endpoints(HTTP_PORT, health="/health", metrics="/metrics")
COMMAND = ("/app/llama-server",)  # the server images' entrypoint (.devops/*.Dockerfile: /app/llama-server)
# Every spelling in arg.cpp of the flags we set -> one name (short, long, --no- forms).
ALIASES = {
    "--model": "-m",
    "-hfr": "-hf",
    "--hf-repo": "-hf",
    "--hf-file": "-hff",
    "--alias": "-a",
    "--ctx-size": "-c",
    "--parallel": "-np",
    "--cont-batching": "-cb",
    "-nocb": "-cb",
    "--no-cont-batching": "-cb",
    "--batch-size": "-b",
    "--ubatch-size": "-ub",
    "--cache-type-k": "-ctk",
    "--cache-type-v": "-ctv",
    "-fa": "--flash-attn",
    "--gpu-layers": "-ngl",
    "--n-gpu-layers": "-ngl",
    "--split-mode": "-sm",
    "--threads": "-t",
    "--no-cache-prompt": "--cache-prompt",
    "--model-draft": "-md",
    "--spec-draft-model": "-md",
    "-hfrd": "-hfd",
    "--hf-repo-draft": "-hfd",
    "--spec-draft-hf": "-hfd",
    "--draft": "--spec-draft-n-max",
    "--draft-n": "--spec-draft-n-max",
    "--draft-max": "--spec-draft-n-max",
    "--gpu-layers-draft": "-ngld",
    "--n-gpu-layers-draft": "-ngld",
    "--spec-draft-ngl": "-ngld",
}
# KV cache types (arg.cpp get_all_kv_cache_types / kv_cache_type_from_str): f32, f16, bf16, q8_0, q4_0, ...
KV_TYPES = {"float16": "f16", "bfloat16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0"}
# common/arg.cpp parses these with std::stoi into common/common.h common_params int32_t fields (n_batch, n_ubatch,
# n_ctx, n_parallel, n_threads, speculative n_max): a larger value throws and llama-server exits at start.
_INT32 = f"int32 (common/common.h common_params, parsed by common/arg.cpp with std::stoi), llama.cpp {VERSION}"
FLAG_BOUNDS = {
    "-b": FlagBound(INT32_MAX, "spec.batching.maxBatchTokens", _INT32),
    "-ub": FlagBound(INT32_MAX, "spec.batching.maxBatchTokens", _INT32),
    "-c": FlagBound(INT32_MAX, "", _INT32),
    "-np": FlagBound(INT32_MAX, "", _INT32),
    "-t": FlagBound(INT32_MAX, "", _INT32),
    "--spec-draft-n-max": FlagBound(INT32_MAX, "", _INT32),
}
DEFAULT_SLOTS = 4
UBATCH = 512  # arg.cpp n_ubatch default
CACHE_REUSE_TOKENS = 256  # the --fim-* presets' n_cache_reuse: reuse prefix chunks of >= 256 tokens via KV shift


def container(decision: Decision, spec: InferenceBackendSpec, name: str) -> EngineContainer:
    p = placement(decision)
    model = decision.model
    assert model is not None and decision.batching is not None
    on_gpu = p.gpu is not None
    art = artifacts.resolve(model, OWN_HF_LOADER)
    a = ArgBuilder()
    _model_args(a, decision, art, name)
    _batching_args(a, decision)
    _kv_cache_args(a, decision)
    _device_args(a, decision, on_gpu)
    # Prompt (prefix) cache: --cache-prompt/--no-cache-prompt (in the b11312 flag list) and --cache-reuse N (min
    # chunk reused via KV shifting; 0 disables).
    a.add("--cache-prompt" if decision.prefix_cache else "--no-cache-prompt", source="spec.prefixCache.enabled")
    a.add("--cache-reuse", CACHE_REUSE_TOKENS if decision.prefix_cache else 0, source="spec.prefixCache.enabled")
    a.add("--metrics", source="the operator (Prometheus /metrics)")  # arg.cpp --metrics
    draft_art = _draft(decision, a, on_gpu)
    notes: list[str] = []
    if spec.kv_cache.memory_fraction != 0.9:
        notes.append(
            "kvCache.memoryFraction: llama-server allocates exactly the -c context; the fraction only "
            "sized the memory fit"
        )
    if spec.kv_cache.block_size != 16:
        notes.append("kvCache.blockSize: llama.cpp has no paged KV blocks; ignored")

    adapters = _adapters(decision, a)
    parts = cached_pod_parts(decision, art, draft_art, *adapters.artifacts)
    # LLAMA_CACHE: where -hf downloads go (common.cpp fs_get_cache_directory).
    env = merge_named(({"name": "LLAMA_CACHE", "value": MODEL_CACHE_DIR},), parts.env)
    # tools/server: GET /health (503 while loading), GET /metrics with --metrics
    return assemble(
        engine=ENGINE,
        version=VERSION,
        image=device_image(decision, DEVICES, IMAGE_CPU),
        command=COMMAND,
        args=a,
        env=env,
        aliases=ALIASES,
        decision=decision,
        spec=spec,
        notes=notes,
        endpoints=ENDPOINTS,
        init=parts.init,
        volumes=parts.volumes,
        mounts=parts.mounts,
        bounds=FLAG_BOUNDS,
    )


def _model_args(a: ArgBuilder, decision: Decision, art: artifacts.Artifact, name: str) -> None:
    """The model (a Hugging Face repository llama-server downloads, or a file), where it listens, its name."""
    assert decision.model is not None
    if art.hf_repo is not None:
        # arg.cpp -hf/-hfr/--hf-repo <user>/<model>[:quant] and -hff/--hf-file: llama-server downloads into
        # LLAMA_CACHE (resumable, cached) with HF_TOKEN (-hft reads env HF_TOKEN). Chosen over an init container
        # because it is the engine's own verified loader and needs no second image.
        repo = art.hf_repo if art.hf_file else _with_quant(art.hf_repo, decision.model.quantization)
        a.add("-hf", repo, source="spec.model.uri")
        if art.hf_file:
            a.add("-hff", art.hf_file, source="spec.model.uri")
    else:
        a.add("-m", art.reference, source="spec.model.uri")  # arg.cpp -m/--model FNAME
    a.add("--host", HOST, source="the operator (listen on all addresses)")  # arg.cpp --host
    a.add("--port", HTTP_PORT, source="the operator (port 8000)")  # arg.cpp --port
    a.add("-a", served_name(decision, name), source="spec.model.servedName")  # arg.cpp -a/--alias


def _batching_args(a: ArgBuilder, decision: Decision) -> None:
    """The slots decoded together, the total context they share, continuous or static batching, the batch sizes."""
    assert decision.model is not None and decision.batching is not None
    b = decision.batching
    # the selection's plan: maxBatchSize, else concurrency, else DEFAULT_SLOTS, reduced to the slots whose full
    # contexts fit (selection/options.py _fit_slots)
    slots = decision.plan.slots if decision.plan and decision.plan.slots else DEFAULT_SLOTS
    # arg.cpp -np/--parallel: slots decoded together (the batch size of continuous batching)
    a.add("-np", slots, source="spec.batching.maxBatchSize (the slots that fit)")
    # arg.cpp -c/--ctx-size is the TOTAL context shared by all slots: per-slot context x slots.
    a.add("-c", decision.model.context_length * slots, source="spec.model.contextLength x spec.batching.maxBatchSize")
    # arg.cpp -cb/--cont-batching, -nocb/--no-cont-batching (server only)
    a.add("-cb" if b.strategy == "continuous" else "--no-cont-batching", source="spec.batching.strategy")
    if b.max_batch_tokens is not None:
        # arg.cpp -b/--batch-size (logical batch: tokens per decode call) and -ub/--ubatch-size (physical)
        a.add("-b", b.max_batch_tokens, source="spec.batching.maxBatchTokens")
        a.add("-ub", min(UBATCH, b.max_batch_tokens), source="spec.batching.maxBatchTokens")


def _kv_cache_args(a: ArgBuilder, decision: Decision) -> None:
    """The KV cache's number format (a quantized one with flash attention)."""
    kv = KV_TYPES.get(decision.kv_cache_dtype)
    if kv is not None:
        a.add("-ctk", kv, source="spec.kvCache.dtype")  # arg.cpp -ctk/--cache-type-k
        a.add("-ctv", kv, source="spec.kvCache.dtype")  # arg.cpp -ctv/--cache-type-v
        if kv.startswith("q"):
            # A quantized V cache needs flash attention; arg.cpp -fa/--flash-attn [on|off|auto]
            a.add("--flash-attn", "on", source="spec.kvCache.dtype (quantized V cache)")


def _device_args(a: ArgBuilder, decision: Decision, on_gpu: bool) -> None:
    """The layers on the GPUs (split over several) or the CPU threads."""
    # arg.cpp -ngl/--gpu-layers: all layers on the GPU, none on CPU
    a.add("-ngl", 999 if on_gpu else 0, source="the decision's placement")
    if gpus(decision) > 1:
        # arg.cpp -sm/--split-mode {none,layer,row}: layers and KV split over every GPU the device plugin gave
        # the container (all visible).
        a.add("-sm", "layer", source="the decision's placement (GPUs per replica)")
    if not on_gpu:
        a.add("-t", cpu_cores(decision), source="the decision's placement (CPU cores)")  # arg.cpp -t/--threads


def _adapters(decision: Decision, a: ArgBuilder) -> lora.Served:
    """spec.adapters as GGUF LoRA adapters, each loaded at scale 0: arg.cpp --lora-scaled FNAME:SCALE (repeatable;
    loaded in this order, so the first is id 0). A request's ``lora`` field applies one; a request without it gets
    the base model. Not --lora with --lora-init-without-apply: in b11312 that flag only keeps the adapters off the
    context at start (common/common.cpp common_init_from_params), while the server's default for a request without
    a ``lora`` field stays each adapter's parsed scale, 1.0 for --lora (tools/server/server-context.cpp
    launch_slot_with_task: slot.lora = params_base.lora_adapters), so every plain request ran every adapter at once
    (booted in tests/runners/test_llamacpp_lora.py). --lora-scaled splits its value at ',' and ':', which a path
    therefore must not hold."""
    if not decision.adapters.items:
        return lora.Served((), ())
    served = lora.served(decision, LORA, "gguf")
    for i, (_, path) in enumerate(served.paths):
        if set(path) & {",", ":"}:
            raise InvalidSpec(
                f"spec.adapters[{i}]",
                f"llama.cpp loads the adapter from {path}, and llama-server's --lora-scaled FNAME:SCALE cannot take a "
                "path holding ',' or ':' (rename the adapter or its file)",
            )
        a.add("--lora-scaled", f"{path}:0", source="spec.adapters")
    return served


def _with_quant(repo: str, quantization: str) -> str:
    """`<user>/<model>:<quant>` picks the repository's file of that quantization (arg.cpp -hf help)."""
    return f"{repo}:{quantization.upper()}" if quantization not in ("none", "f16") else repo


def _draft(decision: Decision, a: ArgBuilder, on_gpu: bool) -> artifacts.Artifact | None:
    s = decision.speculation
    if not s.enabled or s.draft is None:
        return None
    assert decision.model is not None
    art = artifacts.resolve(artifacts.draft_model(decision.model, s.draft), OWN_HF_LOADER, "draft")
    src = "spec.speculativeDecoding.draftModelRef"
    if art.hf_repo is not None:
        # arg.cpp -hfd/-hfrd/--hf-repo-draft <user>/<model>[:quant]: there is no --hf-file for the draft, so the
        # file is chosen by its quantization tag.
        a.add("-hfd", _with_quant(art.hf_repo, s.draft.quantization), source=src)
    else:
        a.add("-md", art.reference, source=src)  # arg.cpp -md/--model-draft FNAME
    # --spec-type: in b11312 a draft model alone does not speculate (the type defaults to none; booted in
    # tests/contracts/test_llama_server_harness.py), so the draft type is named explicitly.
    a.add("--spec-type", "draft-simple", source="spec.speculativeDecoding.draftModelRef")
    # PR #22397: --spec-draft-n-max (was --draft-max/--draft/--draft-n, now fatal)
    a.add("--spec-draft-n-max", s.num_tokens, source="spec.speculativeDecoding.numSpeculativeTokens")
    # arg.cpp -ngld/--gpu-layers-draft
    a.add("-ngld", 999 if on_gpu else 0, source="the decision's placement")
    return art


# Continuous batching over -np slots (static with --no-cont-batching); GGUF only; draft-model speculation; quantized
# KV cache types; layer split over several GPUs (--split-mode); GPU kernels from compute 5.0; bf16 needs no minimum.
RUN_AS = (
    "llama-server needs no root: it reads the model and writes only LLAMA_CACHE (the model-cache "
    "emptyDir); the image sets no USER, so the pod runs it as nobody (65534)"
)
"""Why its pods run as they do (card field run_as)."""


# tools/server/server-task.cpp (the metrics gauges, served with --metrics, rendered above) of the pinned build, as
# vendored by llama-cpp-python 0.3.36 (hack/llama-cpp.version): requests_processing counts the busy slots,
# requests_deferred the tasks waiting for a free slot.
_SERVER_TASK = f"tools/server/server-task.cpp, llama.cpp {VERSION}"
AUTOSCALING = Autoscaling(
    signals={
        "queueDepth": ScalingSignal("llamacpp:requests_deferred", "gauge", 1, _SERVER_TASK),
        "runningRequests": ScalingSignal("llamacpp:requests_processing", "gauge", 1, _SERVER_TASK),
    },
    lacks=f"llama.cpp {VERSION} has no KV cache usage gauge (kv_cache_usage_ratio was removed upstream before this "
    "build) and no time-to-first-token histogram",
    scale_to_zero=True,
    cold_start="seconds for the GGUF models it serves: the file is memory-mapped, no compile or graph capture "
    "(plus the download when the weights are not on a cache volume)",
)


PERFORMANCE = Performance(
    efficiency={
        "nvidia": Efficiency(
            0.30,
            0.90,
            1.0,
            400.0,
            8.0,
            FITTED + " (llama-bench on A100, H100, L40S, A40, RTX A6000/6000 Ada: LLM-Inference-Bench and "
            "llmgpubench rows; the bandwidth ceiling: its 8B f16 and 70B Q4_K_M decode drew 0.85-1.07 TB/s on "
            "A100s and H100s of 2.0-3.35 TB/s, 78% of an L40S's 864 GB/s)",
            200.0,
            0.1,
            bandwidth_gbs=1000.0,
        ),
        "amd": Efficiency(
            0.10,
            0.30,
            8.0,
            5.0,
            2.0,
            FITTED + " (llama-bench HIP on MI300X: LLM-Inference-Bench rows; kv: its tokens/s fall from 58 to 46 "
            "and 37 as prompt and output grow from 128 to 1,024 and 2,048 tokens, about 3.4 us per token of context "
            "per step, where the A100's and H100's llama.cpp rows of the same sweep lose 5-6%: its KQ and KQV "
            "products without flash attention (llama-bench -fa 0, the default) on HIP; kv and the step times fitted "
            "together, bench/perf_model.py FIT_ONLY: clipped mean |log2| 0.26 -> 0.07)",
            0.0,
            kv=0.01,
        ),
    },
    max_sequences=0,
    max_sequences_source="its slots (-np), each a full context (selection/options.py)",
    step_tokens=2048,
    step_tokens_source="llama-server -b (n_batch) default 2048 (common/arg.cpp)",
    micro_batch=512,  # -ub (n_ubatch) default 512 (common/arg.cpp); pipelined over split layers since b2467 (#6017)
)
LORA = Lora(
    serves=True,
    how='a request\'s lora field selects an adapter by its place in spec.adapters ([{"id": N, "scale": 1}]); '
    "the OpenAI model field is not used to choose one (the base model answers)",
    formats=frozenset({"gguf"}),
    max_rank=1024,
    rank_choices=(),
    default_rank=1024,
    architectures=frozenset(),
    target_modules=frozenset(),
    runtime="",
    prefix_cache=True,
    speculative=frozenset({"draft"}),
    dora=False,
    source=f"llama.cpp {VERSION}: common/arg.cpp --lora-scaled; tools/server/server-common.cpp "
    "parse_lora_request (the request's lora field), server-context.cpp construct_lora_list (an id not loaded is "
    "ignored); src/llama-adapter.cpp (GGUF adapters of the model's architecture, from convert_lora_to_gguf.py)",
    by_index=True,
)


CARD = EngineCard(
    name=ENGINE,
    title="llama.cpp",
    version=VERSION,
    formats=frozenset({"gguf"}),
    accelerators=frozenset({"gpu", "cpu"}),
    batching=("continuous", "static"),
    prefix_cache=True,
    speculative=frozenset({"draft"}),
    quantizations=GGUF_QUANTIZATIONS | {"none"},
    kv_dtypes=frozenset({"float16", "bfloat16", "q8_0", "q4_0"}),
    multi_gpu=True,
    multi_node=False,
    min_compute=(5, 0),
    bf16_min_compute=(0, 0),
    own_hf_loader=OWN_HF_LOADER,
    kv_offload=False,
    float32_on_gpu="float32",
    images={"gpu": IMAGE_CUDA, "cpu": IMAGE_CPU},
    devices=DEVICES,
    platforms=PLATFORMS,
    endpoints=ENDPOINTS,
    profiles={
        "gpu": Profile(90, 600, 7.5, 8.5 / 8, NOT_MEASURED_ON_GPU + "public llama-bench reports for Llama-2-7B q8_0"),
        "cpu": Profile(**MEASURED_CPU[ENGINE], measured=measured_rows(ENGINE)),
    },
    performance=PERFORMANCE,
    layer_split=True,
    slots=True,
    run_as_user=65534,
    run_as=RUN_AS,
    autoscaling=AUTOSCALING,
    prefix_cache_caveat="",
    auto_batching={},
    lora=LORA,
    summary="GGUF on CPU or GPU: quantized weights and KV cache, continuous batching over slots, draft speculation",
    render=container,
    flag_bounds=FLAG_BOUNDS,
)
