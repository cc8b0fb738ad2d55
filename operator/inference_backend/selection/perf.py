"""Which data the workload model uses for one placement, and the estimate it gives (pure).

In order of preference (measured beats published beats formula; the estimate's ``source`` names what was used):

1. CPU: the rows measured at the real 7B shape on CPU (engines/profiles_7b.py), in the model's weight format or
   the nearest measured quantization: prefill rate from the row's TTFT, the decode step and its growth per
   sequence from its single-stream and concurrent tokens/s, scaled by parameters, weight bytes and cores;
   float formats without a row: the engine's CPU reference profile, scaled the same way;
2. vLLM and SGLang on the NVIDIA GPUs aiconfigurator models: the roofline (selection/workload.py) corrected point
   by point by aiconfigurator's tables (selection/perf_tables.py): the ratio of the table to the roofline at the
   table's (prompt, concurrency) points, interpolated to the workload's, for the table's model when the model is
   one of them, else for the table model nearest in parameters on the same GPU;
3. every other GPU placement: the roofline with the engine's efficiencies on that vendor (selection/perf_data.py,
   fitted to published measurements).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from inference_backend.decision import Placement, ResolvedModel
from inference_backend.engines import MeasuredRow, Profile, card
from inference_backend.engines.card import Efficiency
from inference_backend.facts.sku import SkuPerf
from inference_backend.facts.sku_table import PERF
from inference_backend.memory import QUANT_BYTES
from inference_backend.selection import perf_tables
from inference_backend.selection.perf_data import VENDOR_DERATE
from inference_backend.selection.workload import (
    Device,
    Prediction,
    Shape,
    Workload,
    predict,
)

_FLOAT_FORMATS = frozenset({"float32", "float16", "bfloat16", "f32", "f16", "bf16", "none"})
_FP8 = frozenset({"fp8", "fbgemm_fp8"})
"""FP8 compute formats: per-tensor scaled (``fp8``) and Meta's row-wise scaled checkpoints (``fbgemm_fp8``, which an
engine card may rate apart: engines/vllm.py formats)."""
_INT8 = frozenset({"int8"})
# aiconfigurator system per SKU row (its systems/*.yaml model these parts)
AIC_SYSTEMS = {
    "H100-SXM5-80GB": "h100_sxm",
    "H200-SXM-141GB": "h200_sxm",
    "A100-SXM4-80GB": "a100_sxm",
    "B200-180GB": "b200_sxm",
    "L40S-48GB": "l40s",
    "RTX-PRO-6000-96GB": "rtx_pro_6000_server",
}
SAME_ARCHITECTURE = {
    "A100-SXM4-40GB": "a100_sxm",
    "A100-PCIe-40GB": "a100_sxm",
    "A100-PCIe-80GB": "a100_sxm",
    "H100-PCIe-80GB": "h100_sxm",
    "H100-NVL-94GB": "h100_sxm",
    "GH200-96GB": "h100_sxm",
    "H200-NVL-141GB": "h200_sxm",
}
"""Parts with no table of their own, rated by the table of the same chip's SXM system: the table's TTFT and TPOT
over the roofline at the SXM part's rates (the engine's kernels against the physics on that chip), applied to the
roofline at this part's own bandwidth, dense rate and link."""
# the table models' shapes (their config.json): parameters, layers, query width, KV heads, head dim
AIC_MODELS = {
    "meta-llama/Meta-Llama-3.1-8B": (8.03e9, 32, 4096, 8, 128),
    "Qwen/Qwen3-32B": (32.8e9, 64, 8192, 8, 128),
    "meta-llama/Meta-Llama-3.1-70B": (70.6e9, 80, 8192, 8, 128),
}
PCIE_LATENCY_S = 25e-6
"""All-reduce latency over PCIe (no device link): NCCL's ring over the host bridge, about 2.5x its NVLink latency
(aiconfigurator's p2p_latency 10 us for NVLink systems); an estimate."""


@dataclass(frozen=True)
class Placed:
    """A placement as the workload model sees it."""

    engine: str
    shape: Shape
    device: Device
    efficiency: Efficiency
    cap: float
    cap_source: str
    source: str
    budget: float = math.inf
    """Tokens one step carries (the engine's default prefill budget)."""
    tables: bool = True
    """Whether aiconfigurator's tables may correct the roofline: always for the engine's own tables; borrowed ones
    (TGI 3.x rated by vLLM's) only for the pinned release, not for the older releases calibration rows name."""


def shape_of(model: ResolvedModel, weights: float, kv_token: float) -> Shape:
    hidden = (
        model.attention_heads * model.head_dim
        if model.attention_heads
        else _hidden(model.rated_parameters, model.layers)
    )
    width = (model.attention_heads or 0) * model.head_dim
    attention = model.layers * (2 * width * width + 2 * width * model.kv_heads * model.head_dim)
    return Shape(
        float(model.parameters), float(model.rated_parameters), model.layers, hidden, weights, kv_token, attention
    )


def _hidden(parameters: float, layers: int) -> int:
    """A decoder's width from its size: parameters ~ 12 x layers x hidden^2 (attention 4h^2 + MLP 8h^2)."""
    return max(256, int(math.sqrt(parameters / (12 * max(layers, 1)))))


def compute_format(model: ResolvedModel, serving_dtype: str) -> str:
    fmt = model.quantization if model.quantization != "none" else serving_dtype
    return fmt


def _flops(perf: SkuPerf, fmt: str) -> tuple[float, str]:
    if fmt in _FP8 and perf.tflops_fp8:
        return perf.tflops_fp8 * 1e12, "fp8"
    if fmt in _INT8 and perf.tops_int8:
        return perf.tops_int8 * 1e12, "int8"
    return perf.tflops_16 * 1e12, "16-bit"


def gpu_device(placement: Placement, fmt: str) -> Device:
    gpu = placement.gpu
    assert gpu is not None
    n = max(placement.gpus_per_replica, 1)
    bw = (gpu.bandwidth_gbs or 300) * 1e9
    perf = PERF.get(gpu.sku)
    if perf is None:  # an unidentified part or one without a published dense rate: ~150 FLOP per byte (T4 to H100)
        return Device(n, bw, bw * 150, 16e9, PCIE_LATENCY_S, f"{gpu.product}: no dense rate known, 150 FLOP/byte")
    flops, kind = _flops(perf, fmt)
    if gpu.mig:  # a MIG slice: its share of the compute, as of the bandwidth (facts: bandwidth_gbs is the share)
        flops *= (gpu.bandwidth_gbs or 0) / max(_full_bandwidth(gpu.sku), 1)
    link = perf.link_gbs * 1e9
    latency = 10e-6 if perf.link_gbs > 64 else PCIE_LATENCY_S
    how = (
        f"{gpu.product}: {gpu.bandwidth_gbs:g} GB/s, {flops / 1e12:g} dense {kind} TFLOPS, link {perf.link_gbs:g} GB/s"
    )
    return Device(n, bw, flops, link, latency, how)


def _full_bandwidth(sku: str) -> float:
    from inference_backend.facts.identify import INDEX

    row = INDEX.by_id.get(sku)
    return float(row.bandwidth_gbs) if row else 0.0


def _older(version: str, than: str) -> bool:
    def nums(v: str) -> tuple[int, ...]:
        out = []
        for part in v.split(".")[:3]:
            digits = "".join(ch for ch in part if ch.isdigit())
            if not digits:
                break
            out.append(int(digits))
        return tuple(out)

    have = nums(version)
    return bool(have) and have < nums(than)


def efficiency(engine: str, vendor: str, version: str = "", variant: str = "", fmt: str = "") -> tuple[Efficiency, str]:
    """The engine's efficiencies on ``vendor`` (its card); ``version``: an older release, ``variant``: another way
    of running it (calibration rows); ``fmt``: the compute format (Performance.formats)."""
    perf = card(engine).performance
    for v, name, eff in perf.variants:
        if v == vendor and variant == name:
            return eff, f"{engine} ({variant})/{vendor} efficiencies ({eff.source})"
    for v, name, eff in perf.formats:
        if v == vendor and fmt == name:
            return eff, f"{engine}/{vendor} {fmt} efficiencies ({eff.source})"
    for v, before, eff in perf.older:
        if v == vendor and version and _older(version, before):
            return eff, f"{engine} {version}/{vendor} efficiencies ({eff.source})"
    own = perf.efficiency.get(vendor)
    if own is not None:
        return own, f"{engine}/{vendor} efficiencies ({own.source})"
    base = perf.efficiency.get("nvidia") or next(iter(perf.efficiency.values()))
    k = VENDOR_DERATE.get(vendor, 0.5)
    derated = Efficiency(
        base.prefill * k,
        base.decode * k,
        base.step_ms / k,
        base.seq_us / k,
        base.request_ms,
        f"its NVIDIA factors x {k} (no {vendor} row)",
        base.layer_us / k,
        base.burst,
        base.moe,
    )
    return derated, f"{engine}/{vendor} efficiencies ({derated.source})"


def _large(engine: str, gpu_memory_bytes: float | None, product: str) -> bool:
    """Whether the engine takes its defaults for large GPUs (70 GiB or more, and not a product it excepts)."""
    perf = card(engine).performance
    name = product.lower()
    return (
        gpu_memory_bytes is not None
        and gpu_memory_bytes >= 70 * 2**30
        and not any(part in name for part in perf.large_gpu_except)
    )


def batch_cap(engine: str, gpu_memory_bytes: float | None, slots: int, product: str = "") -> tuple[float, str]:
    """The most sequences one replica of ``engine`` decodes together by default, and its source."""
    if slots:
        return float(slots), f"{slots} slots (-np)"
    perf = card(engine).performance
    cap = perf.max_sequences
    if perf.max_sequences_large_gpu and _large(engine, gpu_memory_bytes, product):
        cap = perf.max_sequences_large_gpu
    return (float(cap) if cap else math.inf), perf.max_sequences_source


def place_gpu(
    engine: str,
    model: ResolvedModel,
    placement: Placement,
    weights: float,
    kv_token: float,
    serving_dtype: str,
    held: int,
    slots: int,
    version: str = "",
    variant: str = "",
    attention_dp: int = 1,
) -> Placed:
    """``held``: the sequences the replica's KV cache holds at the workload's length; ``version``, ``variant``: an
    engine release other than the pinned one, another way of running it (calibration rows); ``attention_dp``: the
    groups its attention runs data-parallel over (workload.Device.attention_dp; SGLang --enable-dp-attention)."""
    gpu = placement.gpu
    assert gpu is not None
    fmt = compute_format(model, serving_dtype)
    dev = replace(gpu_device(placement, fmt), attention_dp=max(attention_dp, 1))
    if card(engine).layer_split and dev.n > 1:
        # layers split over the GPUs (llama.cpp --split-mode layer): a token passes through them one after another,
        # so one device's bandwidth and rate serve the whole model, and no all-reduce is paid
        dev = Device(
            1,
            dev.bandwidth,
            dev.flops,
            0.0,
            0.0,
            dev.how + f", {dev.n} GPUs in sequence (layer split)",
            stages=dev.n,
            micro_batch=card(engine).performance.micro_batch,
        )
    eff, eff_how = efficiency(engine, gpu.vendor, version, variant, fmt)
    cap, cap_how = batch_cap(engine, gpu.memory_mib * 2**20, slots, gpu.product)
    if held < cap:
        cap, cap_how = float(max(held, 1)), f"{held} sequences the KV cache holds"
    source = f"roofline ({dev.how}) with {eff_how}"
    budget = step_budget(engine, gpu.memory_mib * 2**20, gpu.product)
    perf = card(engine).performance
    tables = eff is perf.efficiency.get(gpu.vendor) or perf.aiconfigurator == engine
    return Placed(engine, shape_of(model, weights, kv_token), dev, eff, cap, cap_how, source, budget, tables)


def step_budget(engine: str, gpu_memory_bytes: float, product: str = "") -> float:
    perf = card(engine).performance
    tokens = perf.step_tokens
    if perf.step_tokens_large_gpu and _large(engine, gpu_memory_bytes, product):
        tokens = perf.step_tokens_large_gpu
    return float(tokens) if tokens else math.inf


def gpu_performance(p: Placed, load: Workload, sku: str, fmt: str) -> Prediction:
    """The roofline, corrected by aiconfigurator's table where one covers the engine and GPU, then the wave of a
    closed loop whose users started together (Efficiency.burst). A burst (requests sent together, once) is
    simulated on the roofline alone (workload.burst): the tables and the wave share are for steady loads."""
    base = predict(p.shape, p.device, p.efficiency, load, p.cap, p.source, p.budget)
    if load.burst:
        return base
    alone = predict(p.shape, p.device, p.efficiency, Workload(load.prompt, 1, concurrency=1), p.cap, "").ttft_ms
    r_ttft = r_tpot = 1.0
    src = p.source
    table = _table(p.engine, sku, fmt, p.shape, p.device.n) if p.tables else None
    if table is not None:
        key, name, other = table
        r_ttft, r_tpot = _ratio(key, p.efficiency, load.prompt, base.running, p.budget)
        if not card(p.engine).performance.table_ttft:
            r_ttft = 1.0
        src = (
            f"aiconfigurator {perf_tables.AICONFIGURATOR_VERSION} table ({key}, database "
            f"{perf_tables.TABLES[key]['version']}) over the roofline: TTFT x{r_ttft:.2f}, TPOT x{r_tpot:.2f} at "
            f"this load" + ("" if name == "exact" else f" (the nearest table model: {name})") + other
        )
    wait = 0.0
    if load.concurrency is not None:  # the wave's prompts: their prefill queues, their requests' HTTP and tokenizing
        # (request_ms) do not: the server takes the wave's requests concurrently
        prompt_step = max(alone - p.efficiency.request_ms, 0.0)
        wait = p.efficiency.burst * max(base.running - 1, 0) / 2 * prompt_step * r_ttft
    tpot = base.tpot_ms * r_tpot
    ttft = (base.ttft_ms - base.queued_ms) * r_ttft + wait  # in the batch, before any queue for a place in it
    ttft95 = (base.ttft_p95_ms - base.queued_ms) * r_ttft + 2 * wait * 0.95
    if load.concurrency is None:  # a rate: the replica makes what arrives (or all it can, saturated)
        tps = base.tokens_per_second
    else:
        tps = base.running * load.output / max((ttft + (load.output - 1) * tpot) / 1000, 1e-9)
    queued = 0.0
    if base.saturated and load.concurrency is not None:  # c users at the rate X: a request takes c / X
        latency = load.concurrency * load.output / tps * 1000
        queued = max(latency - (load.output - 1) * tpot - ttft, 0.0)
    return Prediction(
        ttft + queued, ttft95 + queued, tpot, tps, base.concurrency, base.running, base.saturated, src, queued
    )


def _table(engine: str, sku: str, fmt: str, shape: Shape, tp: int) -> tuple[str, str, str] | None:
    """(table key, "exact" or the nearest table model, "" or which other part's table) for this placement."""
    system = AIC_SYSTEMS.get(sku) or SAME_ARCHITECTURE.get(sku)
    backend = card(engine).performance.aiconfigurator
    if system is None or not backend:
        return None
    other = "" if sku in AIC_SYSTEMS else f" (the same chip's {system} table: {sku} has none)"
    dtype = "fp8" if fmt in _FP8 else ("bfloat16" if fmt in _FLOAT_FORMATS else "")
    if not dtype:
        return None
    best: tuple[float, str, str] | None = None
    for key in perf_tables.TABLES:
        b, s, m, d, t = key.split("|")
        if (b, s, d) != (backend, system, dtype) or m not in AIC_MODELS:
            continue
        params, layers, _, _, _ = AIC_MODELS[m]
        exact = abs(math.log(shape.active / params)) < 0.06 and layers == shape.layers
        dist = abs(math.log(shape.active / params)) + 0.5 * abs(math.log(tp / int(t))) - (10 if exact else 0)
        if best is None or dist < best[0]:
            best = (dist, key, "exact" if exact and int(t) == tp else f"{m} TP{t}")
    return (best[1], best[2], other) if best else None


def _ratio(key: str, eff: Efficiency, prompt: int, running: float, budget: float) -> tuple[float, float]:
    """The table's TTFT and TPOT over the roofline's, interpolated (inverse distance in log prompt and log
    concurrency) to this prompt length and running count."""
    pts = _table_ratios(key, eff, budget)
    x, y = math.log(max(prompt, 1)), math.log(max(running, 1.0))
    wsum = a = b = 0.0
    for lp, lc, rt, rp in pts:
        d2 = (lp - x) ** 2 + (lc - y) ** 2
        w = 1.0 / (d2 + 0.05) ** 2
        wsum, a, b = wsum + w, a + w * rt, b + w * rp
    return (math.exp(a / wsum), math.exp(b / wsum)) if wsum else (1.0, 1.0)


@functools.lru_cache(maxsize=256)
def _table_ratios(key: str, eff: Efficiency, budget: float) -> tuple[tuple[float, float, float, float], ...]:
    _, system, model, _, tp = key.split("|")
    params, layers, hidden, kv_heads, head_dim = AIC_MODELS[model]
    sku = next(k for k, v in AIC_SYSTEMS.items() if v == system)
    perf = PERF[sku]
    from inference_backend.facts.identify import INDEX

    row = INDEX.by_id[sku]
    fp8 = "|fp8|" in key
    bpp = 1.0 if fp8 else 2.0
    shape = Shape(params, params, layers, hidden, params * bpp, 2 * layers * kv_heads * head_dim * bpp)
    n = int(tp)
    flops = (perf.tflops_fp8 if fp8 and perf.tflops_fp8 else perf.tflops_16) * 1e12
    dev = Device(n, row.bandwidth_gbs * 1e9, flops, perf.link_gbs * 1e9, 10e-6 if perf.link_gbs > 64 else 25e-6)
    out = []
    for isl, batch, ttft, tpot, _q in perf_tables.TABLES[key]["points"]:  # type: ignore[attr-defined]
        p = predict(shape, dev, eff, Workload(int(isl), perf_tables.OSL, concurrency=batch), 1e9, "", budget)
        out.append((math.log(isl), math.log(batch), math.log(ttft / p.ttft_ms), math.log(tpot / p.tpot_ms)))
    return tuple(out)


# ---- CPU: the measured 7B rows ----


def cpu_row(profile: Profile, fmt: str) -> tuple[MeasuredRow | None, bool]:
    """The row in ``fmt`` (exact), else for a quantized format the quantized row nearest in bytes per parameter."""
    for row in profile.measured:
        if row.weights == fmt:
            return row, True
    if fmt in _FLOAT_FORMATS or fmt not in QUANT_BYTES:
        return None, False
    quantized = [r for r in profile.measured if r.weights not in _FLOAT_FORMATS]
    if not quantized:
        return None, False
    want = QUANT_BYTES[fmt]
    return min(quantized, key=lambda r: abs(math.log(r.bytes_per_param / want))), False


def cpu_placed(
    engine: str,
    profile: Profile,
    model: ResolvedModel,
    placement: Placement,
    weights: float,
    kv_token: float,
    serving_dtype: str,
    held: int,
    slots: int,
) -> Placed:
    """A CPU replica rated from its engine's measured 7B row: prefill FLOP/s from the row's TTFT, the decode
    step's memory time and per-sequence time from its tokens/s at concurrency 1 and 8; all scaled by cores."""
    fmt = compute_format(model, serving_dtype)
    row, exact = cpu_row(profile, fmt)
    cores = max(placement.hardware.cpu_millis / 1000, 1)
    shape = shape_of(model, weights, kv_token)
    if row is not None:
        params, row_cores = float(row.parameters), row.cores
        ttft_ms, prompt = row.ttft_ms, row.prompt_tokens
        t1 = 1 / row.tokens_per_second_1
        hi, tps_hi = max(((8, row.tokens_per_second_8), *row.tokens_per_second_at), key=lambda p: p[0])
        t8 = hi / tps_hi
        row_bytes = row.parameters * row.bytes_per_param
        kind = "measured row" if exact else f"nearest measured quantization (no {fmt} row)"
        src = (
            f"{kind} ({row.parameters / 1e9:.1f}B {row.weights}, {row.cores} cores: TTFT {row.ttft_ms / 1000:.1f} s "
            f"for {row.prompt_tokens} tokens, {row.tokens_per_second_1:.2f} tokens/s at concurrency 1, "
            f"{row.tokens_per_second_8:.2f} at 8), scaled to {model.rated_parameters / 1e9:.1f}B and {cores:g} "
            f"cores; {row.provenance}"
        )
    else:
        params, row_cores = 7e9, profile.reference_cores
        ttft_ms, prompt = profile.ttft_ms, 512
        t8 = 8 / profile.tokens_per_second
        t1 = t8 / 8 * 2.5  # no single-stream figure: the measured 7B rows decode 1.5-3.4x faster per stream at 8
        row_bytes = 7e9 * profile.bytes_per_param
        src = (
            f"scaled from the cpu reference profile (7B, {profile.bytes_per_param:g} bytes per parameter; no row "
            f"measured in this weight format); {profile.provenance.split(';')[0]}"
        )
    flops = 2 * params * prompt / (ttft_ms / 1000) * cores / row_cores
    c1 = 2 * params / flops * cores / row_cores  # compute of one token on the row's cores
    mem, seq = _split_decode(t1, t8, c1, hi if row is not None else 8)
    bandwidth = row_bytes / mem * cores / row_cores
    scale = model.rated_parameters / params
    eff = Efficiency(1.0, 1.0, 0.0, seq * 1e6 * scale * row_cores / cores, 0.0, src)
    dev = Device(1, bandwidth, flops, 0.0, 0.0, f"{cores:g} cores")
    cap, cap_how = batch_cap(engine, None, slots)
    if held < cap:
        cap, cap_how = float(max(held, 1)), f"{held} sequences the KV cache holds"
    return Placed(engine, shape, dev, eff, cap, cap_how, src)


def _split_decode(t1: float, t8: float, c1: float, hi: int = 8) -> tuple[float, float]:
    """(memory time of one step, time per sequence) that reproduce the step at 1 and ``hi`` sequences (the
    highest measured concurrency): step(b) = max(memory, b x c1) + b x seq."""
    seq = (t8 - t1) / (hi - 1)
    mem = t1 - seq
    if mem < hi * c1:  # compute-bound at hi
        seq = max((t8 - hi * c1) / hi, 0.0)
        mem = max(t1 - seq, c1)
    return max(mem, 1e-6), max(seq, 0.0)
