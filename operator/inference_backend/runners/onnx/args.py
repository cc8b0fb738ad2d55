"""Command-line flags of the ONNX Runtime server. Imports nothing heavy (no onnxruntime/fastapi)."""

from __future__ import annotations

import argparse

from inference_backend.runners.common.args import add_common_flags

DEFAULT_PROVIDERS = "CUDAExecutionProvider,CPUExecutionProvider"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ib-onnxruntime-server",
        description="OpenAI-compatible server running an ONNX causal LM: an onnxruntime-genai model "
        "(genai_config.json; build one with python -m onnxruntime_genai.models.builder) through onnxruntime-genai, "
        "or our own export (python -m inference_backend.runners.onnx.export) on ONNX Runtime.",
    )
    add_common_flags(parser, ("static", "continuous", "dynamic"))
    parser.add_argument(
        "--providers",
        default=DEFAULT_PROVIDERS,
        metavar="LIST",
        help="comma-separated execution providers in order of preference; those not available in this "
        f"onnxruntime build are dropped (logged) (default: {DEFAULT_PROVIDERS})",
    )
    parser.add_argument(
        "--genai-runtime",
        choices=("auto", "onnxruntime", "genai"),
        default="auto",
        help="what runs an onnxruntime-genai format model: onnxruntime directly (continuous batching, prefix cache; "
        "CPU, decoders with GroupQueryAttention as genai's model builder writes them) or genai's Generator; auto: "
        "onnxruntime where it can, logged (default: auto)",
    )
    return parser
