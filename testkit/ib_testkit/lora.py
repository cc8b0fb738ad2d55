"""Tiny LoRA adapters for the tests: made with peft (as a fine-tune saves them), and converted to GGUF by llama.cpp's
own convert_lora_to_gguf.py from the pinned source (hack/build-llama-server unpacks it).

Used by tests/runners (the runners venv: torch, transformers, peft); heavy imports happen inside the functions.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ib_testkit.llama_server import llama_cpp_source

EOS_ID = 2
"""The end-of-sequence id of the tiny tokenizers (runners/tiny.py, bench/bench_model.py): ``</s>``."""


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


def convert_lora(adapter: Path, base: Path, out_file: Path, timeout: float = 600) -> Path:
    """llama.cpp's convert_lora_to_gguf.py (the pinned source) on a PEFT adapter of ``base`` (the base model's
    config.json is all it reads of it): an F32 GGUF adapter at ``out_file``. The script puts its own gguf-py and
    ``conversion`` package first; it runs with this interpreter (torch, transformers, safetensors)."""
    script = llama_cpp_source() / "convert_lora_to_gguf.py"
    cmd = [sys.executable, str(script), "--base", str(base), "--outtype", "f32", "--outfile", str(out_file)]
    res = subprocess.run([*cmd, str(adapter)], capture_output=True, text=True, timeout=timeout, check=False)
    if res.returncode != 0 or not out_file.is_file():
        raise RuntimeError(f"{' '.join(cmd)} {adapter} failed ({res.returncode}):\n{(res.stdout + res.stderr)[-4000:]}")
    return out_file


def peft_greedy(base: Path, adapters: Mapping[str, Path]) -> Callable[[str | None, list[int], int], list[int]]:
    """greedy(adapter or None, prompt ids, n) -> peft's own generate with that adapter set (the base model's with
    None): up to ``n`` tokens, stopping at EOS (excluded), as the engines stop."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    names = list(adapters)
    peft_model = PeftModel.from_pretrained(model, adapters[names[0]], adapter_name=names[0])
    for name in names[1:]:
        peft_model.load_adapter(adapters[name], adapter_name=name)
    peft_model.eval()

    def greedy(adapter: str | None, prompt: list[int], n: int) -> list[int]:
        ids = torch.tensor([prompt])
        kw = {"attention_mask": torch.ones_like(ids), "do_sample": False, "max_new_tokens": n}
        with torch.inference_mode():
            if adapter is None:
                with peft_model.disable_adapter():
                    out = peft_model.generate(input_ids=ids, eos_token_id=EOS_ID, **kw)
            else:
                peft_model.set_adapter(adapter)
                out = peft_model.generate(input_ids=ids, eos_token_id=EOS_ID, **kw)
        tokens = [int(t) for t in out[0, len(prompt) :].tolist()]
        return tokens[: tokens.index(EOS_ID)] if EOS_ID in tokens else tokens

    return greedy
