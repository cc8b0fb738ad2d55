"""The contract between the HTTP front and a model engine, shared by both runners (no heavy imports)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class SamplingParams:
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    # OpenAI's penalties, over this request's generated tokens (as vLLM): logit -= frequency * count + presence * seen
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    top_k: int = 0  # vLLM's: sample among the k likeliest tokens only; 0: all
    min_p: float = 0.0  # vLLM's: drop tokens less likely than min_p x the likeliest one's probability
    logprobs: int | None = None  # per token, the chosen token's logprob and this many top alternatives; None: none

    @property
    def plain_greedy(self) -> bool:
        """Greedy with nothing else to compute per token: backends may pick by one batched argmax (or the
        library's own), and speculative decoding may run."""
        return (
            self.temperature <= 0
            and self.presence_penalty == 0
            and self.frequency_penalty == 0
            and self.logprobs is None
        )


@dataclass
class TokenLogprob:
    """One generated token's log probability under the model's own distribution (the raw logits, before
    temperature, top-p and penalties: vLLM's default logprobs mode), and the `top` most likely (id, logprob)."""

    logprob: float
    top: list[tuple[int, float]]


@dataclass
class TokenEvent:
    """New tokens for one request; finish_reason set on the last event ("stop", "length", "abort", "error").

    With "error", `error` says what failed for this request (only this one: the others go on).
    """

    token_ids: list[int]
    finish_reason: str | None = None
    error: str | None = None
    logprobs: list[TokenLogprob] | None = None  # one per token id, when the request asked for logprobs


@dataclass
class GenRequest:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    # Called from the engine thread; the HTTP front hands the event to its request's Inbox (common/handoff.py).
    emit: Callable[[TokenEvent], None]
    arrival: float = field(default_factory=time.monotonic)
    cancelled: threading.Event = field(default_factory=threading.Event)
    adapter: str | None = None
    """The LoRA adapter the request named in its `model` field (None: the base model)."""


class Tokenizer(Protocol):
    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class Engine(Protocol):
    """What the HTTP front needs from a runner."""

    tokenizer: Any
    max_model_len: int

    def submit(self, req: GenRequest) -> None:
        """Queue a request; raises QueueFull when --max-queue requests are already waiting, EngineUnavailable
        when stopping or broken."""

    def cancel(self, req: GenRequest) -> None:
        """The client is gone or the deadline passed: drop the request (it ends with finish_reason "abort")."""

    def shutdown(self) -> None: ...


class QueueFull(Exception):
    pass


class EngineUnavailable(Exception):
    """The engine is stopping, or a device error made it unusable (then /health answers 503)."""
