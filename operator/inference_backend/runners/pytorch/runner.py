"""Loading the PyTorch runner: device/dtype choice, draft tokenizer check, KV budget, scheduler."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from inference_backend.runners.common import lora_updates
from inference_backend.runners.common.memory import host_memory_bytes, kv_budget_tokens, kv_bytes_per_token
from inference_backend.runners.common.metrics import Metrics
from inference_backend.runners.common.prefix_cache import PrefixCache
from inference_backend.runners.common.server import Loaded, start_scheduler
from inference_backend.runners.pytorch import fused as fusedmod
from inference_backend.runners.pytorch import kv as kvh
from inference_backend.runners.pytorch import packed
from inference_backend.runners.pytorch.adapters import AdapterError, attach
from inference_backend.runners.pytorch.backend import TorchBackend

log = logging.getLogger(__name__)
PROBE = "Hello, world! The quick brown fox jumps over the lazy dog. 12345 <|>"
PREFIX_CACHE_SHARE = 0.2  # of the KV budget, when prefix caching is on
# Prepacked weights: the plain matrices are kept for single-row steps when that runs at least this much faster...
SINGLE_ROW_GAIN = 1.05
SINGLE_ROW_MEMORY_SHARE = 0.1  # ...and they take at most this share of the device's memory
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


class IncompatibleDraft(ValueError):
    pass


def check_draft_tokenizer(target: str, draft: str) -> None:
    """Refuse a draft model whose tokenizer would map text to different token ids than the target's."""
    t, d = AutoTokenizer.from_pretrained(target), AutoTokenizer.from_pretrained(draft)
    tv, dv = AutoConfig.from_pretrained(target).vocab_size, AutoConfig.from_pretrained(draft).vocab_size
    problems = []
    if len(t) != len(d):
        problems.append(f"tokenizer sizes differ ({len(t)} vs {len(d)})")
    if tv != dv:
        problems.append(f"model vocab sizes differ ({tv} vs {dv})")
    if t.encode(PROBE) != d.encode(PROBE):
        problems.append(f"the probe string {PROBE!r} tokenizes differently")
    if problems:
        raise IncompatibleDraft(f"draft model {draft} is incompatible with {target}: " + "; ".join(problems))


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda but CUDA is not available")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)


def pick_dtype(choice: str, device: torch.device, config: Any) -> torch.dtype:
    if choice != "auto":
        return cast(torch.dtype, getattr(torch, choice))
    if device.type == "cpu":
        return torch.float32
    saved = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return saved if saved in (torch.float16, torch.bfloat16) else torch.float16


def _load_model(path: str, device: torch.device, dtype: torch.dtype) -> Any:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(device).eval()  # type: ignore[arg-type]


def _weight_bytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _kv_per_token(model: Any, dtype: torch.dtype) -> int:
    c = model.config.get_text_config()
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    elem = torch.tensor([], dtype=dtype).element_size()
    return kv_bytes_per_token(c.num_hidden_layers, heads, head_dim, elem)


def _fused(model: Any, pack: bool, memory: int) -> fusedmod.FusedLlama | None:
    why = fusedmod.ineligible(model)
    if why is not None:
        log.info("fused forward off, transformers' forward runs the model: %s", why)
        return None
    fused = fusedmod.FusedLlama(model, pack)
    if pack:
        speedup, plain = fused.single_row_speedup(), fused.plain_bytes()
        keep = speedup >= SINGLE_ROW_GAIN and plain <= SINGLE_ROW_MEMORY_SHARE * memory
        log.info(
            "single-row steps: plain matrices %.2fx the packed ones' speed here; %s",
            speedup,
            f"keeping them too ({plain / 2**20:.0f} MiB)" if keep else "packed only",
        )
        if not keep:
            fused.drop_plain()
    log.info("fused forward on (%d layers, %s)", len(fused.layers), "prepacked" if pack else "plain weights")
    return fused


def huge_pages(mode_file: Path = THP_MODE) -> str:
    """What --huge-pages does on this host (for the log): torch's allocator advises huge pages where asked to
    (THP_MEM_ALLOC_ENABLE, set by __main__ before torch was imported); the kernel grants them in modes madvise and
    always (in always, every large allocation gets them anyway)."""
    try:
        mode = next(w.strip("[]") for w in mode_file.read_text().split() if w.startswith("["))
    except (OSError, StopIteration):
        mode = "unknown"
    asked = os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"
    if not asked:
        return f"not requested (host transparent_hugepage: {mode})"
    if mode == "never":
        return "requested, but the host's transparent_hugepage is never: 4 KiB pages"
    return f"on (host transparent_hugepage: {mode})"


def load(args: Any, metrics: Metrics) -> Loaded:
    if args.threads:
        torch.set_num_threads(args.threads)
    log.info("huge pages for buffers of 2 MiB or more: %s", huge_pages())
    device = pick_device(args.device)
    config = AutoConfig.from_pretrained(args.model)
    dtype = pick_dtype(args.dtype, device, config)
    log.info("loading %s on %s as %s", args.model, device, dtype)
    model = _load_model(args.model, device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    draft = _load_model(args.draft_model, device, dtype) if args.draft_model else None
    adapters = list(getattr(args, "adapter", None) or ())
    if adapters and draft is not None:
        raise AdapterError("--adapter and --draft-model: speculative decoding with LoRA adapters is not supported")
    model = attach(model, adapters)

    total = torch.cuda.mem_get_info(device)[1] if device.type == "cuda" else host_memory_bytes()
    weights = _weight_bytes(model) + (_weight_bytes(draft) if draft is not None else 0)
    # LoRA layers wrap the Linear layers: neither the prepacked weights nor the fused forward know them (nor can
    # they, with adapters loaded at run time: common/lora_updates.py)
    lora = bool(adapters) or lora_updates.enabled()
    if lora:  # every row of a batch may run its own adapter
        metrics.enable_lora(args.max_batch_size)
    pack = args.prepack_weights and packed.available(device, dtype) and not lora
    cpu_fp32 = device.type == "cpu" and dtype == torch.float32  # where it was measured (CUDA: not verified)
    lean = args.fused_forward and draft is None and not lora and cpu_fp32
    fused = _fused(model, pack, total) if lean else None
    if fused is not None and fused.pack and fused.plain_bytes():
        weights += fused.plain_bytes()  # both forms are held
    per_token = _kv_per_token(model, dtype) + (_kv_per_token(draft, dtype) if draft is not None else 0)
    budget = kv_budget_tokens(total, args.kv_cache_memory_fraction, weights, per_token)
    prefix = None
    if args.enable_prefix_caching:
        prefix = PrefixCache(int(budget * PREFIX_CACHE_SHARE), kvh.slice_kv, metrics=metrics)
        budget -= prefix.capacity
    max_len = args.max_model_len or getattr(config.get_text_config(), "max_position_embeddings", 2048)
    if max_len > budget:
        log.warning("max model len %d exceeds the KV budget; lowering it to %d tokens", max_len, budget)
        max_len = budget
    log.info("KV budget: %d tokens (%d bytes/token); max model len %d", budget, per_token, max_len)
    if pack and fused is None:
        for m in (model, draft) if draft is not None else (model,):
            packed.prepack(m)

    backend = TorchBackend(
        model,
        device,
        metrics,
        prefix,
        draft,
        args.num_speculative_tokens,
        args.max_batch_size,
        fused=fused,
        adapters=tuple(name for name, _ in adapters),
    )
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        eos_ids.add(tokenizer.eos_token_id)
    vocab = int(model.get_input_embeddings().num_embeddings)
    return start_scheduler(
        backend,
        args,
        tokenizer,
        kv_budget=budget,
        max_model_len=max_len,
        eos_token_ids=eos_ids,
        metrics=metrics,
        vocab_size=vocab,
    )
