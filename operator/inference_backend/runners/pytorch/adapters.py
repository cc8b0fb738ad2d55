"""LoRA adapters on the PyTorch runner: PEFT (huggingface/peft) wraps the Transformers model once with every adapter
of --adapter loaded under its name; TorchBackend then names each row's adapter in every forward (PEFT's mixed-batch
``adapter_names``), so requests for different adapters and for the base model share one batch."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)


class AdapterError(ValueError):
    """An adapter that cannot be loaded: the message names it."""


def attach(model: Any, adapters: Sequence[tuple[str, str]]) -> Any:
    """``model`` with each (name, PEFT directory) loaded, for inference; the model itself when there are none."""
    if not adapters:
        return model
    try:
        from peft import PeftModel
    except ImportError as exc:  # pragma: no cover - the runner image installs it
        raise AdapterError("--adapter needs the peft package (pip install peft)") from exc
    (first, path), *rest = adapters
    try:
        wrapped = PeftModel.from_pretrained(model, path, adapter_name=first, is_trainable=False)
        for name, where in rest:
            wrapped.load_adapter(where, adapter_name=name, is_trainable=False)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise AdapterError(f"--adapter: cannot load the adapters ({type(exc).__name__}: {exc})") from exc
    log.info("LoRA adapters loaded: %s", ", ".join(name for name, _ in adapters))
    return wrapped.eval()


def base_forward(model: Any) -> Any:
    """The Transformers model's own forward (PEFT's wrapper takes **kwargs, hiding its parameters)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.forward
