"""Tiny LoRA adapters for the tests, made with peft as a fine-tune saves them.

Used by tests/runners (the runners venv: torch, transformers, peft); heavy imports happen inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def make_adapter(base: Path, out: Path, seed: int, rank: int, modules: Sequence[str]) -> Path:
    """A random LoRA adapter of ``base`` (B not zero, so it changes the outputs) saved the way PEFT saves trained
    ones (adapter_config.json, adapter_model.safetensors); lora_alpha = 2 x rank."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=list(modules), init_lora_weights=False, task_type="CAUSAL_LM"
    )
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():  # large enough to move the greedy choices away from the base model's
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.3)
    peft_model.save_pretrained(out)
    return out
