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


def add(model: Any, name: str, path: str) -> Any:
    """``model`` with the PEFT adapter at ``path`` loaded under ``name`` (run-time loading): the PeftModel gains it,
    a plain model is wrapped by PEFT around it."""
    if not is_peft(model):
        return attach(model, [(name, path)])
    try:
        model.load_adapter(path, adapter_name=name, is_trainable=False)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise AdapterError(f"cannot load the adapter {name!r} from {path} ({type(exc).__name__}: {exc})") from exc
    log.info("LoRA adapter %s loaded from %s", name, path)
    return model.eval()


def remove(model: Any, name: str) -> Any:
    """``model`` without the adapter ``name``; the last one gone, PEFT's layers are taken out (peft ``unload``):
    the plain model again."""
    if len(model.peft_config) == 1:
        log.info("LoRA adapter %s unloaded (the last one: the plain model again)", name)
        return model.unload()
    model.delete_adapter(name)
    log.info("LoRA adapter %s unloaded", name)
    return model


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config")


def base_forward(model: Any) -> Any:
    """The Transformers model's own forward (PEFT's wrapper takes **kwargs, hiding its parameters)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.forward
