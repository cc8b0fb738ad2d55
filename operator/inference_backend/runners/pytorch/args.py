"""Command-line flags of the PyTorch runner. Imports nothing heavy (no torch/transformers/fastapi)."""

from __future__ import annotations

import argparse

from inference_backend.runners.common.args import add_common_flags, positive_int


def adapter_arg(value: str) -> tuple[str, str]:
    """NAME=PATH of --adapter."""
    name, sep, path = value.partition("=")
    if not sep or not name or not path or name.startswith("-"):
        raise argparse.ArgumentTypeError(f"{value!r}: expected NAME=PATH")
    return name, path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ib-pytorch-runner",
        description="OpenAI-compatible server running a Hugging Face causal LM with PyTorch (eager).",
    )
    add_common_flags(parser, ("static", "dynamic", "continuous"))
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto = cuda when available, else cpu",
    )
    parser.add_argument(
        "--prepack-weights",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CPU, float32: reorder every Linear layer's weights once for oneDNN's matmul instead of torch's default "
        "(MKL repacks them on every call); see docs/runners.md (default: on)",
    )
    parser.add_argument(
        "--fused-forward",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CPU, float32, Llama-shaped models without a draft model: run a lean forward with fused q/k/v and "
        "gate/up matmuls instead of transformers' modules (same math); otherwise transformers' (default: on)",
    )
    parser.add_argument(
        "--huge-pages",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CPU: torch allocates every buffer of 2 MiB or more (weights, KV cache) on transparent huge pages "
        "(THP_MEM_ALLOC_ENABLE; takes effect where the host's /sys/kernel/mm/transparent_hugepage/enabled is madvise "
        "or always): fewer TLB misses while a decode step streams the weights; see docs/runners.md (default: on)",
    )
    parser.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME=PATH",
        type=adapter_arg,
        help="a PEFT LoRA adapter directory served under NAME (the OpenAI `model` field; repeatable): each request "
        "runs its adapter, or the base model under --served-model-name; rows of one batch may differ",
    )
    spec = parser.add_argument_group("speculative decoding")
    spec.add_argument(
        "--draft-model",
        metavar="PATH",
        default=None,
        help="draft model directory (must share the target's tokenizer); enables speculative decoding",
    )
    spec.add_argument(
        "--num-speculative-tokens",
        type=positive_int,
        default=4,
        metavar="N",
        help="tokens the draft proposes per step (default: 4)",
    )
    return parser
