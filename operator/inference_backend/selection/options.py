"""Placement options of one engine: every (hardware, GPUs per replica) that fits, with estimates, the plan and
misses. The planning rules are selection/planning.py's."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Host, Placement, Plan, ResolvedModel
from inference_backend.engines import card
from inference_backend.engines.card import Accelerator
from inference_backend.facts import VENDOR_TITLES, GPUFacts, Pool, pool_of, product_matches
from inference_backend.memory import (
    DTYPE_BYTES,
    KV_DTYPE_BYTES,
    QUANT_BYTES,
    Fit,
    cpu_fit,
    gpu_fit,
    kv_bytes_per_token,
    kv_heads_per_replica,
    tensor_parallel_options,
)
from inference_backend.quantity import gib
from inference_backend.selection.estimate import Estimate, Replica, estimate
from inference_backend.selection.hardware import UsableClass
from inference_backend.selection.perf_data import PRICE_PER_GPU_HOUR
from inference_backend.selection.planning import cpu_host, gpu_host, plan_load, tokens_per_sequence, workload

MIB = 2**20


@dataclass(frozen=True)
class Option:
    engine: str
    placement: Placement
    fit: Fit
    kv_per_token: float
    serving_dtype: str
    speculate: bool
    estimate: Estimate
    """One replica at the per-replica share of the service's load (selection/estimate.py)."""
    kv_sequences: int
    """Full-context sequences the KV cache holds."""
    plan: Plan
    host: Host
    misses: tuple[str, ...] = ()
    load: tuple[str, ...] = field(default=(), compare=False)
    """The arithmetic of each objective that needs more replicas than spec.replicas."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """Planning notes for the reasons (replicas needed, host request scaled down, slots reduced)."""
    load_how: str = field(default="", compare=False)
    """The load one replica sees ("concurrency 16 per replica")."""

    @property
    def ttft_ms(self) -> float:
        return self.estimate.ttft_ms

    @property
    def tokens_per_second(self) -> float:
        return self.estimate.tokens_per_second

    @property
    def estimate_how(self) -> str:
        return self.estimate.how

    @property
    def price(self) -> float:
        """Price per hour of all its GPUs where the SKU's price per GPU-hour is known, else infinity."""
        gpu = self.placement.gpu
        known = PRICE_PER_GPU_HOUR.get(gpu.sku) if gpu is not None else None
        return self.total_gpus * known[0] if known else math.inf

    @property
    def total_gpus(self) -> int:
        return self.placement.gpus_per_replica * self.plan.replicas

    def sort_key(self, preferences: list[str], busy: frozenset[tuple[Pool, int]] = frozenset()) -> tuple[object, ...]:
        """``busy``: (GPU pool, GPUs per replica) without enough free devices for this spec's replicas."""
        p = self.placement
        if p.gpu is None:
            return (
                0,
                len(self.misses),
                not self.speculate,
                self.plan.replicas,
                -p.hardware.cpu_millis,
                -p.hardware.memory_bytes,
                p.hardware,
            )
        gpu = p.gpu
        pref = next((i for i, name in enumerate(preferences) if product_matches(name, gpu)), len(preferences))
        full = (pool_of(p.gpu), p.gpus_per_replica) in busy
        return (
            pref,
            len(self.misses),
            full,
            not p.gpu.labelled,
            not self.speculate,
            self.total_gpus,
            self.price,
            p.gpus_per_replica,
            p.gpu.memory_mib,
            -p.gpu.speed,
            p.gpu.product,
            p.hardware,
        )


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


def kv_per_token(engine: str, model: ResolvedModel, dtype: str, requested: str, tp: int = 1) -> float:
    """KV bytes per token of one replica: tp > KV heads replicates one head per GPU, and a multi-head latent
    attention model's latent is held whole by every TP rank (see kv_heads_per_replica); an engine that splits
    the replica by layers keeps one copy."""
    caps = card(engine)
    kv_dtype = requested if requested != "auto" and requested in caps.kv_dtypes else "auto"
    if kv_dtype == "auto":
        kv_dtype = "float32" if dtype == "float32" else "float16"
    latent = model.kv_latent
    one = 1 if latent else model.kv_heads
    heads = one if caps.layer_split else kv_heads_per_replica(model.kv_heads, tp, latent)
    return kv_bytes_per_token(model.layers, heads, model.head_dim, KV_DTYPE_BYTES[kv_dtype], latent)


@dataclass(frozen=True)
class _Sizing:
    """What one engine's placement needs, shared by the fit and the plan."""

    weights: float
    kv_token: float
    dtype: str
    tokens: int
    tokens_how: str
    slots: int


def _option(
    engine: str,
    spec: InferenceBackendSpec,
    model: ResolvedModel,
    placement: Placement,
    fit: Fit,
    sz: _Sizing,
    speculate: bool,
    host: Host,
    notes: list[str],
) -> Option:
    accelerator: Accelerator = "gpu" if placement.gpu is not None else "cpu"
    full = int(fit.kv_cache // max(sz.kv_token * model.context_length, 1.0))
    # slot engines: every slot holds a full context, and requests beyond the slots queue
    sequences = sz.slots or int(fit.kv_cache // max(sz.kv_token * sz.tokens, 1.0))
    # in steady state a request holds its prompt and half its output on average (KV pages are allocated as it
    # decodes): what the engine keeps running at once; the plan sizes replicas by the full length (``sequences``)
    prompt, output = workload(spec)
    running = sz.slots or int(fit.kv_cache // max(sz.kv_token * (prompt + output / 2), 1.0))
    replica = Replica(
        engine,
        card(engine).profiles[accelerator],
        fit.weights,
        sz.kv_token,
        sz.dtype,
        max(running, sequences),
        sz.slots,
    )
    lp = plan_load(spec, sequences, lambda w: estimate(replica, placement, model, w))
    plan = Plan(sz.tokens, sequences, lp.replicas, sz.slots)
    out_notes = list(notes)
    if lp.why:
        out_notes.append(
            f"the objectives need {lp.replicas} replicas of {placement.describe()} ({'; '.join(lp.why)})"
            f": more replicas rather than wider ones; spec.replicas is {spec.replicas}, set it to "
            f"{lp.replicas} to meet them"
        )
    return Option(
        engine,
        placement,
        fit,
        sz.kv_token,
        sz.dtype,
        speculate,
        lp.estimate,
        full,
        plan,
        host,
        lp.misses,
        lp.why,
        tuple(out_notes),
        lp.load,
    )


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


@dataclass(frozen=True)
class _Miss:
    """Why one placement does not fit: ``short`` is its memory shortfall (the nearest miss is reported), None when
    more memory would not help (no build for the GPU, no host resources)."""

    message: str
    short: float | None = None


def _memory_miss(fit: Fit, where: str, fraction: float) -> _Miss:
    short = fit.required - fit.available
    return _Miss(f"needs {gib(fit.required)} GiB{where} {gib(fit.available)} GiB at memoryFraction {fraction}", short)


def _nearer(closest: tuple[float, str] | None, miss: _Miss) -> tuple[float, str]:
    """The nearer of two misses, as (shortfall, message); a miss that more memory would not help (no shortfall)
    counts only when no miss came before it."""
    if miss.short is None:
        return closest or (math.inf, miss.message)
    if closest is not None and closest[0] <= miss.short:
        return closest
    return miss.short, miss.message


def _slots_wanted(spec: InferenceBackendSpec) -> int:
    from inference_backend.engines.llamacpp import DEFAULT_SLOTS

    return spec.batching.max_batch_size or spec.objectives.concurrency or DEFAULT_SLOTS


def _fit_slots(
    fit: Callable[..., Fit], weights: float, draft: float | None, wanted: int
) -> tuple[bool | None, Fit, int]:
    """Engines with fixed slots: the most slots (at most ``wanted``) whose full contexts fit, by halving."""
    slots = wanted
    while True:
        found, f = _first_fit(partial(fit, slots=slots), weights, draft)
        if found is not None or slots == 1:
            return found, f, slots
        # the largest slot count that fits: (available - weights - overhead) // one context
        one = fit(weights, slots=1)
        room = one.available - one.weights - one.overhead
        slots = max(1, min(slots - 1, int(room // max(one.min_kv, 1.0))))


def _sizing(engine: str, spec: InferenceBackendSpec, model: ResolvedModel, dtype: str, tp: int) -> _Sizing:
    caps = card(engine)
    tokens, how = tokens_per_sequence(spec, model.context_length)
    slots = _slots_wanted(spec) if caps.slots else 0
    return _Sizing(
        model_bytes(model, dtype),
        kv_per_token(engine, model, dtype, spec.kv_cache.dtype, tp),
        dtype,
        tokens,
        how,
        slots,
    )


def _fitted(fit: Callable[..., Fit], sz: _Sizing, draft: float | None) -> tuple[bool | None, Fit, int]:
    """(speculate, fit, slots) of the first fit: slot engines with the most slots that fit, the others with 0."""
    if sz.slots:
        return _fit_slots(fit, sz.weights, draft, sz.slots)
    found, f = _first_fit(fit, sz.weights, draft)
    return found, f, 0


def _slot_note(wanted: int, slots: int, context: int) -> list[str]:
    if slots >= wanted:
        return []
    return [
        f"slots reduced from {wanted} to {slots}: each slot allocates a full {context}-token context up front, "
        f"and only {slots} fit"
    ]


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
    found: list[Option | _Miss] = []
    for usable in gpu_classes if "gpu" in caps.accelerators else []:
        found += _gpu_options(engine, spec, model, draft, usable)
    if "cpu" in caps.accelerators:
        found += [_cpu_option(engine, spec, model, draft, usable) for usable in cpu_classes]
    options = [o for o in found if isinstance(o, Option)]
    closest: tuple[float, str] | None = None  # (shortfall, message) of the nearest miss
    for miss in found:
        if isinstance(miss, _Miss):
            closest = _nearer(closest, miss)
    if options:
        return options, ""
    if closest is not None:
        return [], f"does not fit: {closest[1]}"
    if caps.gpu_required:
        return [], "needs a GPU; no usable GPU node"
    return [], "no usable node"


def _gpu_options(
    engine: str, spec: InferenceBackendSpec, model: ResolvedModel, draft: ResolvedModel | None, usable: UsableClass
) -> list[Option | _Miss]:
    """Per GPU kind of the class the engine has a build for and runs on, a placement (or a miss) per tensor-parallel
    width."""
    caps = card(engine)
    out: list[Option | _Miss] = []
    for gpu in usable.hardware.gpus:
        if gpu.count <= 0:
            continue
        if gpu.vendor not in caps.devices:
            vendor = VENDOR_TITLES.get(gpu.vendor, gpu.vendor)
            out.append(_Miss(f"{gpu.product} ({gpu.resource}): {caps.title} {caps.version} has no {vendor} build"))
            continue
        if gpu.compute is not None and gpu.compute < caps.min_compute:
            out.append(
                _Miss(
                    f"{gpu.product} has compute {gpu.compute[0]}.{gpu.compute[1]}, {engine} needs "
                    f"{caps.min_compute[0]}.{caps.min_compute[1]}+"
                )
            )
            continue
        dtype, _ = serving_dtype(engine, model, gpu)
        if caps.multi_gpu:
            one = gpu.mig or gpu.shared  # no tensor parallel across MIG slices or shares of one card
            widths, _why = tensor_parallel_options(
                gpu.count, one, model.attention_heads, model.kv_heads, caps.layer_split
            )
        else:
            widths = [1]
        out += [_gpu_option(engine, spec, model, draft, usable, gpu, dtype, tp) for tp in widths]
    return out


def _gpu_option(
    engine: str,
    spec: InferenceBackendSpec,
    model: ResolvedModel,
    draft: ResolvedModel | None,
    usable: UsableClass,
    gpu: GPUFacts,
    dtype: str,
    tp: int,
) -> Option | _Miss:
    """One replica on ``tp`` GPUs of a kind: the draft beside the target when both fit, the slots that fit."""
    fraction = spec.kv_cache.memory_fraction
    sz = _sizing(engine, spec, model, dtype, tp)
    placement = Placement("gpu", usable.hardware, usable.nodes, gpu, tp)
    draft_bytes = model_bytes(draft, dtype) if draft is not None else None

    def fit_gpu(w: float, slots: int = 1) -> Fit:
        ctx = sz.kv_token * model.context_length * max(slots, 1)
        return gpu_fit(w, ctx, gpu.memory_mib * MIB, fraction, tp)

    found, fit, slots = _fitted(fit_gpu, sz, draft_bytes)
    if found is None:
        return _memory_miss(fit, f" per replica; {tp}x {gpu.product} offers", fraction)
    host = gpu_host(usable.hardware, tp, fit.weights, spec.kv_cache.cpu_offload_gi_b, gpu.product)
    if host.host is None:
        return _Miss(host.note)
    notes = _slot_note(sz.slots, slots, model.context_length) + ([host.note] if host.note else [])
    sized = _Sizing(sz.weights, sz.kv_token, dtype, sz.tokens, sz.tokens_how, slots)
    return _option(engine, spec, model, placement, fit, sized, found, host.host, notes)


def _cpu_option(
    engine: str, spec: InferenceBackendSpec, model: ResolvedModel, draft: ResolvedModel | None, usable: UsableClass
) -> Option | _Miss:
    """One replica on a CPU node class, in the model's dtype."""
    fraction = spec.kv_cache.memory_fraction
    hw = usable.hardware
    sz = _sizing(engine, spec, model, model.dtype, 1)
    placement = Placement("cpu", hw, usable.nodes)
    draft_bytes = model_bytes(draft, draft.dtype) if draft is not None else None

    def fit_cpu(w: float, slots: int = 1) -> Fit:
        ctx = sz.kv_token * model.context_length * max(slots, 1)
        return cpu_fit(w, ctx, hw.memory_bytes, fraction)

    found, fit, slots = _fitted(fit_cpu, sz, draft_bytes)
    if found is None:
        return _memory_miss(fit, "; the CPU node offers", fraction)
    # what the engine allocates: slot engines exactly their contexts, the others the whole KV budget
    need = fit.required if slots else fit.weights + fit.overhead + fit.kv_cache
    host = cpu_host(hw, need, fit.required)
    if host.host is None:
        return _Miss(host.note)
    sized = _Sizing(sz.weights, sz.kv_token, sz.dtype, sz.tokens, sz.tokens_how, slots)
    notes = _slot_note(sz.slots, slots, model.context_length)
    return _option(engine, spec, model, placement, fit, sized, found, host.host, notes)
