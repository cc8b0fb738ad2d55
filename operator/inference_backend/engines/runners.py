"""Shared flags of our own runners (ONNX Runtime server and PyTorch runner), one image each, pinned to the
package version. Flags are cited against operator/inference_backend/runners/common/args.py (add_common_flags),
runners/pytorch/args.py and runners/onnx/args.py of this repository (the runners branch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from inference_backend import __version__
from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Decision
from inference_backend.engines import artifacts, lora
from inference_backend.engines.base import (
    HOST,
    HTTP_PORT,
    ArgBuilder,
    Endpoints,
    EngineContainer,
    artifact_parts,
    assemble,
    cpu_cores,
    merge_named,
    placement,
    served_name,
    shm_volume,
)
from inference_backend.engines.card import Autoscaling, Lora, Platforms, ScalingSignal, Signal

PLATFORMS = Platforms(
    frozenset({"amd64", "arm64"}),
    ".github/workflows/release.yaml (platforms linux/amd64,linux/arm64); torch, onnxruntime and onnxruntime-genai "
    "publish manylinux_2_28_aarch64 wheels (torch's with CUDA 13), so both runner images build for arm64",
)
"""Our runner images (the PyTorch runner, the ONNX Runtime server's CPU build)."""
ONNX_CUDA_PLATFORMS = (
    ".github/workflows/release.yaml (onnxruntime-server -cuda: linux/amd64 only): onnxruntime-gpu and "
    "onnxruntime-genai-cuda publish no aarch64 wheels, so no arm64 CUDA build of the ONNX server exists"
)

VERSION = __version__
# common/server.py: GET /health (503 until loaded), GET /metrics, both on the API port.
ENDPOINTS = Endpoints(HTTP_PORT, health="/health", metrics="/metrics")
ALIASES = {"--no-enable-prefix-caching": "--enable-prefix-caching"}  # argparse.BooleanOptionalAction pair
DTYPES = ("float32", "float16", "bfloat16")  # common/args.py --dtype choices (besides auto)

Extra = Callable[[Decision, ArgBuilder, list[str]], artifacts.Artifact | None]


def container(
    decision: Decision,
    spec: InferenceBackendSpec,
    name: str,
    *,
    engine: str,
    image: str,
    command: tuple[str, ...],
    strategies: tuple[str, ...],
    extra: Extra,
    lora_card: Lora | None = None,
) -> EngineContainer:
    p = placement(decision)
    model = decision.model
    assert model is not None and decision.batching is not None
    notes: list[str] = []
    art = artifacts.resolve(model, False)  # our runners take a local directory
    a = ArgBuilder()
    directory = art.directory
    assert directory is not None  # runners always get local weights (artifacts: fetched for hf://)
    a.add("--model", directory, source="spec.model.uri")  # common/args.py --model PATH (a local directory)
    a.add("--served-model-name", served_name(decision, name), source="spec.model.servedName")
    a.add("--host", HOST, source="the operator (listen on all addresses)")
    a.add("--port", HTTP_PORT, source="the operator (port 8000)")
    if decision.serving_dtype in DTYPES:
        a.add("--dtype", decision.serving_dtype, source="spec.model.dtype")
    a.add("--max-model-len", model.context_length, source="spec.model.contextLength")
    b = decision.batching
    strategy = b.strategy if b.strategy in strategies else strategies[-1]
    a.add("--batching", strategy, source="spec.batching.strategy")  # common/args.py --batching
    if b.max_batch_size is not None:
        a.add("--max-batch-size", b.max_batch_size, source="spec.batching.maxBatchSize")
    if b.max_batch_tokens is not None:
        a.add("--max-batch-tokens", b.max_batch_tokens, source="spec.batching.maxBatchTokens")
    if b.max_wait_millis is not None and strategy != "continuous":
        a.add("--max-wait-ms", b.max_wait_millis, source="spec.batching.maxWaitMillis")
    a.add("--kv-cache-memory-fraction", spec.kv_cache.memory_fraction, source="spec.kvCache.memoryFraction")
    prefix = "--enable-prefix-caching" if decision.prefix_cache else "--no-enable-prefix-caching"
    a.add(prefix, source="spec.prefixCache.enabled")
    if p.gpu is None:
        a.add("--threads", cpu_cores(decision), source="the decision's placement (CPU cores)")
    if spec.kv_cache.block_size != 16:
        notes.append(f"kvCache.blockSize: the {engine} runner's prefix cache uses fixed 16-token blocks; ignored")
    draft_art = extra(decision, a, notes)
    adapters = lora.Served((), ())
    if decision.adapters.items:
        assert lora_card is not None and lora_card.serves  # the selection never places adapters on the others
        if lora.runtime(decision, lora_card):
            # common/lora_updates.py: the sidecar loads each through /v1/load_lora_adapter (vLLM's switch on)
            adapters = lora.runtime_served(decision, lora_card, name, served_name(decision, name))
        else:
            adapters = lora.served(decision, lora_card)
            # pytorch/args.py --adapter NAME=PATH (repeatable): a PEFT adapter served under NAME (the `model` field)
            for adapter_name, path in adapters.paths:
                a.add("--adapter", f"{adapter_name}={path}", source="spec.adapters")

    art_env, art_vols, art_mounts, init = artifact_parts(art, draft_art, *adapters.artifacts)
    shm_vols, shm_mounts = shm_volume(decision)
    env = art_env
    # common/server.py: GET /health (503 until loaded), GET /metrics on the API port
    engine_container = assemble(
        engine=engine,
        version=VERSION,
        image=image,
        command=command,
        args=a,
        env=env,
        aliases=ALIASES,
        decision=decision,
        spec=spec,
        notes=notes,
        init=init,
        endpoints=ENDPOINTS,
        volumes=merge_named(art_vols, shm_vols),
        mounts=merge_named(art_mounts, shm_mounts),
    )
    return replace(engine_container, adapters_config=adapters.config)


# runners/common/metrics.py: vLLM's names, types and buckets (docs/metrics.md; checked against vLLM 0.33.0 by
# tests/contracts/test_runner_metrics_contract.py).
_METRICS = f"inference_backend/runners/common/metrics.py (vLLM 0.33's names), inference-backend {VERSION}"
SIGNALS: dict[Signal, ScalingSignal] = {
    "queueDepth": ScalingSignal("vllm:num_requests_waiting", "gauge", 1, _METRICS),
    "runningRequests": ScalingSignal("vllm:num_requests_running", "gauge", 1, _METRICS),
    "kvCacheUsage": ScalingSignal(
        "vllm:kv_cache_usage_perc",
        "gauge",
        100,
        _METRICS + " (KV tokens reserved by admitted requests over the budget, a 0-1 ratio)",
    ),
    "ttft": ScalingSignal("vllm:time_to_first_token_seconds", "histogram", 1000, _METRICS),
}
"""The signals both runners have (the ONNX Runtime server and the PyTorch runner share the metrics module)."""


def autoscaling(cold_start: str) -> Autoscaling:
    return Autoscaling(SIGNALS, lacks="", scale_to_zero=True, cold_start=cold_start)
