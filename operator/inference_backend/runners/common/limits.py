"""Per-request limits of both servers, with their defaults (no heavy imports: the flag parsers use them).

Each limit is a flag (common/args.py) answered with an OpenAI-shaped error when exceeded (docs/runners.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_BODY_BYTES = 8 * 2**20
MAX_STOP_SEQUENCES = 16
MAX_STOP_CHARS = 256
MAX_MESSAGES = 1024
MAX_N = 16  # choices per request; each is a sequence of its own in the batch
MAX_LOGPROBS = 20  # top alternatives per token (vLLM's default --max-logprobs; OpenAI's chat top_logprobs bound)
REQUEST_TIMEOUT_S = 600.0
SHUTDOWN_TIMEOUT_S = 20.0
# OpenAI documents `seed` as an integer; vLLM takes 64-bit values. Both samplers use seed mod 2**64.
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1
# Temperatures below this are greedy, as in vLLM (dividing logits by ~0 overflows to inf, then NaN).
GREEDY_BELOW = 1e-5
# top_p below this keeps only the most probable token (its probability is at least 1 / vocab > 1e-6): greedy. The
# samplers compare in float32, where a top_p such as 5e-324 is 0 and keeps no token at all (found by schemathesis).
TOP_P_GREEDY_BELOW = 1e-6


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = MAX_BODY_BYTES
    max_stop_sequences: int = MAX_STOP_SEQUENCES
    max_stop_chars: int = MAX_STOP_CHARS
    max_messages: int = MAX_MESSAGES
    max_n: int = MAX_N
    max_logprobs: int = MAX_LOGPROBS
    request_timeout_s: float = REQUEST_TIMEOUT_S  # 0: none
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S

    @classmethod
    def from_args(cls, args: Any) -> Limits:
        return cls(
            max_body_bytes=args.max_body_bytes,
            max_stop_sequences=args.max_stop_sequences,
            max_stop_chars=args.max_stop_chars,
            max_messages=args.max_messages,
            max_n=args.max_n,
            max_logprobs=args.max_logprobs,
            request_timeout_s=args.request_timeout,
            shutdown_timeout_s=args.shutdown_timeout,
        )
