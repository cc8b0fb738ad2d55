"""Flags shared by both servers.

Imports nothing heavy: the renderers' contract tests parse rendered container args with these parsers.
"""

from __future__ import annotations

import argparse

from inference_backend.runners.common import limits as lim


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_common_flags(parser: argparse.ArgumentParser, batching_modes: tuple[str, ...]) -> None:
    model = parser.add_argument_group("model")
    model.add_argument("--model", required=True, metavar="PATH", help="local model directory")
    model.add_argument(
        "--served-model-name",
        metavar="NAME",
        default=None,
        help="name clients use in the 'model' field (default: the model directory's name)",
    )
    model.add_argument(
        "--dtype",
        choices=("auto", "float32", "float16", "bfloat16"),
        default="auto",
        help="weight/activation dtype; auto = float32 on CPU, the checkpoint's dtype (else float16) on GPU",
    )
    model.add_argument(
        "--max-model-len",
        type=positive_int,
        default=None,
        metavar="N",
        help="max prompt + generated tokens per request (default: the model's max_position_embeddings)",
    )

    model.add_argument(
        "--chat-template",
        metavar="FILE",
        default=None,
        help="Jinja chat template for /v1/chat/completions, instead of the tokenizer's; without either, chat "
        "requests get 400 (default: the tokenizer's)",
    )

    http = parser.add_argument_group("http")
    http.add_argument("--host", default="0.0.0.0", help="address to listen on (default: 0.0.0.0)")
    http.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    http.add_argument(
        "--max-queue",
        type=positive_int,
        default=256,
        metavar="N",
        help="max requests waiting for admission; beyond it requests get 429 (default: 256)",
    )

    limits = parser.add_argument_group("request limits (OpenAI-shaped errors when exceeded; docs/runners.md)")
    limits.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=lim.MAX_BODY_BYTES,
        metavar="N",
        help=f"largest request body; larger ones get 413 (default: {lim.MAX_BODY_BYTES})",
    )
    limits.add_argument(
        "--max-stop-sequences",
        type=positive_int,
        default=lim.MAX_STOP_SEQUENCES,
        metavar="N",
        help=f"most `stop` strings per request (default: {lim.MAX_STOP_SEQUENCES})",
    )
    limits.add_argument(
        "--max-stop-chars",
        type=positive_int,
        default=lim.MAX_STOP_CHARS,
        metavar="N",
        help=f"longest `stop` string, in characters (default: {lim.MAX_STOP_CHARS})",
    )
    limits.add_argument(
        "--max-messages",
        type=positive_int,
        default=lim.MAX_MESSAGES,
        metavar="N",
        help=f"most chat messages per request (default: {lim.MAX_MESSAGES})",
    )
    limits.add_argument(
        "--max-n",
        type=positive_int,
        default=lim.MAX_N,
        metavar="N",
        help=f"most choices (`n`) per request; each is a sequence of its own in the batch (default: {lim.MAX_N})",
    )
    limits.add_argument(
        "--max-logprobs",
        type=non_negative_int,
        default=lim.MAX_LOGPROBS,
        metavar="N",
        help="most alternatives per token (`logprobs` of completions, `top_logprobs` of chat) "
        f"(default: {lim.MAX_LOGPROBS})",
    )
    limits.add_argument(
        "--request-timeout",
        type=non_negative_float,
        default=lim.REQUEST_TIMEOUT_S,
        metavar="SECONDS",
        help="deadline of one request from arrival; past it the generation is cancelled and the client gets 504 "
        f"(a stream: an error event); 0 = none (default: {lim.REQUEST_TIMEOUT_S:g})",
    )
    limits.add_argument(
        "--shutdown-timeout",
        type=non_negative_float,
        default=lim.SHUTDOWN_TIMEOUT_S,
        metavar="SECONDS",
        help="on SIGTERM stop accepting, let running requests finish for this long, then cancel them and exit "
        f"(default: {lim.SHUTDOWN_TIMEOUT_S:g})",
    )

    sched = parser.add_argument_group("scheduling")
    sched.add_argument(
        "--batching",
        choices=batching_modes,
        default=batching_modes[-1],
        help=f"batching policy (default: {batching_modes[-1]}); see docs/runners.md",
    )
    sched.add_argument(
        "--max-batch-size", type=positive_int, default=16, metavar="N", help="max sequences per batch (16)"
    )
    sched.add_argument(
        "--max-batch-tokens",
        type=positive_int,
        default=8192,
        metavar="N",
        help="max prompt tokens prefilled per scheduling step / batch (default: 8192)",
    )
    sched.add_argument(
        "--max-wait-ms",
        type=float,
        default=10.0,
        metavar="N",
        help="static: max wait for a full batch; dynamic: collection window, restarted at each arrival (10)",
    )
    sched.add_argument(
        "--kv-cache-memory-fraction",
        type=fraction,
        default=0.9,
        metavar="F",
        help="fraction of device memory (host RAM on CPU) that weights + KV cache may use; the rest of it "
        "after weights is the KV budget used for admission control (default: 0.9)",
    )
    sched.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="reuse the KV cache of shared prompt prefixes (LRU, 16-token blocks)",
    )
    parser.add_argument(
        "--threads", type=positive_int, default=None, metavar="N", help="CPU compute threads (default: all)"
    )
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"), help="log level")
