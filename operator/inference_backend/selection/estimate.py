"""Estimated TTFT (512-token prompt) and aggregate tokens/s of one replica, from the engine card's profile.

In order of preference:

1. a row measured at a real shape (7B) in the model's weight format (``Profile.measured``): TTFT scaled by the
   rated parameters over the row's, tokens/s by the row's parameters over the model's rated ones (same format, same
   bytes per parameter: the row's are its files' real ones, scales and float embeddings included, which a nominal
   figure such as int4's 0.5 leaves out), both by the node's cores over the row's;
2. a measured row of another quantization of the same engine (quantized models only; the nearest in bytes per
   parameter): prefill runs the quantized kernels, not the reference format's, so its TTFT is the row's scaled by
   parameters, and decoding follows the weight bytes as in 1;
3. the profile's reference figures scaled to the model (``_scaled``): TTFT by rated parameters, tokens/s by weight
   bytes; the weight format does not change the TTFT there (no measurement says by how much).

``Estimate.how`` says which, for the decision's reasons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inference_backend.decision import Placement, ResolvedModel
from inference_backend.engines import MeasuredRow, Profile
from inference_backend.memory import QUANT_BYTES

_TP_EFFICIENCY = 0.9  # per doubling of tensor parallelism (all-reduce cost)
_FLOAT_FORMATS = frozenset({"float32", "float16", "bfloat16", "f32", "f16", "bf16", "none"})


@dataclass(frozen=True)
class Estimate:
    ttft_ms: float
    tokens_per_second: float
    how: str


def weight_format(model: ResolvedModel, serving_dtype: str) -> str:
    """The format the engine reads: the quantization when there is one, else the dtype it computes in."""
    return model.quantization if model.quantization != "none" else serving_dtype


def estimate(profile: Profile, accelerator: str, placement: Placement, model: ResolvedModel, weights: float,
             serving_dtype: str) -> Estimate:  # fmt: skip
    """``weights``: the bytes of the model's weights one replica holds (all experts of an MoE)."""
    fmt = weight_format(model, serving_dtype)
    row, exact = _row(profile.measured, fmt)
    if row is None or placement.gpu is not None:  # measured rows are CPU rows
        return _scaled(profile, accelerator, placement, model, weights)
    rated = model.rated_parameters
    speed = max(placement.hardware.cpu_millis / 1000, 1) / row.cores
    ttft = row.ttft_ms * (rated / row.parameters) / speed
    if exact:
        bytes_ratio = row.parameters / rated
    else:
        bytes_ratio = (row.parameters * row.bytes_per_param) / max(weights * rated / model.parameters, 1.0)
    tps = row.tokens_per_second_8 * speed * bytes_ratio
    shape = f"{row.parameters / 1e9:.1f}B {row.weights}, {row.cores} cores"
    if exact:
        how = (f"measured row ({shape}: TTFT {row.ttft_ms / 1000:.1f} s for {row.prompt_tokens} tokens, "
               f"{row.tokens_per_second_8:.2f} tokens/s at concurrency 8), scaled to {rated / 1e9:.1f}B and "
               f"{speed * row.cores:g} cores; {row.provenance}")  # fmt: skip
    else:
        how = (f"nearest measured quantization: the {shape} row (no {fmt} row) for prefill, decoding scaled by "
               f"weight bytes; {row.provenance}")  # fmt: skip
    return Estimate(ttft, tps, how)


def _row(rows: tuple[MeasuredRow, ...], fmt: str) -> tuple[MeasuredRow | None, bool]:
    """The row in ``fmt`` (exact), else for a quantized format the quantized row nearest in bytes per parameter."""
    for row in rows:
        if row.weights == fmt:
            return row, True
    if fmt in _FLOAT_FORMATS or fmt not in QUANT_BYTES:
        return None, False
    quantized = [r for r in rows if r.weights not in _FLOAT_FORMATS]
    if not quantized:
        return None, False
    want = QUANT_BYTES[fmt]
    return min(quantized, key=lambda r: abs(math.log(r.bytes_per_param / want))), False


def _scaled(profile: Profile, accelerator: str, placement: Placement, model: ResolvedModel,
            weights: float) -> Estimate:  # fmt: skip
    # compute and weight bytes read per token follow the rated (MoE: active) parameters; memory holds all weights
    rated = model.rated_parameters
    size = rated / 7e9
    bytes_ratio = (7e9 * profile.bytes_per_param) / max(weights * rated / model.parameters, 1.0)
    if placement.gpu is not None:
        tp = placement.gpus_per_replica
        speed = placement.gpu.speed * tp * _TP_EFFICIENCY ** math.log2(tp)
    else:
        speed = max(placement.hardware.cpu_millis / 1000, 1) / profile.reference_cores
    how = (f"scaled from the {accelerator} reference profile (7B, {profile.bytes_per_param:g} bytes per parameter) "
           "by parameters (TTFT) and weight bytes (tokens/s); no row measured in this weight format; "
           f"{profile.provenance.split(';')[0]}")  # fmt: skip
    return Estimate(profile.ttft_ms * size / speed, profile.tokens_per_second * speed * bytes_ratio, how)
