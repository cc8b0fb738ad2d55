"""The workload model's data that is not an engine's: vendor derating and prices per GPU-hour.

The engines' own factors (efficiencies per GPU vendor, default batch) are on their cards (engines/*.py
``Performance``), fitted by ``make bench-model`` (bench/perf_model.py ``fit``) to the calibration set's rows that
are not held out (tests/data/perf-calibration/); docs/engine-profiles.md gives the fit and the measured error.
"""

from __future__ import annotations

VENDOR_DERATE: dict[str, float] = {"nvidia": 1.0, "amd": 0.55, "habana": 0.7}
"""Share of the NVIDIA efficiencies an engine reaches on another vendor's devices when no row measured it there:
ROCm vLLM reached about half its CUDA efficiency in the published MI300X rows (the ratio of the fitted factors)."""

PRICE_PER_GPU_HOUR: dict[str, tuple[float, str]] = {
    "H100-SXM5-80GB": (12.29, "AWS p5.48xlarge on-demand, us-east-1, 2024 list price $98.32/h for 8 GPUs"),
    "A100-SXM4-40GB": (4.10, "AWS p4d.24xlarge on-demand, us-east-1, 2024 list price $32.77/h for 8 GPUs"),
    "A100-SXM4-80GB": (5.12, "AWS p4de.24xlarge on-demand, us-east-1, 2024 list price $40.97/h for 8 GPUs"),
    "A10G-24GB": (1.01, "AWS g5.xlarge on-demand, us-east-1, 2024 list price $1.006/h (1 GPU, 4 vCPU)"),
    "L4-24GB": (0.80, "AWS g6.xlarge on-demand, us-east-1, 2024 list price $0.805/h (1 GPU, 4 vCPU)"),
    "L40S-48GB": (1.86, "AWS g6e.xlarge on-demand, us-east-1, 2024 list price $1.861/h (1 GPU, 4 vCPU)"),
    "T4-16GB": (0.53, "AWS g4dn.xlarge on-demand, us-east-1, 2024 list price $0.526/h (1 GPU, 4 vCPU)"),
}
"""Optional price per GPU-hour per SKU row, with its source: among placements of the same GPU count the cheaper
wins where both prices are known."""
