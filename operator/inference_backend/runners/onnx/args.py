"""Command-line flags of the ONNX Runtime server. Imports nothing heavy (no onnxruntime/fastapi)."""

from __future__ import annotations

import argparse

from inference_backend.runners.common.args import add_common_flags

DEFAULT_PROVIDERS = "CUDAExecutionProvider,CPUExecutionProvider"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ib-onnxruntime-server",
        description="OpenAI-compatible server running a causal LM exported to ONNX (with KV inputs/outputs) "
        "on ONNX Runtime. Export with: python -m inference_backend.runners.onnx.export",
    )
    add_common_flags(parser, ("static", "dynamic"))
    parser.add_argument(
        "--providers",
        default=DEFAULT_PROVIDERS,
        metavar="LIST",
        help="comma-separated execution providers in order of preference; those not available in this "
        f"onnxruntime build are dropped (logged) (default: {DEFAULT_PROVIDERS})",
    )
    return parser
