"""What the HTTP front knows about the served model (no heavy imports)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from inference_backend.runners.common.limits import Limits
from inference_backend.runners.common.metrics import Metrics

PREPARE_THREADS = 2  # JSON parsing, validation and tokenization run here, never on the event loop


@dataclass
class Loaded:
    """What a runner's loader returns once the model is ready."""

    engine: Any  # has submit(GenRequest) (raises QueueFull, EngineUnavailable), alive(), fatal, shutdown()
    tokenizer: Any
    max_model_len: int
    vocab_size: int = 0  # rows of the embedding table; prompt token ids must be below it (0: unchecked)


@dataclass
class State:
    served_model_name: str
    metrics: Metrics
    adapters: tuple[str, ...] = ()
    """LoRA adapters served beside the model, each under its name (--adapter, or loaded at run time)."""
    roots: dict[str, str] = field(default_factory=dict)
    """Where each served model's weights were loaded from (the model's directory, each adapter's): /v1/models
    ``root``, as vLLM reports it."""
    limits: Limits = field(default_factory=Limits)
    loaded: Loaded | None = None
    failed: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="prepare")
    )
