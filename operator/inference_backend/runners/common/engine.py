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


@dataclass
class TokenEvent:
    """New tokens for one request; finish_reason set on the last event ("stop", "length", "abort", "error").

    With "error", `error` says what failed for this request (only this one: the others go on).
    """

    token_ids: list[int]
    finish_reason: str | None = None
    error: str | None = None


@dataclass
class GenRequest:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    # Called from the engine thread; the HTTP front makes it thread-safe (call_soon_threadsafe).
    emit: Callable[[TokenEvent], None]
    arrival: float = field(default_factory=time.monotonic)
    cancelled: threading.Event = field(default_factory=threading.Event)


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
