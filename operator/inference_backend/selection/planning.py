"""Capacity planning as practitioners do it: KV for the expected tokens, replicas for load, host requests that fit.

Rules (docs/selection.md, "Planning rules", has the worked numbers):
- a typical request holds promptTokens + outputTokens of KV (defaults 512 + 256; at most the context length),
  rounded up to whole KV blocks; engines with paged KV allocate on demand, so one replica holds
  ``KV cache // (KV bytes per token x tokens per sequence)`` of them. One full-context sequence must still fit
  (the engines refuse to start otherwise), so the memory fit keeps that term;
- load objectives (concurrency, tokensPerSecond) are met by replicas: ``replicas = max(spec.replicas,
  ceil(objective x spec.replicas / what one replica holds))``; latency (ttftMillis) is per replica. Among the
  placements that fit and meet the per-replica objectives the fewest GPUs in total wins, then the fewest GPUs
  per replica: a wider replica is chosen only when it needs fewer GPUs overall;
- engines with fixed slots (llama.cpp ``-np``) allocate a full context per slot up front: the fit counts every
  slot, and slots are reduced (down to one) to what fits, with a reason;
- host CPU and memory requests fit the node's allocatable: 4 cores and (weights / GPUs + 8 GiB) per GPU are
  wanted, scaled down to 90% of the allocatable (daemonsets take the rest) and refused below one core per GPU
  and 4 GiB (+ KV offload).
Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Host
from inference_backend.facts import HardwareClass
from inference_backend.quantity import GIB, gib

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


def replicas_needed(spec: InferenceBackendSpec, sequences: int, tokens_per_second: float) -> tuple[int, list[str]]:
    """Replicas the load objectives need when one replica holds ``sequences`` requests and serves
    ``tokens_per_second``; with the arithmetic of each objective that needs more than spec.replicas."""
    base = max(spec.replicas, 1)
    o = spec.objectives
    need = base
    why: list[str] = []
    if o.concurrency is not None:
        n = math.ceil(o.concurrency * base / max(sequences, 1))
        if n > base:
            why.append(f"concurrency {o.concurrency} x {base} replica(s) / {sequences} requests per replica = {n}")
        need = max(need, n)
    if o.tokens_per_second is not None:
        n = math.ceil(o.tokens_per_second * base / max(tokens_per_second, 1.0))
        if n > base:
            why.append(f"tokensPerSecond {o.tokens_per_second} x {base} replica(s) / {tokens_per_second:.0f} "
                       f"per replica = {n}")  # fmt: skip
        need = max(need, n)
    return need, why


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
        note = (f"host request scaled down to fit the {product} nodes' allocatable ({hw.cpu_millis / 1000:g} CPUs, "
                f"{gib(hw.memory_bytes)} GiB; {ALLOCATABLE_SHARE:.0%} of it): " + ", ".join(notes))  # fmt: skip
    return HostPlan(Host(cpu, mem), note)


def cpu_host(hw: HardwareClass, need: float, required: float) -> HostPlan:
    """Host request of a CPU replica whose engine allocates ``need`` bytes (weights + overhead + KV), at most the
    node's allocatable; refused when even ``required`` (one full-context sequence) plus headroom is more."""
    node = hw.memory_bytes // GIB * GIB
    floor = (math.ceil(required / GIB) + CPU_HEADROOM_GIB) * GIB
    if floor > node:
        return HostPlan(None, f"needs {gib(floor)} GiB of memory with {CPU_HEADROOM_GIB} GiB headroom; the node "
                              f"allocates {gib(hw.memory_bytes)} GiB")  # fmt: skip
    mem = min((math.ceil(need / GIB) + CPU_HEADROOM_GIB) * GIB, node)
    cpu = max(1000, int(hw.cpu_millis * ALLOCATABLE_SHARE) // 1000 * 1000)
    return HostPlan(Host(cpu, mem), "")
