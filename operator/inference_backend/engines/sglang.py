"""SGLang 0.5.23 (`python3 -m sglang.launch_server`, image lmsysorg/sglang:v0.5.23).

Flags are cited against the sglang 0.5.23 wheel (the release PyPI serves): the server arguments are dataclass
fields in python/sglang/srt/arg_groups/fields/*.py, registered on the parser by arg_groups/arg_utils.py
(``add_cli_args_from_dataclass``: field ``tp_size`` -> ``--tp-size``, ``Arg(aliases=...)`` adds the aliases) and
resolved by srt/server_args.py. The contract test parses these args with SGLang's own parser in its own venv
(hack/sglang-venv; docs/engine-flags/sglang-0.5.23.md lists every flag with its field).
"""

from __future__ import annotations

import math

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Decision, InvalidSpec, ResolvedModel
from inference_backend.engines import artifacts, lora
from inference_backend.engines.base import (
    HOST,
    HTTP_PORT,
    LWS_WORKER_INDEX,
    MODEL_CACHE_DIR,
    ArgBuilder,
    Endpoints,
    EngineContainer,
    assemble,
    cached_pod_parts,
    gpus,
    kube_ref,
    merge_named,
    placement,
    served_name,
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

ENGINE = "sglang"
OWN_HF_LOADER = True  # --model-path takes a Hugging Face repo id and downloads it (fields/model.py model_path)
VERSION = "0.5.23"
IMAGE = f"lmsysorg/sglang:v{VERSION}"
ENDPOINTS = Endpoints(HTTP_PORT, health="/health", metrics="/metrics")
COMMAND = ("python3", "-m", "sglang.launch_server")
# Every spelling of the flags we set -> one name (the Arg(aliases=...) of each field).
ALIASES = {
    "--model": "--model-path",  # fields/model.py model_path aliases=["--model"]
    "--tensor-parallel-size": "--tp-size",  # fields/parallel.py tp_size aliases=["--tensor-parallel-size"]
    "--speculative-draft-model": "--speculative-draft-model-path",  # fields/spec.py
    "--enable-hicache": "--enable-hierarchical-cache",  # fields/memory.py enable_hierarchical_cache
    "--nccl-init-addr": "--dist-init-addr",  # fields/parallel.py dist_init_addr aliases=["--nccl-init-addr"]
    "--pipeline-parallel-size": "--pp-size",  # fields/parallel.py pp_size
}
# fields/model.py quantization choices (arg_groups/choices.py QUANTIZATION_CHOICES) for the schemes we render.
# AWQ/GPTQ checkpoints carry quantization_config and SGLang picks its (Marlin) kernel itself, as with vLLM.
QUANTIZATION = {"fp8": "fp8", "bitsandbytes": "bitsandbytes"}
# fields/model.py kv_cache_dtype choices: auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16.
KV_DTYPES = {"fp8": "fp8_e4m3", "bfloat16": "bfloat16"}


def container(decision: Decision, spec: InferenceBackendSpec, name: str) -> EngineContainer:
    placement(decision)  # raises on an unsatisfiable decision
    model = decision.model
    assert model is not None and decision.batching is not None
    notes: list[str] = []
    art = artifacts.resolve(model, OWN_HF_LOADER)
    a = ArgBuilder()
    a.add("--model-path", art.reference, source="spec.model.uri")  # fields/model.py model_path
    a.add("--host", HOST, source="the operator (listen on all addresses)")  # fields/serving.py host
    a.add("--port", HTTP_PORT, source="the operator (port 8000)")  # fields/serving.py port (default 30000)
    a.add("--served-model-name", served_name(decision, name), source="spec.model.servedName")  # fields/serving.py
    a.add("--tp-size", gpus(decision), source="the decision's placement (GPUs per replica)")  # fields/parallel.py
    # fields/model.py dtype {auto, half, float16, bfloat16, float, float32}: "half ... Recommended for AWQ".
    if model.quantization in ("awq", "gptq"):
        a.add("--dtype", "float16", source="spec.model.quantization")
    elif decision.serving_dtype in ("float16", "bfloat16"):
        a.add("--dtype", decision.serving_dtype, source="spec.model.dtype")
    if model.quantization in QUANTIZATION:
        a.add("--quantization", QUANTIZATION[model.quantization], source="spec.model.quantization")
    elif model.quantization not in ("none", "awq", "gptq"):
        raise InvalidSpec("spec.model.quantization", f"{model.quantization} is not an SGLang {VERSION} method")
    a.add("--context-length", model.context_length, source="spec.model.contextLength")  # fields/model.py
    # fields/schedule.py mem_fraction_static: "model weights and KV cache memory pool"
    a.add("--mem-fraction-static", spec.kv_cache.memory_fraction, source="spec.kvCache.memoryFraction")
    a.add("--page-size", spec.kv_cache.block_size, source="spec.kvCache.blockSize")  # fields/schedule.py page_size
    if decision.kv_cache_dtype in KV_DTYPES:
        a.add("--kv-cache-dtype", KV_DTYPES[decision.kv_cache_dtype], source="spec.kvCache.dtype")  # fields/model.py
    elif decision.kv_cache_dtype != "auto":
        notes.append(f"kvCache.dtype {decision.kv_cache_dtype}: SGLang's auto (the model dtype) is used")
    if spec.kv_cache.cpu_offload_gi_b > 0:
        # fields/memory.py enable_hierarchical_cache (HiCache: radix-tree KV pages spill to host memory) and
        # hicache_size ("size of host KV cache memory pool in gigabytes", an int).
        a.add("--enable-hierarchical-cache", source="spec.kvCache.cpuOffloadGiB")
        a.add("--hicache-size", max(1, math.ceil(spec.kv_cache.cpu_offload_gi_b)), source="spec.kvCache.cpuOffloadGiB")
    if not decision.prefix_cache:
        a.add("--disable-radix-cache", source="spec.prefixCache.enabled")  # fields/memory.py (RadixAttention)
    b = decision.batching
    if b.max_batch_size is not None:
        a.add("--max-running-requests", b.max_batch_size, source="spec.batching.maxBatchSize")  # fields/schedule.py
    if b.max_batch_tokens is not None:
        # fields/schedule.py chunked_prefill_size: tokens per prefill chunk (the prefill budget of one step)
        a.add("--chunked-prefill-size", b.max_batch_tokens, source="spec.batching.maxBatchTokens")
    draft_art = _speculative(decision, model, a)
    a.add("--enable-metrics", source="the operator (Prometheus /metrics)")  # fields/observability.py
    adapters = _adapters(decision, a)
    worker = _multi_node(a, placement(decision).pipeline_parallel)

    parts = cached_pod_parts(decision, art, draft_art, *adapters.artifacts)
    env = merge_named(
        # HF_HOME: where huggingface_hub (SGLang's hf loader) caches downloads.
        ({"name": "HF_HOME", "value": MODEL_CACHE_DIR},),
        parts.env,
    )
    # entrypoints/http_server.py: GET /health (200 once the scheduler answers), GET /metrics with --enable-metrics.
    return assemble(
        engine=ENGINE,
        version=VERSION,
        image=IMAGE,
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
        worker=worker,
        worker_serves_health=True,
    )


def _adapters(decision: Decision, a: ArgBuilder) -> lora.Served:
    """spec.adapters: fields/lora.py enable_lora, lora_paths (``<NAME>=<PATH>``, nargs='*', LoRAPathAction) and
    max_lora_rank ("If not specified, it will be automatically inferred from the adapters provided in
    --lora-paths": rendered only when every adapter declares its rank)."""
    chosen = decision.adapters
    if not chosen.items:
        return lora.Served((), ())
    served = lora.served(decision, LORA)
    a.add("--enable-lora", source="spec.adapters")
    a.add("--lora-paths", *(f"{name}={path}" for name, path in served.paths), source="spec.adapters")
    if all(item.rank is not None for item in chosen.items):
        a.add("--max-lora-rank", chosen.max_rank, source="spec.adapters[].rank")
    return served


DIST_INIT_PORT = 20000
"""The port of the leader's torch.distributed rendezvous (``--dist-init-addr host:port``)."""


def _multi_node(a: ArgBuilder, nodes: int) -> ArgBuilder | None:
    """One replica over ``nodes`` nodes with SGLang 0.5.23's own multi-node launch: every pod runs the same
    ``sglang.launch_server`` with ``--nnodes``, its ``--node-rank`` and the leader's ``--dist-init-addr``
    (fields/parallel.py: nnodes, node_rank, dist_init_addr "The host address for initializing distributed backend
    (e.g., `192.168.0.2:25000`)", pp_size). Tensor parallel inside each node and pipeline parallel across nodes
    (--tp-size = the node's GPUs, --pp-size = nodes). Rank 0 (the leader) serves the API; the other ranks run
    only their schedulers plus a health server on the same host and port (entrypoints/engine.py: "Non-zero-rank
    nodes do not run tokenizer processes", launch_dummy_health_check_server: GET /health), so the workers are
    probed too. None on one node."""
    if nodes <= 1:
        return None
    src = "the decision's placement (nodes per replica)"
    a.add("--pp-size", nodes, source=src)  # fields/parallel.py pp_size
    a.add("--nnodes", nodes, source=src)  # fields/parallel.py nnodes
    # fields/parallel.py dist_init_addr (alias --nccl-init-addr)
    a.add(
        "--dist-init-addr",
        kube_ref("LWS_LEADER_ADDRESS", f":{DIST_INIT_PORT}"),
        source="the LeaderWorkerSet (leader address)",
    )
    worker = a.copy()
    a.add("--node-rank", 0, source="the LeaderWorkerSet (leader)")  # fields/parallel.py node_rank
    worker.add("--node-rank", LWS_WORKER_INDEX, source="the LeaderWorkerSet (worker index)")
    return worker


def _speculative(decision: Decision, target: ResolvedModel, a: ArgBuilder) -> artifacts.Artifact | None:
    """fields/spec.py: speculative_algorithm (builtins EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, ...); STANDALONE
    is a separate small draft model, NGRAM looks tokens up in the prompt and earlier output."""
    s = decision.speculation
    if not s.enabled:
        return None
    src = "spec.speculativeDecoding"
    if s.method == "ngram":
        # arg_groups/speculative_hook.py _handle_ngram sets topk to speculative_ngram_max_bfs_breadth (default 10)
        # and refuses topk > 1 with a page size above 1 on any attention backend but flashinfer: one candidate
        # chain (breadth 1, fields/spec.py) works on all of them.
        a.add("--speculative-algorithm", "NGRAM", source=src)
        a.add("--speculative-ngram-max-bfs-breadth", 1, source=src)
        a.add("--speculative-num-draft-tokens", s.num_tokens + 1, source=f"{src}.numSpeculativeTokens")
        return None
    assert s.draft is not None
    art = artifacts.resolve(artifacts.draft_model(target, s.draft), OWN_HF_LOADER, "draft")
    a.add("--speculative-algorithm", "STANDALONE", source=src)
    a.add("--speculative-draft-model-path", art.reference, source=f"{src}.draftModelRef")
    # A chain of numSpeculativeTokens draft steps, one candidate each (topk 1): draft tokens = steps + 1.
    a.add("--speculative-num-steps", s.num_tokens, source=f"{src}.numSpeculativeTokens")
    a.add("--speculative-eagle-topk", 1, source=src)
    a.add("--speculative-num-draft-tokens", s.num_tokens + 1, source=f"{src}.numSpeculativeTokens")
    return art


_PUBLISHED = (
    "published: LMSYS blog 2024-07-25 'Achieving Faster Open-Source Llama3 Serving with SGLang Runtime (vs. "
    "TensorRT-LLM, vLLM)' (Llama-3-8B on 1x A100 80GB: SGLang at or above vLLM's throughput in every offline "
    "benchmark, up to 3.1x vLLM on Llama-3-70B) and Zheng et al. 2024 'SGLang: Efficient Execution of Structured "
    "Language Model Programs' (RadixAttention: up to 6.4x on shared-prefix workloads); taken as 1.1x vLLM's row "
    "on a 7B model without shared prefixes; not measured here (no GPU lent yet: bench/gpu/h200.sh)"
)
# Continuous batching only (its scheduler admits requests every step); RadixAttention prefix cache; STANDALONE
# (draft model) and NGRAM speculation; FP8 KV; HiCache offload to host memory; tensor parallel inside a node and
# multi-node (--nnodes, --node-rank, --dist-init-addr in fields/parallel.py; rendered as a LeaderWorkerSet). CUDA
# only in our image (its CPU backend needs an Intel AMX build); kernels from compute 7.5 (T4).
RUN_AS = (
    "lmsysorg/sglang sets no USER (runs as root, caches under /root/.cache: FlashInfer, Triton): left as "
    "the image runs it; the container still drops every capability"
)
"""Why its pods run as they do (card field run_as)."""


# Metrics need --enable-metrics (rendered above).
_COLLECTOR = "sglang/srt/observability/metrics_collector.py (SchedulerMetricsCollector), SGLang " + VERSION
AUTOSCALING = Autoscaling(
    signals={
        "queueDepth": ScalingSignal("sglang:num_queue_reqs", "gauge", 1, _COLLECTOR),
        "runningRequests": ScalingSignal("sglang:num_running_reqs", "gauge", 1, _COLLECTOR),
        "kvCacheUsage": ScalingSignal("sglang:token_usage", "gauge", 100, _COLLECTOR),
        "ttft": ScalingSignal(
            "sglang:time_to_first_token_seconds",
            "histogram",
            1000,
            _COLLECTOR.replace("SchedulerMetricsCollector", "TokenizerMetricsCollector"),
        ),
    },
    lacks="",
    scale_to_zero=False,
    cold_start="minutes: the weights loaded onto the GPUs, then CUDA graph capture before the first request",
)

_AIC_FIT = (
    FITTED + ", over aiconfigurator 0.12.0's tables for this engine (selection/perf_tables.py), which "
    "correct the roofline point by point on the GPUs it models"
)
PERFORMANCE = Performance(
    efficiency={
        "nvidia": Efficiency(0.75, 0.40, 0.5, 15.0, 20.0, _AIC_FIT, 200.0, 0.5, 0.15),
        "amd": Efficiency(
            0.30,
            0.30,
            1.0,
            400.0,
            10.0,
            "assumed as ROCm vLLM's: dstack's DeepSeek-R1 rows of SGLang 0.4.2.post4 on MI300X, two not held "
            "out, are too few to fit (three or more); moe: ROCm vLLM's FP8 one (engines/vllm.py formats), as SGLang "
            "runs an MoE's experts through the same Triton kernel on ROCm (python/sglang/srt/layers/moe/"
            "fused_moe_triton/fused_moe.py: 'Adapted from' vLLM's fused_moe.py), which puts those rows' TTFT within "
            "10% of the measured 1.6, 4.0 and 13.9 s (the held-out one included) where the dense rate gave a tenth",
            0.0,
            0.5,
            0.05,
        ),
    },
    older=(
        (
            "amd",
            "0.4.4",
            Efficiency(
                0.30,
                0.40,
                4.0,
                400.0,
                40.0,
                FITTED + " (SGLang 0.4.2.post4 on 8x MI300X, ROCm 6.3, DeepSeek-R1 FP8: dstack's study, 3,200-token "
                "prompts at 4 to 128 users and 800 to 6,400 output tokens, 6 rows not held out): the first ROCm "
                "DeepSeek-R1 support, before AMD's AITER MLA and MoE kernels (ROCm blog 'Supercharge DeepSeek-R1 "
                "Inference on AMD Instinct MI300X', 2025-03-21); its decode reads the weights at 0.4 of the bandwidth "
                "(the H200 rows' entry below: 0.3), so the MI300X comes out ahead at 4 to 16 users as measured "
                "(clipped mean |log2| 0.17 -> 0.12)",
                0.0,
                0.5,
                0.05,
                kv=0.3,
            ),
        ),
        (
            "nvidia",
            "0.4.4",
            Efficiency(
                0.75,
                0.30,
                0.5,
                150.0,
                80.0,
                FITTED + " (dstack's DeepSeek-R1 study on SGLang 0.4.3.post2, 8x H200, --enable-dp-attention, which "
                "the rows state and the model rates: workload.Device.attention_dp; every factor fitted once the study "
                "was read whole, 9 rows not held out at 4 to 128 users and 800 to 6,400 output tokens: clipped mean "
                "|log2| 0.55 -> 0.26; before, with 4 rows, only moe and burst): the first DeepSeek-R1 support's MLA "
                "and block-FP8 MoE kernels, with 3,200-token prompts of equal length prefilled first in waves, made "
                "TTFT 10x the pinned factors'; the cut-off lies between these rows and GPUStack's SGLang 0.5.3 MoE "
                "rows, which the pinned factors rate; SGLang 0.3.0's dense rows keep the pinned factors; request_ms "
                "refitted once the wave wait counted prompt steps only (selection/perf.py gpu_performance)",
                200.0,
                0.5,
                0.05,
                kv=0.2,
            ),
        ),
    ),
    max_sequences=0,
    max_sequences_source="SGLang's max_running_requests defaults to what its KV pool holds (server_args.py)",
    aiconfigurator="sglang",
    step_tokens=8192,
    step_tokens_source="SGLang chunked_prefill_size default on 80 GB-class GPUs (server_args.py: 8192; 2048-4096 "
    "on smaller ones)",
)
_LORA_SRC = (
    f"SGLang {VERSION}: srt/arg_groups/fields/lora.py (enable_lora, lora_paths NAME=PATH, max_lora_rank "
    "inferred from the adapters), srt/utils/common.py SUPPORTED_LORA_TARGET_MODULES, "
    "srt/entrypoints/openai/serving_base.py _parse_model_parameter ('base-model:adapter-name'), "
    "srt/lora/lora_manager.py validate_new_adapter (no DoRA, no added tokens), srt/arg_groups/lora_hook.py "
    "check_lora_speculative_compatibility (NGRAM, EAGLE, EAGLE3 only: not STANDALONE)"
)
LORA = Lora(
    serves=True,
    how="the OpenAI model field is '<servedName>:<adapter name>' (a bare adapter name is taken as the base model)",
    formats=frozenset({"peft"}),
    max_rank=1024,
    rank_choices=(),
    default_rank=1024,
    architectures=frozenset(),
    target_modules=frozenset(
        {
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "q_a_proj",
            "kv_a_proj_with_mqa",
            "q_b_proj",
            "kv_b_proj",
            "wq_b",
            "wk",
            "weights_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
            "qkv_proj",
            "gate_up_proj",
            "embed_tokens",
            "lm_head",
            "qkvr",
            "wo_ud",
        }
    ),
    runtime="",
    prefix_cache=True,
    speculative=frozenset({"ngram"}),
    dora=False,
    source=_LORA_SRC,
)

CARD = EngineCard(
    name=ENGINE,
    title="SGLang",
    version=VERSION,
    formats=frozenset({"safetensors"}),
    accelerators=frozenset({"gpu"}),
    batching=("continuous",),
    prefix_cache=True,
    speculative=frozenset({"draft", "ngram"}),
    quantizations=frozenset({"none", "awq", "gptq", "fp8", "bitsandbytes"}),
    kv_dtypes=frozenset(KV_DTYPES),
    multi_gpu=True,
    multi_node=True,
    min_compute=(7, 5),
    bf16_min_compute=(8, 0),
    own_hf_loader=OWN_HF_LOADER,
    kv_offload=True,
    float32_on_gpu="float16",
    # CUDA only here: SGLang's ROCm images (lmsysorg/sglang:*-rocm*) are other builds, not rendered.
    images={"gpu": IMAGE},
    devices={"nvidia": IMAGE},
    endpoints=ENDPOINTS,
    platforms={
        IMAGE: Platforms(
            frozenset({"amd64", "arm64"}),
            "sglang .github/workflows/_docker-build-and-publish.yml: linux/amd64 and linux/arm64 "
            "builds joined in one manifest (docker buildx imagetools create)",
        )
    },
    profiles={"gpu": Profile(55, 2750, 15.0, 2, _PUBLISHED)},
    performance=PERFORMANCE,
    summary="GPU serving with RadixAttention prefix reuse: continuous batching, HiCache, draft and n-gram speculation",
    render=container,
    layer_split=False,
    slots=False,
    run_as_user=None,
    run_as=RUN_AS,
    autoscaling=AUTOSCALING,
    prefix_cache_caveat="",
    auto_batching={},
    flag_bounds={},  # Python ints: no bounded flag
    lora=LORA,
)
