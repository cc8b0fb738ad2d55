"""Placement options of one engine: every (hardware, GPUs per replica) that fits, with estimates and misses."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Placement, ResolvedModel
from inference_backend.engines import card
from inference_backend.facts import VENDOR_TITLES, GPUFacts, product_matches
from inference_backend.memory import (
    DTYPE_BYTES,
    KV_DTYPE_BYTES,
    QUANT_BYTES,
    Fit,
    cpu_fit,
    gpu_fit,
    kv_bytes_per_token,
    tensor_parallel_options,
)
from inference_backend.quantity import gib
from inference_backend.selection.hardware import UsableClass

MIB = 2**20
_TP_EFFICIENCY = 0.9  # per doubling of tensor parallelism (all-reduce cost)


@dataclass(frozen=True)
class Option:
    engine: str
    placement: Placement
    fit: Fit
    kv_per_token: float
    serving_dtype: str
    speculate: bool
    ttft_ms: float
    tokens_per_second: float
    kv_sequences: int
    misses: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)

    def sort_key(self, preferences: list[str], busy: frozenset[tuple[str, int]] = frozenset()) -> tuple[object, ...]:
        """``busy``: (GPU product, GPUs per replica) without enough free GPUs for this spec's replicas."""
        p = self.placement
        if p.gpu is None:
            return (0, len(self.misses), not self.speculate, -p.hardware.cpu_millis, -p.hardware.memory_bytes,
                    p.hardware)  # fmt: skip
        gpu = p.gpu
        pref = next((i for i, name in enumerate(preferences) if product_matches(name, gpu)), len(preferences))
        full = (p.gpu.product, p.gpus_per_replica) in busy
        return (pref, len(self.misses), full, not p.gpu.labelled, not self.speculate, p.gpus_per_replica,
                p.gpu.memory_mib, -p.gpu.speed, p.gpu.product, p.hardware)  # fmt: skip


def serving_dtype(engine: str, model: ResolvedModel, gpu: GPUFacts | None) -> tuple[str, list[str]]:
    """The dtype the engine computes in on this hardware, with the reason when it differs from the model's."""
    dtype = model.dtype
    notes: list[str] = []
    if dtype in ("fp8", "int8", "int4") or model.quantization != "none":
        return dtype, notes
    caps = card(engine)
    if gpu is not None and dtype == "float32" and caps.float32_on_gpu != "float32":
        notes.append(f"{engine} serves float32 checkpoints in {caps.float32_on_gpu} on GPU")
        dtype = caps.float32_on_gpu
    if gpu is not None and dtype == "bfloat16" and gpu.compute is not None and gpu.compute < caps.bf16_min_compute:
        notes.append(f"{gpu.product} (compute {gpu.compute[0]}.{gpu.compute[1]}) lacks bfloat16: serving in float16")
        dtype = "float16"
    return dtype, notes


def model_bytes(model: ResolvedModel, dtype: str) -> float:
    if model.quantization != "none":
        return model.parameters * QUANT_BYTES[model.quantization]
    return model.parameters * DTYPE_BYTES[dtype]


def kv_per_token(engine: str, model: ResolvedModel, dtype: str, requested: str) -> float:
    caps = card(engine)
    kv_dtype = requested if requested != "auto" and requested in caps.kv_dtypes else "auto"
    if kv_dtype == "auto":
        kv_dtype = "float32" if dtype == "float32" else "float16"
    return kv_bytes_per_token(model.layers, model.kv_heads, model.head_dim, KV_DTYPE_BYTES[kv_dtype])


def _estimate(engine: str, placement: Placement, model: ResolvedModel, weights: float) -> tuple[float, float]:
    """Estimated TTFT (ms) and aggregate tokens/s, scaled from the engine's 7B reference profile."""
    profile = card(engine).profiles["gpu" if placement.gpu is not None else "cpu"]
    # compute and weight bytes read per token follow the rated (MoE: active) parameters; memory holds all weights
    rated = model.rated_parameters
    size = rated / 7e9
    bytes_ratio = (7e9 * profile.bytes_per_param) / max(weights * rated / model.parameters, 1.0)
    if placement.gpu is not None:
        tp = placement.gpus_per_replica
        speed = placement.gpu.speed * tp * _TP_EFFICIENCY ** math.log2(tp)
    else:
        speed = max(placement.hardware.cpu_millis / 1000, 1) / profile.reference_cores
    return profile.ttft_ms * size / speed, profile.tokens_per_second * speed * bytes_ratio


def _option(engine: str, spec: InferenceBackendSpec, model: ResolvedModel, placement: Placement,
            fit: Fit, kv_token: float, dtype: str, speculate: bool) -> Option:  # fmt: skip
    ttft, tps = _estimate(engine, placement, model, fit.weights)
    seqs = int(fit.kv_cache // max(kv_token * model.context_length, 1.0))
    misses: list[str] = []
    obj = spec.objectives
    if obj.ttft_millis is not None and ttft > obj.ttft_millis:
        misses.append(f"estimated TTFT {ttft:.0f} ms > ttftMillis {obj.ttft_millis}")
    if obj.tokens_per_second is not None and tps < obj.tokens_per_second:
        misses.append(f"estimated {tps:.0f} tokens/s < tokensPerSecond {obj.tokens_per_second}")
    if obj.concurrency is not None and seqs < obj.concurrency:
        misses.append(f"KV cache holds {seqs} full-context sequences < concurrency {obj.concurrency}")
    return Option(engine, placement, fit, kv_token, dtype, speculate, ttft, tps, seqs, tuple(misses))


def _first_fit(fit: Callable[[float], Fit], weights: float, draft: float | None) -> tuple[bool | None, Fit]:
    """Fit with the draft's weights when there is a draft, else (or if that fails) without it.

    Returns (speculate, fit) when one fits, else (None, the fit of the target alone).
    """
    if draft is not None:
        with_draft = fit(weights + draft)
        if with_draft.fits:
            return True, with_draft
    alone = fit(weights)
    return (False, alone) if alone.fits else (None, alone)


def _nearer(closest: tuple[float, str] | None, fit: Fit, where: str, fraction: float) -> tuple[float, str]:
    """The nearer of two misses, as (shortfall, message)."""
    short = fit.required - fit.available
    if closest is not None and closest[0] <= short:
        return closest
    return short, f"needs {gib(fit.required)} GiB{where} {gib(fit.available)} GiB at memoryFraction {fraction}"


def engine_options(
    engine: str,
    spec: InferenceBackendSpec,
    model: ResolvedModel,
    draft: ResolvedModel | None,
    gpu_classes: list[UsableClass],
    cpu_classes: list[UsableClass],
) -> tuple[list[Option], str]:
    """Every placement of ``engine`` that fits, and why none does when the list is empty."""
    caps = card(engine)
    fraction = spec.kv_cache.memory_fraction
    options: list[Option] = []
    closest: tuple[float, str] | None = None  # (shortfall, message) of the nearest miss
    for usable in gpu_classes if "gpu" in caps.accelerators else []:
        for gpu in usable.hardware.gpus:
            if gpu.count <= 0:
                continue
            if gpu.vendor not in caps.devices:
                msg = (f"{gpu.product} ({gpu.resource}): {caps.title} {caps.version} has no "
                       f"{VENDOR_TITLES.get(gpu.vendor, gpu.vendor)} build")  # fmt: skip
                closest = closest or (math.inf, msg)
                continue
            if gpu.compute is not None and gpu.compute < caps.min_compute:
                msg = (f"{gpu.product} has compute {gpu.compute[0]}.{gpu.compute[1]}, {engine} needs "
                       f"{caps.min_compute[0]}.{caps.min_compute[1]}+")  # fmt: skip
                closest = closest or (math.inf, msg)
                continue
            dtype, _ = serving_dtype(engine, model, gpu)
            weights = model_bytes(model, dtype)
            kv_token = kv_per_token(engine, model, dtype, spec.kv_cache.dtype)
            min_kv = kv_token * model.context_length
            widths = tensor_parallel_options(gpu.count, gpu.mig) if caps.multi_gpu else [1]
            for tp in widths:
                placement = Placement("gpu", usable.hardware, usable.nodes, gpu, tp)
                draft_bytes = model_bytes(draft, dtype) if draft is not None else None
                fit_gpu = partial(
                    gpu_fit, min_kv=min_kv, memory_per_gpu=gpu.memory_mib * MIB, fraction=fraction, gpus=tp
                )
                found, fit = _first_fit(fit_gpu, weights, draft_bytes)
                if found is not None:
                    options.append(_option(engine, spec, model, placement, fit, kv_token, dtype, found))
                else:
                    closest = _nearer(closest, fit, f" per replica; {tp}x {gpu.product} offers", fraction)
    if "cpu" in caps.accelerators:
        for usable in cpu_classes:
            hw = usable.hardware
            dtype = model.dtype
            weights = model_bytes(model, dtype)
            kv_token = kv_per_token(engine, model, dtype, spec.kv_cache.dtype)
            placement = Placement("cpu", hw, usable.nodes)
            draft_bytes = model_bytes(draft, draft.dtype) if draft is not None else None
            fit_cpu = partial(
                cpu_fit, min_kv=kv_token * model.context_length, node_memory=hw.memory_bytes, fraction=fraction
            )
            found, fit = _first_fit(fit_cpu, weights, draft_bytes)
            if found is not None:
                options.append(_option(engine, spec, model, placement, fit, kv_token, dtype, found))
            else:
                closest = _nearer(closest, fit, "; the CPU node offers", fraction)
    if options:
        return options, ""
    if closest is not None:
        return [], f"does not fit: {closest[1]}"
    if caps.gpu_required:
        return [], "needs a GPU; no usable GPU node"
    return [], "no usable node"
