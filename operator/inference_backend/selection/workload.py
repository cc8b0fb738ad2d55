"""The workload model: what one replica of an engine delivers at a stated load (TTFT p50/p95, TPOT, tokens/s).

Pure arithmetic over a placement and a workload; data (efficiencies, tables) comes from selection/perf_data.py
and selection/perf_tables.py. docs/engine-profiles.md explains the model with its sources and measured error.

One engine step (a forward pass of the running batch) on ``n`` devices of bandwidth BW and dense rate F:

- memory: the weights it reads (all of a dense model; of an MoE the experts a batch of ``b`` tokens touches,
  ``1 - (1 - active/total)^b`` of them) over ``n x BW x decode``, plus the KV of every running sequence over
  ``n x BW x kv`` (the attention kernels' own share where an engine's is known to differ, else ``decode``);
- compute: 2 x active parameters per token plus attention (4 x layers x hidden x context per decoded token; a
  prompt of ``p`` tokens ``2 x layers x hidden x p^2``, causal), over ``n x F x prefill``;
- a step takes the larger of the two (the roofline: decode is memory-bound at small batch, compute-bound at
  large), plus tensor-parallel communication (two all-reduces per layer of tokens x hidden x 2 bytes, ring
  ``2(n-1)/n`` over the device link, plus a latency each) and the engine's fixed and per-sequence overheads;
- with data-parallel attention (``Device.attention_dp`` groups) the busiest group's attention: the attention
  weights whole on each group, and its own requests' KV reads and attention FLOPs only.

Under a load of ``c`` concurrent requests (prompt P, output O tokens) with continuous batching, up to the engine's
batch cap ``B`` (its default max sequences, its slots, or what the KV cache holds) run together; each step carries
the ``b`` decoding sequences and on average ``b x P / O`` prompt tokens of the requests joining (chunked prefill
mixes them in). TPOT is that step's time; TTFT is half a step (arrival within a step) plus the step that carries
the request's own prompt plus the wait for the prompts ahead of it, an M/D/1 queue of prefill work at utilisation
``rho = lambda x prefill time``: mean wait ``rho x t / (2(1 - rho))``; p95 from the exponential tail of the wait
``P(W > t) = rho x exp(-t rho / W)`` and a full step instead of half. Beyond ``B`` requests queue: a closed loop of
``c`` users is served at the saturated rate X, so a request takes ``c / X`` (Little's law) and waits the rest.
A load given as requests per second is turned into the concurrency it produces (Little's law, solved by
bisection); a rate above what ``B`` sequences sustain is saturated: the replica cannot keep up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from inference_backend.engines.card import Efficiency

P95_TAIL = math.log(20)
"""ln(1 / 0.05): the 95th percentile of an exponential tail, in means."""


@dataclass(frozen=True)
class Shape:
    """The model as the arithmetic needs it."""

    parameters: float
    active: float
    """Parameters one token runs through (an MoE's active ones)."""
    layers: int
    hidden: int
    """Query width (attention heads x head dim): sizes attention FLOPs and the all-reduce."""
    weight_bytes: float
    """All weights of one replica."""
    kv_bytes_token: float
    """KV bytes per token of one replica (all its devices)."""
    attention_params: float = 0.0
    """Parameters of the attention projections (a part of ``active``): under data-parallel attention each device
    group holds them whole (``Device.attention_dp``)."""


@dataclass(frozen=True)
class Device:
    """The replica's devices: ``n`` accelerators (or one CPU socket of ``n`` cores rated as one)."""

    n: int
    bandwidth: float
    """Bytes/s per device."""
    flops: float
    """Dense FLOP/s per device in the compute dtype."""
    link: float = 0.0
    """Bytes/s per device to the others, one direction (0: n = 1)."""
    link_latency_s: float = 10e-6
    how: str = ""
    stages: int = 1
    """Devices a token passes through in sequence (layers split over them, ``n`` = 1): a prompt's micro-batches of
    ``micro_batch`` tokens are pipelined through them, so ``m`` micro-batches take ``(m + stages - 1) / (m x
    stages)`` of one device's time."""
    micro_batch: int = 0
    attention_dp: int = 1
    """Groups of the ``n`` devices that run attention data-parallel (SGLang ``--enable-dp-attention``; 1: the
    attention is tensor-parallel over all ``n``, as the rest). Each group holds the attention weights whole and
    runs the attention of its own requests only (their KV cache, their projections and attention FLOPs); the rest of
    the layer (an MoE's experts, the dense MLP) stays split over all ``n``, its tokens gathered before it and
    scattered after (an all-gather and a reduce-scatter: the volume of the all-reduce they replace). A step lasts
    as long as its busiest group's."""


@dataclass(frozen=True)
class Workload:
    prompt: int
    output: int
    concurrency: float | None = None
    """Concurrent requests on this replica (a closed loop: each user sends again when answered)."""
    rate: float | None = None
    """Requests per second arriving at this replica (open loop); used when concurrency is None."""
    burst: bool = False
    """``concurrency`` requests sent together, once (an offline batch, a benchmark at request rate inf), not a
    closed loop of that many users: the run is simulated step by step (``burst``)."""


@dataclass(frozen=True)
class Prediction:
    ttft_ms: float
    ttft_p95_ms: float
    tpot_ms: float
    tokens_per_second: float
    """Output tokens/s of the replica, all streams together."""
    concurrency: float
    """Requests in the replica at this load (running + queued)."""
    running: float
    """Requests decoding together (at most the batch cap)."""
    saturated: bool
    """The load exceeds what the replica sustains (a rate above its capacity, or requests queue beyond its batch)."""
    source: str
    queued_ms: float = 0.0
    """Of ttft_ms, the wait for a place in the batch (a closed loop beyond the batch cap)."""


def weights_read(shape: Shape, tokens: float) -> float:
    """Weight bytes one step over ``tokens`` tokens reads: all of a dense model, the touched experts of an MoE."""
    share = shape.active / shape.parameters if shape.parameters else 1.0
    if share >= 0.999 or tokens <= 0:
        return shape.weight_bytes * (share if tokens <= 0 else 1.0)
    return shape.weight_bytes * (1.0 - math.pow(1.0 - share, max(tokens, 1.0)))


def comm_s(shape: Shape, dev: Device, tokens: float) -> float:
    """Two ring all-reduces per layer of ``tokens x hidden`` 16-bit values across the replica's devices."""
    if dev.n <= 1 or dev.link <= 0:
        return 0.0
    size = tokens * shape.hidden * 2
    return 2 * shape.layers * (dev.link_latency_s + 2 * (dev.n - 1) / dev.n * size / dev.link)


def step_s(
    shape: Shape, dev: Device, eff: Efficiency, decoding: float, prefill: float, context: float, prompt: float
) -> float:
    """One engine step: ``decoding`` sequences at mean ``context`` plus ``prefill`` prompt tokens of ``prompt``."""
    tokens = decoding + prefill
    drawn = dev.bandwidth * eff.decode
    if eff.bandwidth_gbs:
        drawn = min(drawn, eff.bandwidth_gbs * 1e9)
    kv_drawn = dev.bandwidth * eff.kv if eff.kv else drawn
    # data-parallel attention: the busiest group's share of the attention work against the even split of TP
    # (fewer requests in the step than groups: one request's whole attention on one group)
    spread = dev.attention_dp / min(dev.attention_dp, max(decoding + prefill / max(prompt, 1), 1.0))
    kv_read = decoding * context * shape.kv_bytes_token * spread
    attn_bytes = shape.attention_params * shape.weight_bytes / max(shape.parameters, 1.0) * (dev.attention_dp - 1)
    mem = (weights_read(shape, tokens) + attn_bytes) / (dev.n * drawn) + kv_read / (dev.n * kv_drawn)
    attn = 4 * shape.layers * shape.hidden * context * decoding
    if prefill > 0:
        attn += 2 * shape.layers * shape.hidden * prompt * prefill  # prefill tokens each attend ~prompt/2 back
    projections = 2 * min(shape.attention_params, shape.active) * tokens if dev.attention_dp > 1 else 0.0
    rate = dev.n * dev.flops * eff.prefill * (eff.moe if shape.active < 0.9 * shape.parameters else 1.0)
    comp = (2 * shape.active * tokens - projections + (projections + attn) * spread) / rate
    if dev.stages > 1 and dev.micro_batch and prefill > 0:
        m = math.ceil(prefill / dev.micro_batch)
        comp *= (m + dev.stages - 1) / (m * dev.stages)
    device = max(mem, comp) + comm_s(shape, dev, tokens)
    return max(device, shape.layers * eff.layer_us * 1e-6) + eff.step_ms / 1000 + eff.seq_us * 1e-6 * decoding


@dataclass(frozen=True)
class _State:
    """The replica at ``running`` sequences: step time, TTFT parts, request rate."""

    step: float
    own: float
    """The step carrying one request's whole prompt."""
    prefill: float
    """The prefill work of one prompt (its marginal compute time)."""
    ttft: float
    ttft95: float
    rate: float
    """Requests per second completed."""


def _state(
    shape: Shape, dev: Device, eff: Efficiency, running: float, prompt: int, output: int, arrivals: float | None = None
) -> _State:
    b = max(running, 1e-9)
    others = max(b - 1, 0.0)
    ctx = prompt + output / 2
    joining = b * prompt / max(output, 1)
    step = step_s(shape, dev, eff, b, joining, ctx, prompt)
    own = step_s(shape, dev, eff, others, prompt, ctx, prompt)
    alone = step_s(shape, dev, eff, others, 0, ctx, prompt) if others > 0 else 0.0
    prefill = max(own - alone, 1e-6)
    # a step of the others is under way when it arrives (half of one, on average), then its own prompt's step
    base = others / b * 0.5 * step + own + eff.request_ms / 1000
    rate = arrivals if arrivals is not None else b / (base + (output - 1) * step)
    # the prompts of the other requests arriving meanwhile: an M/D/1 queue of prefill work (a closed loop's own
    # request is not among them)
    rho = min((rate if arrivals is not None else rate * others / b) * prefill, 0.98)
    wait = rho * prefill / (2 * (1 - rho)) if rho > 0 else 0.0
    wait95 = (wait / rho) * math.log(rho / 0.05) if rho > 0.05 else 0.0
    ttft = base + wait
    ttft95 = (step if others > 0 else 0.0) + own + eff.request_ms / 1000 + wait95
    if arrivals is None:
        rate = b / (ttft + (output - 1) * step)
    return _State(step, own, prefill, ttft, ttft95, rate)


def predict(
    shape: Shape, dev: Device, eff: Efficiency, load: Workload, batch_cap: float, source: str, budget: float = math.inf
) -> Prediction:
    """TTFT (p50, p95), TPOT and output tokens/s of one replica at ``load``; ``batch_cap``: most sequences it runs;
    ``budget``: most tokens one step carries (decoding sequences + prompt tokens: vLLM's max_num_batched_tokens),
    which bounds the sequences in flight to ``budget x O / (P + O)`` (each needs P / O prompt tokens per step)."""
    prompt, output = max(load.prompt, 1), max(load.output, 1)
    if load.burst and load.concurrency:
        return burst(shape, dev, eff, load, max(batch_cap, 1.0), budget, source)
    cap = max(min(batch_cap, budget * output / (prompt + output)), 1.0)
    if load.concurrency is None and load.rate is not None:
        return _open_loop(shape, dev, eff, load, cap, source)
    c = max(load.concurrency or 1.0, 1.0)
    running = min(c, cap)
    s = _state(shape, dev, eff, running, prompt, output)
    ttft, ttft95 = s.ttft, s.ttft95
    saturated = c > cap
    queued = 0.0
    if saturated:  # a closed loop of c users at the saturated rate: each request takes c / X
        latency = c / s.rate
        queued = max(latency - (output - 1) * s.step - s.ttft, 0.0)
        ttft, ttft95 = s.ttft + queued, s.ttft95 + queued
    tps = running * output / (s.ttft + (output - 1) * s.step)
    return Prediction(
        ttft * 1000, max(ttft95, ttft) * 1000, s.step * 1000, tps, c, running, saturated, source, queued * 1000
    )


def _open_loop(shape: Shape, dev: Device, eff: Efficiency, load: Workload, cap: float, source: str) -> Prediction:
    """Requests arriving at ``load.rate`` per second: the running sequences that rate sustains (Little's law)."""
    prompt, output = max(load.prompt, 1), max(load.output, 1)
    rate = float(load.rate or 0.0)
    full = _state(shape, dev, eff, cap, prompt, output)
    if rate >= full.rate:
        p = predict(shape, dev, eff, replace(load, concurrency=cap, rate=None), cap, source)
        return replace(p, ttft_ms=math.inf, ttft_p95_ms=math.inf, saturated=True, tokens_per_second=full.rate * output)
    lo, hi = 1e-6, cap
    for _ in range(60):  # the running count at which completions match arrivals
        mid = (lo + hi) / 2
        s = _state(shape, dev, eff, mid, prompt, output, rate)
        if mid / (s.ttft + (output - 1) * s.step) < rate:
            lo = mid
        else:
            hi = mid
    b = (lo + hi) / 2
    s = _state(shape, dev, eff, b, prompt, output, rate)
    ttft, ttft95 = s.ttft, max(s.ttft95, s.ttft)
    return Prediction(ttft * 1000, ttft95 * 1000, s.step * 1000, rate * output, b, b, False, source)


def burst(
    shape: Shape, dev: Device, eff: Efficiency, load: Workload, cap: float, budget: float, source: str
) -> Prediction:
    """``N = load.concurrency`` requests sent together, step by step as a continuous-batching scheduler runs them:
    each step decodes one token of every running sequence and fills the rest of its ``budget`` tokens with the
    next prompts in arrival order (chunked prefill; a prompt longer than the budget spans steps), admitting at
    most ``cap`` sequences at a time; a request's first token comes with the step that ends its prompt. TTFT
    (median, p95) and TPOT (median) are over the requests; tokens/s is ``N x O`` over the whole run."""
    n, prompt, output = max(round(load.concurrency or 1), 1), max(load.prompt, 1), max(load.output, 1)
    cap_n = max(int(cap), 1)
    room = budget
    waiting, front = n, 0.0  # requests not yet started; prompt tokens already prefilled of the first of them
    cohorts: list[list[float]] = []  # [requests, tokens generated, time of first token]
    t = 0.0
    ttfts: list[tuple[float, int]] = []
    tpots: list[tuple[float, int]] = []
    while waiting or cohorts:
        decoding = sum(c[0] for c in cohorts)
        free = max(room - decoding, 0.0)
        tokens, done = 0.0, 0
        while waiting - done > 0 and tokens < free:
            if front <= 0 and decoding + done + 1 > cap_n:  # no place for another sequence
                break
            need = prompt - front
            take = min(need, free - tokens)
            tokens += take
            if take < need:  # the prompt goes on in the next step
                front += take
                break
            done, front = done + 1, 0.0
        ctx = prompt + (sum(c[0] * c[1] for c in cohorts) / decoding if decoding else 0.0)
        t += step_s(shape, dev, eff, decoding, tokens, ctx, prompt)
        waiting -= done
        for c in cohorts:
            c[1] += 1
        if done:
            ttfts.append((t + eff.request_ms / 1000, done))
            cohorts.append([float(done), 1.0, t])
        for c in [c for c in cohorts if c[1] >= output]:
            cohorts.remove(c)
            tpots.append(((t - c[2]) / max(output - 1, 1), int(c[0])))
    ttft, ttft95 = _quantile(ttfts, 0.5), _quantile(ttfts, 0.95)
    tpot = _quantile(tpots, 0.5) if output > 1 else 0.0
    return Prediction(ttft * 1000, ttft95 * 1000, tpot * 1000, n * output / t, n, min(n, cap_n), n > cap_n, source)


def _quantile(values: list[tuple[float, int]], q: float) -> float:
    """The ``q`` quantile of ``(value, count)`` pairs."""
    total = sum(k for _, k in values)
    seen = 0
    for v, k in sorted(values):
        seen += k
        if seen >= q * total:
            return v
    return values[-1][0] if values else 0.0


def concurrency_for_rate(pred: Prediction, rate: float, output: int) -> float:
    """Requests in flight at ``rate`` requests/s when each takes TTFT + (O - 1) TPOT (Little's law)."""
    return rate * (pred.ttft_ms + (output - 1) * pred.tpot_ms) / 1000
