"""vLLM 0.33.0 (`vllm serve`, image vllm/vllm-openai:v0.33.0).

Flags are cited against vllm-project/vllm: vllm/engine/arg_utils.py (EngineArgs.add_cli_args; stored version read:
commit 99d7eb5, the v0.11 line), vllm/config/cache.py (CacheConfig, stored commit c1d8642, which has
kv_offloading_size/kv_offloading_backend), vllm/config/speculative.py (SpeculativeConfig, stored commit f19b16d,
method "draft_model"), vllm/entrypoints/openai/cli_args.py (--host, --port, --served-model-name). The contract
test parses these args with the real 0.33.0 parser (hack/vllm-venv); where 0.33.0 differs it wins.
"""

from __future__ import annotations

import json
from dataclasses import replace

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Decision, InvalidSpec, ResolvedModel
from inference_backend.engines import artifacts, lora
from inference_backend.engines.base import (
    HOST,
    HTTP_PORT,
    LWS_LEADER_ADDRESS,
    LWS_WORKER_INDEX,
    MODEL_CACHE_DIR,
    ArgBuilder,
    Endpoints,
    EngineContainer,
    assemble,
    cached_pod_parts,
    device_image,
    gpus,
    merge_named,
    placement,
    served_name,
)
from inference_backend.engines.card import (
    FITTED,
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
from inference_backend.engines.vllm_lora import LORA_ARCHITECTURES

ENGINE = "vllm"
OWN_HF_LOADER = True  # downloads hf:// repositories itself (see artifacts.py)
VERSION = "0.33.0"
IMAGE = f"vllm/vllm-openai:v{VERSION}"
# AMD Instinct: vLLM's official ROCm image (docs/getting_started/installation/gpu.rocm.inc.md, "Pre-built images":
# vllm/vllm-openai-rocm on Docker Hub, published upstream since 2026-01-20; supported GPUs MI200s (gfx90a), MI300
# (gfx942), MI350 (gfx950); ROCm 6.3+). Same `vllm serve` CLI; the AMD device plugin maps /dev/kfd and /dev/dri for
# an amd.com/gpu request. Gaudi needs the separate vllm-gaudi plugin, not part of the pinned release: no habana build.
ROCM_IMAGE = f"vllm/vllm-openai-rocm:v{VERSION}"
DEVICES: dict[GpuVendor, str] = {"nvidia": IMAGE, "amd": ROCM_IMAGE}
_RELEASE = (
    'vLLM\'s release publishing script (.buildkite/scripts, "Publish a release Docker image family": '
    "per-arch images pulled from the release repository, then docker manifest create)"
)
PLATFORMS = {
    # vllm/vllm-openai:v<version> is a manifest over the -x86_64 and -aarch64 images (GH200/GB200 hosts run the latter)
    IMAGE: Platforms(
        frozenset({"amd64", "arm64"}), f"{_RELEASE}: vllm/vllm-openai:v<version> from -x86_64 and -aarch64"
    ),
    # vllm/vllm-openai-rocm tags are one x86_64 build (publish_rocm_variant), no manifest list
    ROCM_IMAGE: Platforms(frozenset({"amd64"}), f"{_RELEASE}: vllm/vllm-openai-rocm tagged from one x86_64 build"),
}
ENDPOINTS = Endpoints(HTTP_PORT, health="/health", metrics="/metrics")
COMMAND = ("vllm", "serve")
# Every spelling of the flags we set -> one name (0.33.0 engine/arg_utils.py: "-tp", "-q", "-sc",
# --device-memory-utilization aliases; EnableDisableAction adds --disable-<x> and the legacy --no-enable-<x>;
# FlexibleArgumentParser also accepts underscores, normalised in base._canonical).
ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-q": "--quantization",
    "--no-enable-prefix-caching": "--enable-prefix-caching",
    "--disable-prefix-caching": "--enable-prefix-caching",
    "-sc": "--speculative-config",
    "--device-memory-utilization": "--gpu-memory-utilization",
    "--model": "--model",
    "-pp": "--pipeline-parallel-size",
    "-n": "--nnodes",
    "-r": "--node-rank",
}
# CUDA block sizes (config/cache.py BlockSize = 1, 8, 16, 32, 64, 128, 256; "On CUDA devices, only block sizes
# up to 32 are supported").
CUDA_BLOCK_SIZES = (1, 8, 16, 32)
NGRAM_LOOKUP_MAX = 4
NGRAM_LOOKUP_MIN = 2


def container(decision: Decision, spec: InferenceBackendSpec, name: str) -> EngineContainer:
    placement(decision)  # raises on an unsatisfiable decision
    model = decision.model
    assert model is not None and decision.batching is not None
    notes: list[str] = []
    art = artifacts.resolve(model, OWN_HF_LOADER)
    a = ArgBuilder()
    _model_args(a, decision, art, name)
    _kv_cache_args(a, decision, spec, notes)
    # CacheConfig.enable_prefix_caching. 0.33.0 uses EnableDisableAction (utils/argparse_utils.py): the documented
    # negation is --disable-prefix-caching (the legacy --no-enable-prefix-caching is still parsed, hidden from --help).
    prefix = "--enable-prefix-caching" if decision.prefix_cache else "--disable-prefix-caching"
    a.add(prefix, source="spec.prefixCache.enabled")
    b = decision.batching
    if b.max_batch_size is not None:
        a.add("--max-num-seqs", b.max_batch_size, source="spec.batching.maxBatchSize")  # SchedulerConfig
    if b.max_batch_tokens is not None:
        # SchedulerConfig.max_num_batched_tokens: tokens per scheduler step (the prefill budget)
        a.add("--max-num-batched-tokens", b.max_batch_tokens, source="spec.batching.maxBatchTokens")
    spec_cfg, draft_art = _speculative(decision, model)
    if spec_cfg is not None:
        # VllmConfig.speculative_config (JSON; SpeculativeConfig keys method, model, num_speculative_tokens,
        # prompt_lookup_max, prompt_lookup_min)
        a.add("--speculative-config", spec_cfg, source="spec.speculativeDecoding")
    adapters = _adapters(decision, a, name)
    worker = _multi_node(a, placement(decision).pipeline_parallel)

    parts = cached_pod_parts(decision, art, draft_art, *adapters.artifacts)
    env = merge_named(
        # HF_HOME: where huggingface_hub (vLLM's hf:// loader) caches downloads.
        ({"name": "HF_HOME", "value": MODEL_CACHE_DIR},),
        # vllm/envs.py VLLM_NO_USAGE_STATS / DO_NOT_TRACK: no usage reporting from the cluster.
        ({"name": "VLLM_NO_USAGE_STATS", "value": "1"}, {"name": "DO_NOT_TRACK", "value": "1"}),
        parts.env,
    )
    # GET /health (openai/api_server.py); the Prometheus app is mounted at /metrics on the API port.
    engine = assemble(
        engine=ENGINE,
        version=VERSION,
        image=device_image(decision, DEVICES),
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
    )
    return replace(engine, adapters_config=adapters.config)


def _model_args(a: ArgBuilder, decision: Decision, art: artifacts.Artifact, name: str) -> None:
    """The model, where the API server listens, its served name, the GPUs it is split over, the number formats
    it computes in and its context length."""
    model = decision.model
    assert model is not None
    # `vllm serve <model_tag>`: positional model (entrypoints/cli/serve.py); a repository id or a local path.
    a.positional.append(art.reference)
    a.add("--host", HOST, source="the operator (listen on all addresses)")  # openai/cli_args.py --host
    a.add("--port", HTTP_PORT, source="the operator (port 8000)")  # openai/cli_args.py --port
    # ModelConfig: --served-model-name
    a.add("--served-model-name", served_name(decision, name), source="spec.model.servedName")
    # ParallelConfig: --tensor-parallel-size / -tp
    a.add("--tensor-parallel-size", gpus(decision), source="the decision's placement (GPUs per replica)")
    # ModelConfig: --dtype {auto,half,float16,bfloat16,float,float32}
    if model.quantization in ("awq", "gptq"):
        # AWQ/GPTQ kernels compute in float16 (arg_utils help: "half ... Recommended for AWQ quantization").
        a.add("--dtype", "float16", source="spec.model.quantization")
    elif decision.serving_dtype in ("float16", "bfloat16", "float32"):
        a.add("--dtype", decision.serving_dtype, source="spec.model.dtype")
    # ModelConfig: --quantization / -q. AWQ/GPTQ checkpoints carry quantization_config and vLLM then picks the
    # fastest kernel (awq_marlin/gptq_marlin); forcing "awq" would pin the slow one, so only the in-flight scheme
    # is passed. bitsandbytes is not a 0.33.0 method (the catalog never selects vLLM for it).
    if model.quantization == "bitsandbytes":
        raise InvalidSpec("spec.model.quantization", "bitsandbytes is not a vLLM 0.33.0 quantization method")
    if model.quantization == "fp8":
        a.add("--quantization", model.quantization, source="spec.model.quantization")
    a.add("--max-model-len", model.context_length, source="spec.model.contextLength")  # ModelConfig


def _kv_cache_args(a: ArgBuilder, decision: Decision, spec: InferenceBackendSpec, notes: list[str]) -> None:
    """The GPU memory the KV cache may take, its block size and number format, and its offload to CPU memory."""
    # CacheConfig: --gpu-memory-utilization (0, 1]
    a.add("--gpu-memory-utilization", spec.kv_cache.memory_fraction, source="spec.kvCache.memoryFraction")
    if spec.kv_cache.block_size in CUDA_BLOCK_SIZES:
        a.add("--block-size", spec.kv_cache.block_size, source="spec.kvCache.blockSize")  # CacheConfig
    else:
        notes.append(
            f"kvCache.blockSize {spec.kv_cache.block_size}: vLLM on CUDA takes 1, 8, 16 or 32; its default is used"
        )
    kv = _kv_dtype(decision, notes)
    if kv is not None:
        # CacheConfig.cache_dtype: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla
        a.add("--kv-cache-dtype", kv, source="spec.kvCache.dtype")
    if spec.kv_cache.cpu_offload_gi_b > 0:
        # CacheConfig.kv_offloading_backend ("native" = vLLM's own CPU offloading) + kv_offloading_size (GiB,
        # the total across TP ranks). Not --swap-space (V0 preemption swap, removed upstream).
        a.add("--kv-offloading-backend", "native", source="spec.kvCache.cpuOffloadGiB")
        a.add("--kv-offloading-size", spec.kv_cache.cpu_offload_gi_b, source="spec.kvCache.cpuOffloadGiB")


MAX_GPU_LORAS = 8
"""--max-loras at most: the adapters one batch mixes, each with a GPU slot of --max-lora-rank; more adapters wait in
CPU memory (--max-cpu-loras) and swap in."""


def _adapters(decision: Decision, a: ArgBuilder, name: str) -> lora.Served:
    """spec.adapters: config/lora.py LoRAConfig (--enable-lora, --max-loras, --max-lora-rank, --max-cpu-loras) and
    entrypoints/openai/cli_args.py --lora-modules NAME=PATH (nargs='+'): each served under its name in the OpenAI
    ``model`` field. Loaded at run time (lora.runtime: VLLM_ALLOW_RUNTIME_LORA_UPDATING, the sidecar posts
    /v1/load_lora_adapter) the names are not in the args and the slots are rounded up (:func:`lora_slots`), so a
    change of the list within them changes no pod template."""
    chosen = decision.adapters
    if not chosen.items:
        return lora.Served((), ())
    src = "spec.adapters"
    at_runtime = lora.runtime(decision, LORA)
    if at_runtime:
        served = lora.runtime_served(decision, LORA, name, served_name(decision, name))
    else:
        served = lora.served(decision, LORA)
    a.add("--enable-lora", source=src)
    if not at_runtime:
        a.add("--lora-modules", *(f"{n}={path}" for n, path in served.paths), source=src)
    slots, cpu = lora_slots(len(served.paths), at_runtime)
    a.add("--max-loras", slots, source=src)
    if cpu is not None:
        a.add("--max-cpu-loras", cpu, source=src)
    a.add("--max-lora-rank", chosen.max_rank, source="spec.adapters[].rank")
    return served


def lora_slots(adapters: int, at_runtime: bool) -> tuple[int, int | None]:
    """(--max-loras, --max-cpu-loras or None): as many GPU slots as adapters up to MAX_GPU_LORAS, the rest in CPU
    memory. Loaded at run time both are rounded up to a power of two (1, 2, 4, 8; then 16, 32, ...), so adding or
    removing an adapter rolls out only when the count crosses one; beyond the CPU slots vLLM still serves every
    loaded adapter, swapping it in from its path (vllm/lora/worker_manager.py LRUCacheWorkerLoRAManager)."""
    count = adapters if not at_runtime else 1 << max(adapters - 1, 0).bit_length()
    slots = min(count, MAX_GPU_LORAS)
    return slots, (count if count > slots else None)


MASTER_PORT = 29501
"""ParallelConfig.master_port's default (config/parallel.py), written out so leader and workers agree."""


def _multi_node(a: ArgBuilder, nodes: int) -> ArgBuilder | None:
    """One replica over ``nodes`` nodes with vLLM 0.33.0's own multi-node mode (no Ray): the leader pod runs
    ``vllm serve`` as node rank 0 (the API server and the first pipeline stage), each worker pod the same command
    with ``--headless`` and its rank. Cited against vllm 0.33.0: engine/arg_utils.py (EngineArgs.add_cli_args,
    the ParallelConfig group: --pipeline-parallel-size/-pp, --distributed-executor-backend, --master-addr,
    --master-port, --nnodes/-n, --node-rank/-r; create_engine_config checks that --nnodes divides the world size
    tensor x pipeline and that 0 <= --node-rank < --nnodes) and config/parallel.py (distributed_executor_backend:
    "To use "mp" you must also set nnodes"; master_addr/master_port/node_rank/nnodes "for multi-node distributed
    inference when distributed_executor_backend is mp"); entrypoints/cli/serve.py (--headless: run_headless starts
    only the MultiprocExecutor's workers when node_rank_within_dp > 0, joining the torch.distributed group at
    master_addr:master_port). Tensor parallel stays inside each node (world size / nnodes = the node's GPUs), so the
    pipeline stages are the nodes. The LeaderWorkerSet gives the leader's DNS name and each pod's index as env
    (base.LWS_LEADER_ADDRESS, base.LWS_WORKER_INDEX). None on one node."""
    if nodes <= 1:
        return None
    src = "the decision's placement (nodes per replica)"
    a.add("--pipeline-parallel-size", nodes, source=src)
    a.add("--distributed-executor-backend", "mp", source=src)
    a.add("--nnodes", nodes, source=src)
    a.add("--master-addr", LWS_LEADER_ADDRESS, source="the LeaderWorkerSet (leader address)")
    a.add("--master-port", MASTER_PORT, source="the operator (torch.distributed port)")
    worker = a.copy()
    a.add("--node-rank", 0, source="the LeaderWorkerSet (leader)")
    worker.add("--node-rank", LWS_WORKER_INDEX, source="the LeaderWorkerSet (worker index)")
    worker.add("--headless", source="the LeaderWorkerSet (worker: no API server)")
    return worker


def _kv_dtype(decision: Decision, notes: list[str]) -> str | None:
    want = decision.kv_cache_dtype
    if want == "auto":
        return None
    if want == "fp8":
        return "fp8"
    if want == "bfloat16":
        return "bfloat16"
    if want == "float16" and decision.serving_dtype == "float16":
        return None  # "auto" = the model dtype, which is float16 already
    notes.append(
        f"kvCache.dtype {want}: vLLM has no {want} KV cache unless the model computes in it "
        f"(serving dtype {decision.serving_dtype}); the model dtype is used"
    )
    return None


def _speculative(decision: Decision, target: ResolvedModel) -> tuple[str | None, artifacts.Artifact | None]:
    s = decision.speculation
    if not s.enabled:
        return None, None
    if s.method == "ngram":
        cfg = {
            "method": "ngram",
            "num_speculative_tokens": s.num_tokens,
            "prompt_lookup_max": NGRAM_LOOKUP_MAX,
            "prompt_lookup_min": NGRAM_LOOKUP_MIN,
        }
        return json.dumps(cfg, sort_keys=True, separators=(",", ":")), None
    assert s.draft is not None
    art = artifacts.resolve(artifacts.draft_model(target, s.draft), OWN_HF_LOADER, "draft")
    cfg2: dict[str, object] = {"method": "draft_model", "model": art.reference, "num_speculative_tokens": s.num_tokens}
    return json.dumps(cfg2, sort_keys=True, separators=(",", ":")), art


_GPU_QUANT = frozenset({"none", "awq", "gptq", "fp8", "int8"})
_VLLM_BLOG = (
    "published: vLLM blog 2023-06-20 'vLLM: Easy, Fast, and Cheap LLM Serving with PagedAttention' (up to 24x the "
    "throughput of HF Transformers and 3.5x of TGI; LLaMA-7B on A10G, LLaMA-13B on A100-40GB) and Anyscale 2023 "
    "'How continuous batching enables 23x throughput in LLM inference' (A100); not measured here (no GPU lent yet: "
    "bench/gpu/h200.sh)"
)
# Continuous batching only (its scheduler admits requests every step, which subsumes dynamic batching); spec decode
# with a draft model or n-gram lookup; compute capability >= 7.0. No bitsandbytes: 0.33.0's QUANTIZATION_METHODS has
# none (its parser rejects `--quantization bitsandbytes`; docs/engine-flags/vllm-0.33.0.md and
# tests/contracts/test_vllm_harness.py). Multi-node: its native mode (--nnodes/--node-rank/--headless, see
# _multi_node), rendered as a LeaderWorkerSet.
RUN_AS = (
    "vllm/vllm-openai runs as root (its docker/Dockerfile sets no USER) and writes its caches under /root"
    " (vLLM, Triton, torch.compile): left as the image runs it; the container still drops every "
    "capability"
)
"""Why its pods run as they do (card field run_as)."""


_LOGGERS = "vllm/v1/metrics/loggers.py (PrometheusStatLogger), vLLM " + VERSION
AUTOSCALING = Autoscaling(
    signals={
        "queueDepth": ScalingSignal("vllm:num_requests_waiting", "gauge", 1, _LOGGERS),
        "runningRequests": ScalingSignal("vllm:num_requests_running", "gauge", 1, _LOGGERS),
        "kvCacheUsage": ScalingSignal("vllm:kv_cache_usage_perc", "gauge", 100, _LOGGERS),
        "ttft": ScalingSignal("vllm:time_to_first_token_seconds", "histogram", 1000, _LOGGERS),
    },
    lacks="",
    scale_to_zero=False,
    cold_start="minutes: the multi-GB image, the weights loaded onto the GPUs, then torch.compile and CUDA graph "
    "capture before the first request",
)

_AIC_FIT = (
    FITTED + ", over aiconfigurator 0.12.0's tables for this engine (selection/perf_tables.py), which "
    "correct the roofline point by point on the GPUs it models"
)
PERFORMANCE = Performance(
    efficiency={
        "nvidia": Efficiency(0.45, 0.90, 3.0, 150.0, 40.0, _AIC_FIT, 0.0, 0.1, 0.5),
        "amd": Efficiency(
            0.10,
            0.30,
            4.0,
            400.0,
            80.0,
            FITTED + " (ROCm vLLM 0.6 in 16 bits on MI300X: LLM-Inference-Bench, dstack bf16 rows); the KV reads at "
            "decode's share since ROCm's custom paged-attention kernel (vLLM PR #8310, from 0.6.2; the older entry "
            "below rates the releases before it)",
            0.0,
            1.5,
            0.75,
        ),
        "habana": Efficiency(0.40, 0.60, 2.0, 20.0, 10.0, "assumed: the vLLM Gaudi fork has no published row here"),
    },
    older=(
        (
            "amd",
            "0.6.2",
            Efficiency(
                0.10,
                0.30,
                4.0,
                400.0,
                80.0,
                FITTED + " (ROCm vLLM 0.6.1 in 16 bits on MI300X: LLM-Inference-Bench, built from Dockerfile.rocm) - "
                "the 16-bit factors above but kv: before ROCm's custom paged-attention kernel (vllm-project/vllm PR "
                "#8310, opened 2024-09-10, the day before 0.6.1's tag: 1.2-1.5x the throughput on Llama-2-70B at 8-32 "
                "sequences) the generic kernel read the KV cache at half the weights' share; at batch 64 "
                "LLM-Inference-Bench's MI300X slows from 2,093 to 684 output tokens/s as prompt and output grow from "
                "128 to 2,048 tokens, the A100's from 2,491 to 1,042, though the MI300X has 3.4x the bandwidth "
                "(these 13 rows' clipped mean |log2| 0.44 -> 0.40)",
                0.0,
                1.5,
                0.75,
                kv=0.15,
            ),
        ),
        (
            "nvidia",
            "0.8",
            Efficiency(
                0.30,
                0.70,
                0.5,
                5.0,
                80.0,
                FITTED + " (vLLM 0.4-0.7 on A10G, L40S, H100, H200: Hugging Face llmperf, MLPerf 4.1, SGLang's v0.6 "
                "benchmark, dstack rows): the V0 engine, the default before 0.8.0, scheduled the waiting prompts "
                "first, unchunked, in steps of their own; V1 chunks them into the decode steps; kv: V0's "
                "paged-attention decode kernel read the KV cache at a fraction of the share its weight GEMMs reach "
                "(0.08 against 0.7 since the last refit; the "
                "fit with the kv factor and a 2 ms step: clipped mean |log2| 0.36 -> 0.32 on these rows; refitted "
                "with dstack's DeepSeek-R1 rows of vLLM 0.7.4 on 8x H200 at 4 to 128 users and TGI v3's page's vLLM "
                "0.6.4 rows: 0.48 -> 0.47, the 128-user DeepSeek-R1 rows still 1.4-2.5x over: their KV cache filled "
                "before 128 requests, docs/engine-profiles.md; refitted once the wave wait counted prompt steps "
                "only, selection/perf.py gpu_performance: 0.52 -> 0.46)",
                0.0,
                2.0,
                0.3,
                kv=0.08,
            ),
        ),
    ),
    formats=(
        (
            "amd",
            "fp8",
            Efficiency(
                0.55,
                0.40,
                8.0,
                150.0,
                80.0,
                FITTED
                + " (ROCm vLLM 0.4-0.7 in FP8 on MI300X: MLPerf 4.1, dstack, Oracle rows; refitted with dstack's "
                "DeepSeek-R1 rows at 4 to 128 users and 800 to 6,400 output tokens: clipped mean |log2| 0.38 -> 0.21; "
                "refitted once the wave wait counted prompt steps only: 0.21 -> 0.19)",
                0.0,
                1.0,
                0.05,
                kv=0.2,
            ),
        ),
        (
            "amd",
            "fbgemm_fp8",
            Efficiency(
                0.55,
                0.10,
                4.0,
                150.0,
                2.0,
                FITTED + " (dstack's 8x MI300X rows of Meta's Llama-3.1-405B-FP8 on ROCm vLLM 0.6.3, which its "
                "README finds 'not at all optimized for Mi300x' beside AMD's per-tensor FP8 checkpoint): Meta's "
                "row-wise (per-channel weight, per-token activation) FP8 scales take vLLM's unfused-dequant fallback "
                "where CUTLASS is absent (model_executor/layers/quantization/utils/w8a8_utils.py apply_fp8_linear: "
                "'Fallback for channelwise case, where we use unfused DQ due to limitations with scaled_mm'); only "
                "the decode share is fitted (bench/perf_model.py FIT_ONLY), the rest is the per-tensor FP8 entry's: "
                "0.30 -> 0.10, a third of the weight-read rate, clipped mean |log2| 0.94 -> 0.08 on its three rows)",
                0.0,
                0.75,
                0.05,
                kv=0.08,
            ),
        ),
    ),
    table_ttft=False,
    table_ttft_source="aiconfigurator 0.12.0's TTFT for vLLM is not used: against NVIDIA's end-to-end vLLM "
    "measurements shipped with it (silicon_sample.csv, the calibration set's aiconfigurator-silicon rows) the fitted "
    "roofline's TTFT is closer (make bench-model, the vLLM figures' median |log2| with the table's TTFT / without: "
    "0.31 / 0.23 on the fitted rows, 0.41 / 0.27 held out); its TPOT is used",
    max_sequences=256,
    max_sequences_large_gpu=1024,
    max_sequences_source="vLLM max_num_seqs default (vllm/engine/arg_utils.py EngineArgs._set_default_args: 1024 on "
    "GPUs of 70 GiB or more but A100s, else 256)",
    large_gpu_except=("a100",),
    aiconfigurator="vllm",
    step_tokens=2048,
    step_tokens_large_gpu=8192,
    step_tokens_source="vLLM max_num_batched_tokens default for the OpenAI server (EngineArgs._set_default_args: "
    "8192 on GPUs of 70 GiB or more, else 2048; A100s keep the smaller defaults: `'a100' not in device_name`, as "
    "vLLM's tests/engine/test_arg_utils.py test_defaults_with_usage_context checks)",
)
_LORA_SRC = (
    f"vLLM {VERSION}: vllm/config/lora.py (LoRAConfig: MaxLoRARanks 1, 8, 16, 32, 64, 128, 256, 320, 512, "
    "default 16; max_loras default 1), vllm/lora/peft_helper.py (PEFT adapters; no DoRA, no lora_bias), "
    "entrypoints/openai/models/protocol.py LoRAModulePath (--lora-modules NAME=PATH), vllm/envs.py "
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING and entrypoints/serve/lora/api_router.py /v1/load_lora_adapter; the "
    "architectures are the model classes implementing SupportsLoRA (engines/vllm_lora.py, checked against "
    "vLLM's registry by tests/contracts/test_vllm_lora.py)"
)
LORA = Lora(
    serves=True,
    how="the OpenAI model field names the adapter (--lora-modules NAME=PATH)",
    formats=frozenset({"peft"}),
    max_rank=512,
    rank_choices=(1, 8, 16, 32, 64, 128, 256, 320, 512),
    default_rank=16,
    architectures=LORA_ARCHITECTURES,
    target_modules=frozenset(),
    runtime="POST /v1/load_lora_adapter and /v1/unload_lora_adapter (VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)",
    prefix_cache=True,
    speculative=frozenset({"draft", "ngram"}),
    dora=False,
    source=_LORA_SRC,
    info_metric="vllm:lora_requests_info",
    runtime_switch="VLLM_ALLOW_RUNTIME_LORA_UPDATING",
    info_metric_source=f"vllm/v1/metrics/loggers.py (PrometheusStatLogger, with --enable-lora), vLLM {VERSION}",
)

CARD = EngineCard(
    name=ENGINE,
    title="vLLM",
    version=VERSION,
    formats=frozenset({"safetensors"}),
    accelerators=frozenset({"gpu"}),
    batching=("continuous",),
    prefix_cache=True,
    speculative=frozenset({"draft", "ngram"}),
    quantizations=_GPU_QUANT,
    kv_dtypes=frozenset({"fp8", "float16", "bfloat16"}),
    multi_gpu=True,
    multi_node=True,
    min_compute=(7, 0),
    bf16_min_compute=(8, 0),
    own_hf_loader=OWN_HF_LOADER,
    kv_offload=True,
    float32_on_gpu="float16",
    images={"gpu": IMAGE},
    devices=DEVICES,
    platforms=PLATFORMS,
    endpoints=ENDPOINTS,
    profiles={"gpu": Profile(60, 2500, 15.0, 2, _VLLM_BLOG)},
    performance=PERFORMANCE,
    summary="highest GPU throughput: PagedAttention, continuous batching, prefix cache, draft and n-gram speculation",
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
