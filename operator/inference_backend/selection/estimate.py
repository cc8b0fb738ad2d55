"""The estimate of one replica at the stated load: TTFT p50 and p95, TPOT, output tokens/s, and its source.

The data chosen (selection/perf.py: a measured CPU row, an aiconfigurator table, the roofline with fitted
efficiencies) and the arithmetic (selection/workload.py) are documented there; ``Estimate.how`` names the source
for the decision's reasons and ``status.decision.estimate.source``.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_backend.decision import Placement, ResolvedModel
from inference_backend.engines import Profile
from inference_backend.selection.perf import compute_format, cpu_placed, gpu_performance, place_gpu
from inference_backend.selection.workload import Prediction, Workload, predict


@dataclass(frozen=True)
class Estimate:
    ttft_ms: float
    """Median time to first token at the load."""
    ttft_p95_ms: float
    tpot_ms: float
    """Median time per output token of one request (after the first)."""
    tokens_per_second: float
    """Output tokens/s of one replica at the load, all streams together."""
    concurrency: float
    """Requests in one replica at the load (a rate turned into concurrency by Little's law)."""
    saturated: bool
    """The load is more than one replica sustains without queueing (beyond its batch, or a rate above capacity)."""
    how: str
    batch_cap: float = 0.0
    cap_how: str = ""

    @staticmethod
    def of(p: Prediction, cap: float = 0.0, cap_how: str = "") -> Estimate:
        return Estimate(
            p.ttft_ms, p.ttft_p95_ms, p.tpot_ms, p.tokens_per_second, p.concurrency, p.saturated, p.source, cap, cap_how
        )


def weight_format(model: ResolvedModel, serving_dtype: str) -> str:
    """The format the engine reads: the quantization when there is one, else the dtype it computes in."""
    return compute_format(model, serving_dtype)


@dataclass(frozen=True)
class Replica:
    """What the estimate needs of one replica beyond the placement."""

    engine: str
    profile: Profile
    weights: float
    """Bytes of the weights one replica holds (all experts of an MoE)."""
    kv_token: float
    serving_dtype: str
    held: int
    """Requests of the workload's length its KV cache holds."""
    slots: int = 0
    version: str = ""
    """An engine release other than the pinned one (calibration rows name theirs); "" for the pinned one."""
    variant: str = ""
    """Another way of running the engine that a calibration row measured (Performance.variants); "" for ours."""
    attention_dp: int = 1
    """Groups of its GPUs that run attention data-parallel (SGLang --enable-dp-attention, which the operator does not
    render: calibration rows that state it); 1: tensor-parallel attention."""


def estimate(r: Replica, placement: Placement, model: ResolvedModel, load: Workload) -> Estimate:
    """One replica of ``r.engine`` on ``placement`` at ``load`` (per replica)."""
    if placement.gpu is None:
        cpu = cpu_placed(r.engine, r.profile, model, placement, r.weights, r.kv_token, r.serving_dtype, r.held, r.slots)
        return Estimate.of(
            predict(cpu.shape, cpu.device, cpu.efficiency, load, cpu.cap, cpu.source), cpu.cap, cpu.cap_source
        )
    placed = place_gpu(
        r.engine,
        model,
        placement,
        r.weights,
        r.kv_token,
        r.serving_dtype,
        r.held,
        r.slots,
        r.version,
        r.variant,
        r.attention_dp,
    )
    fmt = compute_format(model, r.serving_dtype)
    return Estimate.of(gpu_performance(placed, load, placement.gpu.sku, fmt), placed.cap, placed.cap_source)
