"""Loading the ONNX Runtime server: providers, session, KV budget, scheduler."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from inference_backend.runners.common.memory import host_memory_bytes, kv_budget_tokens, kv_bytes_per_token
from inference_backend.runners.common.metrics import Metrics
from inference_backend.runners.common.prefix_cache import PrefixCache
from inference_backend.runners.common.server import Loaded, start_scheduler
from inference_backend.runners.onnx.backend import OnnxBackend, slice_kv

log = logging.getLogger(__name__)
PREFIX_CACHE_SHARE = 0.2
_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
_DTYPE_NAMES = {np.float32: "float32", np.float16: "float16"}


def pick_providers(requested: str) -> list[str]:
    """Requested providers in the given order, minus those this onnxruntime build lacks (logged)."""
    available = set(ort.get_available_providers())
    wanted = [p.strip() for p in requested.split(",") if p.strip()]
    chosen = [p for p in wanted if p in available]
    dropped = [p for p in wanted if p not in available]
    if dropped:
        log.warning("execution providers not available here, skipped: %s", ", ".join(dropped))
    if not chosen:
        raise ValueError(f"none of --providers {requested} is available (have: {sorted(available)})")
    log.info("execution providers: %s", ", ".join(chosen))
    return chosen


def eos_token_ids(model_dir: Path, tokenizer: Any, extra: list[int] | int | None = None) -> set[int]:
    """The ids that end a generation: generation_config.json's, the tokenizer's, and `extra` (genai_config's)."""
    ids: set[int] = set()
    for eos in (
        GenerationConfig.from_pretrained(model_dir).eos_token_id
        if (model_dir / "generation_config.json").exists()
        else None,
        extra,
    ):
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def device_memory(provider: str) -> int:
    if provider == "CUDAExecutionProvider":
        try:
            import pynvml

            pynvml.nvmlInit()
            return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total)
        except Exception:
            log.warning("NVML unavailable: sizing the KV budget from host memory")
    return host_memory_bytes()


def load(args: Any, metrics: Metrics) -> Loaded:
    model_dir = Path(args.model)
    from inference_backend.runners.onnx.genai import is_genai_dir

    if is_genai_dir(model_dir):
        from inference_backend.runners.onnx.genai_load import load_genai

        return load_genai(args, metrics)
    meta = json.loads((model_dir / "ib_onnx.json").read_text())
    providers = pick_providers(args.providers)
    opts = ort.SessionOptions()
    if args.threads:
        opts.intra_op_num_threads = args.threads
    session = ort.InferenceSession(str(model_dir / "model.onnx"), sess_options=opts, providers=providers)
    kv_type = {i.name: i.type for i in session.get_inputs()}["past_key_0"]
    kv_dtype = _ORT_TYPES[kv_type]
    if args.dtype not in ("auto", _DTYPE_NAMES[kv_dtype]):
        raise ValueError(f"--dtype {args.dtype}: this ONNX model was exported as {_DTYPE_NAMES[kv_dtype]}")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = AutoConfig.from_pretrained(model_dir)

    weights = sum(f.stat().st_size for f in model_dir.iterdir() if f.suffix in (".onnx", ".data", ".bin"))
    per_token = kv_bytes_per_token(meta["num_layers"], meta["kv_heads"], meta["head_dim"], np.dtype(kv_dtype).itemsize)
    total = device_memory(session.get_providers()[0])
    budget = kv_budget_tokens(total, args.kv_cache_memory_fraction, weights, per_token)
    prefix = None
    if args.enable_prefix_caching:
        prefix = PrefixCache(int(budget * PREFIX_CACHE_SHARE), slice_kv, metrics=metrics)
        budget -= prefix.capacity
    max_len = args.max_model_len or getattr(config.get_text_config(), "max_position_embeddings", 2048)
    max_len = min(max_len, budget)
    log.info("KV budget: %d tokens (%d bytes/token); max model len %d", budget, per_token, max_len)

    eos_ids = eos_token_ids(model_dir, tokenizer)
    backend = OnnxBackend(session, meta["num_layers"], meta["kv_heads"], meta["head_dim"], kv_dtype, prefix)
    vocab = int(config.get_text_config().vocab_size)
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
