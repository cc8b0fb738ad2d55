"""Capacity planning as practitioners do it: KV for the expected tokens, replicas for load, host requests that fit.

Rules (docs/selection.md, "Planning rules", has the worked numbers):
- a typical request holds promptTokens + outputTokens of KV (defaults 512 + 256; at most the context length),
  rounded up to whole KV blocks; engines with paged KV allocate on demand, so one replica holds
  ``KV cache // (KV bytes per token x tokens per sequence)`` of them. One full-context sequence must still fit
  (the engines refuse to start otherwise), so the memory fit keeps that term;
- the load (objectives.concurrency or requestsPerSecond) is the whole service's and splits over the replicas;
  ``replicas = max(spec.replicas, ceil(concurrency / what one replica's KV cache holds))``, then more while the
  workload model (selection/workload.py) says an objective (TTFT p95, TPOT, tokensPerSecond, a rate above
  capacity) is missed at the per-replica load (``plan_load``). Among the placements that fit and meet every
  objective the fewest GPUs in total wins, then the cheapest where prices are known, then the fewest GPUs per
  replica: a wider replica is chosen only when it needs fewer GPUs overall;
- engines with fixed slots (llama.cpp ``-np``) allocate a full context per slot up front: the fit counts every
  slot, and slots are reduced (down to one) to what fits, with a reason;
- host CPU and memory requests fit the node's allocatable: 4 cores and (weights / GPUs + 8 GiB) per GPU are
  wanted, scaled down to 90% of the allocatable (daemonsets take the rest) and refused below one core per GPU
  and 4 GiB (+ KV offload).
Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Host
from inference_backend.facts import HardwareClass
from inference_backend.quantity import GIB, gib
from inference_backend.selection.estimate import Estimate
from inference_backend.selection.workload import Workload

DEFAULT_PROMPT_TOKENS = 512
DEFAULT_OUTPUT_TOKENS = 256
CPUS_PER_GPU = 4
HOST_HEADROOM_GIB = 8
"""Host memory per GPU replica beyond its share of the weights: the engine process, tokenizer, CUDA host state."""
MIN_HOST_MEMORY_GIB = 4
ALLOCATABLE_SHARE = 0.9
"""The share of a node's allocatable CPU and memory one pod may request (daemonsets and the kubelet take the
rest)."""
CPU_HEADROOM_GIB = 1


def tokens_per_sequence(spec: InferenceBackendSpec, context: int) -> tuple[int, str]:
    """KV tokens of one typical request, rounded up to whole KV blocks, and how they were found."""
    o = spec.objectives
    prompt = o.prompt_tokens or DEFAULT_PROMPT_TOKENS
    output = o.output_tokens or DEFAULT_OUTPUT_TOKENS
    defaults = [n for n, v in (("promptTokens", o.prompt_tokens), ("outputTokens", o.output_tokens)) if v is None]
    block = spec.kv_cache.block_size
    tokens = min(context, math.ceil((prompt + output) / block) * block)
    how = f"promptTokens {prompt} + outputTokens {output}"
    if defaults:
        how += ", both defaults" if len(defaults) == 2 else f", {defaults[0]} by default"
    if tokens < prompt + output:
        how += f", capped to the context {context}"
    return tokens, how


def workload(spec: InferenceBackendSpec) -> tuple[int, int]:
    """(prompt, output) tokens of a typical request (the defaults where unset)."""
    o = spec.objectives
    return o.prompt_tokens or DEFAULT_PROMPT_TOKENS, o.output_tokens or DEFAULT_OUTPUT_TOKENS


@dataclass(frozen=True)
class LoadPlan:
    """Replicas that meet the objectives at the service's load, and the estimate of one replica there."""

    replicas: int
    estimate: Estimate
    misses: tuple[str, ...]
    """Objectives the estimate misses at ``replicas`` (the binding one first), each with by how much."""
    why: tuple[str, ...]
    """The arithmetic of each objective that needs more than spec.replicas."""
    load: str
    """The load one replica sees, for the reasons ("concurrency 16 per replica")."""


MAX_REPLICAS = 4096


def plan_load(spec: InferenceBackendSpec, held: float, evaluate: Callable[[Workload], Estimate]) -> LoadPlan:
    """The fewest replicas (at least spec.replicas) whose per-replica load meets every objective.

    The load (objectives.concurrency, else requestsPerSecond; else what tokensPerSecond needs, else one request
    per replica) is the whole service's and splits evenly over the replicas. Requests beyond what one replica's KV
    cache holds (``held``) would queue, so a concurrency needs at least ``concurrency / held`` replicas. Then
    replicas are added while an objective is missed (TTFT p95, TPOT, tokens/s, a rate above capacity), by doubling
    and bisection (every estimate improves as the per-replica load falls). When no count meets them, the plan keeps
    the replicas the load needs and names the objective that binds and by how much."""
    o = spec.objectives
    base = max(spec.replicas, 1)
    why: list[str] = []
    need = base
    if o.concurrency is not None:
        n = math.ceil(o.concurrency / max(held, 1))
        if n > base:
            why.append(
                f"concurrency {o.concurrency} / {held:g} requests per replica (what its KV cache holds at "
                f"this length) = {n}"
            )
        need = max(need, n)

    def at(r: int) -> tuple[Estimate, list[str], str]:
        return _evaluate(spec, r, held, evaluate)

    est, misses, load = at(need)
    if not misses:
        return LoadPlan(need, est, (), tuple(why), load)
    lo, hi = need, need
    while hi < MAX_REPLICAS:
        hi = min(hi * 2, MAX_REPLICAS)
        _, m2, _ = at(hi)
        if not m2:
            break
        lo = hi
    else:
        return LoadPlan(need, est, tuple(misses), tuple(why), load)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid)[1]:
            lo = mid
        else:
            hi = mid
    est2, _, load2 = at(hi)
    why.append(f"{misses[0]} on {need} replica(s); {hi} replicas meet every objective ({load2})")
    return LoadPlan(hi, est2, (), tuple(why), load2)


def _evaluate(
    spec: InferenceBackendSpec, replicas: int, held: float, evaluate: Callable[[Workload], Estimate]
) -> tuple[Estimate, list[str], str]:
    o = spec.objectives
    prompt, output = workload(spec)
    if o.concurrency is not None:
        w = Workload(prompt, output, concurrency=o.concurrency / replicas)
        load = f"concurrency {o.concurrency / replicas:.3g} per replica"
    elif o.requests_per_second is not None:
        w = Workload(prompt, output, rate=o.requests_per_second / replicas)
        load = f"{o.requests_per_second / replicas:.3g} requests/s per replica"
    elif o.tokens_per_second is not None:
        w, load = _for_throughput(o.tokens_per_second / replicas, prompt, output, held, evaluate)
    else:
        w, load = Workload(prompt, output, concurrency=1), "one request at a time"
    est = evaluate(w)
    return est, _misses(spec, replicas, est, load), load


def _for_throughput(
    target: float, prompt: int, output: int, held: float, evaluate: Callable[[Workload], Estimate]
) -> tuple[Workload, str]:
    """The lowest concurrency (at most ``held``) at which one replica makes ``target`` output tokens/s.

    Throughput need not grow up to ``held``: past some concurrency the waits for a place in the batch and the longer
    steps over more KV cost more than the extra sequences give, so the replica's most is the peak of a sweep (36
    concurrencies spaced evenly in log from 1 to ``held``), and the search stays below it."""
    lo, hi = 1.0, max(held, 1.0)
    sweep = [hi ** (i / 35) for i in range(36)]
    hi = max(sweep, key=lambda c: evaluate(Workload(prompt, output, concurrency=c)).tokens_per_second)
    if evaluate(Workload(prompt, output, concurrency=hi)).tokens_per_second < target:
        return Workload(prompt, output, concurrency=hi), f"concurrency {hi:.3g} per replica (its most)"
    for _ in range(30):
        mid = (lo + hi) / 2
        if evaluate(Workload(prompt, output, concurrency=mid)).tokens_per_second < target:
            lo = mid
        else:
            hi = mid
    return Workload(prompt, output, concurrency=hi), f"concurrency {hi:.3g} per replica (what the throughput needs)"


def _misses(spec: InferenceBackendSpec, replicas: int, est: Estimate, load: str) -> list[str]:
    """Each objective the estimate misses, worst (relative) first."""
    o = spec.objectives
    out: list[tuple[float, str]] = []
    if o.requests_per_second is not None and est.saturated and o.concurrency is None:
        out.append(
            (
                math.inf,
                f"requestsPerSecond {o.requests_per_second:g} > what {replicas} replica(s) sustain "
                f"({replicas * est.tokens_per_second / max(workload(spec)[1], 1):.3g} requests/s)",
            )
        )
    if o.ttft_millis is not None and est.ttft_p95_ms > o.ttft_millis:
        out.append(
            (est.ttft_p95_ms / o.ttft_millis, f"TTFT p95 {_ms(est.ttft_p95_ms)} > ttftMillis {o.ttft_millis} at {load}")
        )
    if o.tpot_millis is not None and est.tpot_ms > o.tpot_millis:
        out.append((est.tpot_ms / o.tpot_millis, f"TPOT {_ms(est.tpot_ms)} > tpotMillis {o.tpot_millis} at {load}"))
    total = replicas * est.tokens_per_second
    if o.tokens_per_second is not None and total < o.tokens_per_second:
        out.append(
            (
                o.tokens_per_second / max(total, 1e-9),
                f"{total:.0f} tokens/s < tokensPerSecond {o.tokens_per_second} ({replicas} replica(s) at {load})",
            )
        )
    out.sort(key=lambda m: -m[0])
    return [f"{m} ({_over(r)})" if math.isfinite(r) else m for r, m in out]


def _ms(v: float) -> str:
    return "unbounded (queue grows)" if not math.isfinite(v) else f"{v:.0f} ms" if v >= 10 else f"{v:.1f} ms"


def _over(ratio: float) -> str:
    return f"{(ratio - 1) * 100:.0f}% over" if ratio < 2 else f"{ratio:.1f}x"


@dataclass(frozen=True)
class HostPlan:
    host: Host | None
    """None: the node cannot hold even the minimum."""
    note: str
    """Why the request is what it is (empty when it is what is wanted)."""


def _cap_cpu(hw: HardwareClass) -> int:
    return int(hw.cpu_millis * ALLOCATABLE_SHARE) // 100 * 100


def _cap_memory(hw: HardwareClass) -> int:
    return int(hw.memory_bytes * ALLOCATABLE_SHARE) // GIB * GIB


def gpu_host(hw: HardwareClass, gpus: int, weights: float, offload_gib: float, product: str) -> HostPlan:
    """Host CPU and memory of a GPU replica on a node of class ``hw``."""
    want_cpu = CPUS_PER_GPU * 1000 * gpus
    want_mem = (math.ceil(weights / GIB / max(gpus, 1)) + HOST_HEADROOM_GIB + math.ceil(offload_gib)) * GIB
    min_cpu = 1000 * gpus
    min_mem = (MIN_HOST_MEMORY_GIB + math.ceil(offload_gib)) * GIB
    cap_cpu, cap_mem = _cap_cpu(hw), _cap_memory(hw)
    if cap_cpu < min_cpu or cap_mem < min_mem:
        return HostPlan(
            None,
            (
                f"the {product} nodes allocate {hw.cpu_millis / 1000:g} CPUs and "
                f"{gib(hw.memory_bytes)} GiB: {ALLOCATABLE_SHARE:.0%} of that is below the "
                f"{min_cpu / 1000:g} CPU(s) and {gib(min_mem)} GiB one {gpus}-GPU replica needs"
            ),
        )
    cpu, mem = min(want_cpu, cap_cpu), min(want_mem, cap_mem)
    notes = []
    if cpu < want_cpu:
        notes.append(f"{cpu / 1000:g} CPUs instead of {want_cpu / 1000:g} ({CPUS_PER_GPU} per GPU)")
    if mem < want_mem:
        notes.append(
            f"{gib(mem)} GiB host memory instead of {gib(want_mem)} GiB (weights share + "
            f"{HOST_HEADROOM_GIB} GiB; the weights stream through the page cache, which the kernel reclaims)"
        )
    note = ""
    if notes:
        note = (
            f"host request scaled down to fit the {product} nodes' allocatable ({hw.cpu_millis / 1000:g} CPUs, "
            f"{gib(hw.memory_bytes)} GiB; {ALLOCATABLE_SHARE:.0%} of it): " + ", ".join(notes)
        )
    return HostPlan(Host(cpu, mem), note)


def cpu_host(hw: HardwareClass, need: float, required: float) -> HostPlan:
    """Host request of a CPU replica whose engine allocates ``need`` bytes (weights + overhead + KV), at most the
    node's allocatable; refused when even ``required`` (one full-context sequence) plus headroom is more."""
    node = hw.memory_bytes // GIB * GIB
    floor = (math.ceil(required / GIB) + CPU_HEADROOM_GIB) * GIB
    if floor > node:
        return HostPlan(
            None,
            f"needs {gib(floor)} GiB of memory with {CPU_HEADROOM_GIB} GiB headroom; the node "
            f"allocates {gib(hw.memory_bytes)} GiB",
        )
    mem = min((math.ceil(need / GIB) + CPU_HEADROOM_GIB) * GIB, node)
    cpu = max(1000, int(hw.cpu_millis * ALLOCATABLE_SHARE) // 1000 * 1000)
    return HostPlan(Host(cpu, mem), "")
