"""Loading an onnxruntime-genai format model: providers, threads, dtype check, which runtime, KV budget, scheduler."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import onnxruntime_genai as og
from transformers import AutoTokenizer

from inference_backend.runners.common.memory import kv_budget_tokens, kv_bytes_per_token
from inference_backend.runners.common.metrics import Metrics
from inference_backend.runners.common.prefix_cache import PrefixCache
from inference_backend.runners.common.server import Loaded, start_scheduler
from inference_backend.runners.onnx.backend import slice_kv
from inference_backend.runners.onnx.genai import GenaiBackend, read_config
from inference_backend.runners.onnx.genai_graph import last_position_head
from inference_backend.runners.onnx.gqa import GqaBackend, gqa_unfit, open_session
from inference_backend.runners.onnx.runner import PREFIX_CACHE_SHARE, device_memory, eos_token_ids, pick_providers

log = logging.getLogger(__name__)
# ONNX element types of the KV inputs (onnx.TensorProto): what the model computes in
_ELEM_TYPES = {1: "float32", 10: "float16", 16: "bfloat16"}
_ELEM_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2}


def io_dtype(model_file: Path, past_key: str) -> str:
    """The element type of the first past-key input (the graph only; external weights are not read)."""
    import onnx

    graph = onnx.load(str(model_file), load_external_data=False).graph
    for i in graph.input:
        if i.name == past_key:
            return _ELEM_TYPES.get(i.type.tensor_type.elem_type, "float32")
    raise ValueError(f"{model_file}: no input {past_key}; not a decoder with a KV cache")


RUNTIMES = {"onnxruntime": "onnxruntime directly (gqa.py)", "genai": "onnxruntime-genai's Generator (genai.py)"}


def pick_runtime(requested: str, device: str, model_file: Path, config: dict[str, Any]) -> str:
    """--genai-runtime: "onnxruntime" (gqa.py: continuous batching, prefix cache) on CPU for a decoder it can run,
    else "genai" (genai.py); asking for onnxruntime where it cannot run is an error that says why."""
    if requested == "genai":
        return "genai"
    why = "CUDA (onnxruntime directly runs on CPU only)" if device == "cuda" else gqa_unfit(model_file, config)
    if why is None:
        return "onnxruntime"
    if requested == "onnxruntime":
        raise ValueError(f"--genai-runtime onnxruntime: cannot run this model: {why}")
    log.info("genai's Generator runs this model: %s", why)
    return "genai"


def load_genai(args: Any, metrics: Metrics) -> Loaded:
    model_dir = Path(args.model)
    config = read_config(model_dir)
    decoder = config["model"]["decoder"]
    dtype = io_dtype(model_dir / decoder["filename"], decoder["inputs"]["past_key_names"] % 0)
    if args.dtype not in ("auto", dtype):
        raise ValueError(f"--dtype {args.dtype}: this onnxruntime-genai model computes in {dtype} (as it ships)")
    providers = pick_providers(args.providers)
    device = "cuda" if providers[0] == "CUDAExecutionProvider" else "cpu"
    runtime = pick_runtime(args.genai_runtime, device, model_dir / decoder["filename"], config)
    if args.enable_prefix_caching and runtime == "genai":
        log.warning(
            "--enable-prefix-caching: not available when genai's Generator runs the model (it cannot "
            "share KV across requests); serving without it"
        )
    cfg = og.Config(str(model_dir))
    cfg.clear_providers()  # genai's CPU is "no provider"; the model's own list may name CUDA
    if device == "cuda":
        cfg.append_provider("cuda")
    if args.threads:
        cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": args.threads}}}}))
    names = decoder["inputs"].get("attention_mask", "attention_mask"), decoder["outputs"].get("logits", "logits")
    head = last_position_head(model_dir / decoder["filename"], *names)
    if head is not None:  # the graph in memory; its weights still come from the model directory
        cfg.add_model_data(decoder["filename"], head)
    log.info("LM head: %s", "last position only" if head is not None else "every position (graph as it ships)")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    context = int(config["model"].get("context_length") or config["search"].get("max_length") or 2048)
    heads = int(decoder.get("num_key_value_heads") or decoder["num_attention_heads"])
    per_token = kv_bytes_per_token(
        int(decoder["num_hidden_layers"]), heads, int(decoder["head_size"]), _ELEM_SIZES[dtype]
    )
    weights = sum(f.stat().st_size for f in model_dir.iterdir() if f.suffix in (".onnx", ".data"))
    budget = kv_budget_tokens(device_memory(providers[0]), args.kv_cache_memory_fraction, weights, per_token)
    backend: GqaBackend | GenaiBackend
    if runtime == "onnxruntime":
        prefix = None
        if args.enable_prefix_caching:
            prefix = PrefixCache(int(budget * PREFIX_CACHE_SHARE), slice_kv, metrics=metrics)
            budget -= prefix.capacity
        threads = args.threads or int(decoder.get("session_options", {}).get("intra_op_num_threads", 0))
        session = open_session(model_dir, decoder["filename"], head, threads)
        backend = GqaBackend(session, decoder, prefix)
    else:
        backend = GenaiBackend(og.Model(cfg), config, context, device)
    max_len = min(args.max_model_len or context, context, budget)
    log.info(
        "onnxruntime-genai model (%s, %s, run by %s): KV budget %d tokens (%d bytes/token); max model len %d",
        dtype,
        device,
        RUNTIMES[runtime],
        budget,
        per_token,
        max_len,
    )
    eos = eos_token_ids(model_dir, tokenizer, config["model"].get("eos_token_id"))
    vocab = int(config["model"]["vocab_size"])
    return start_scheduler(
        backend,
        args,
        tokenizer,
        kv_budget=budget,
        max_model_len=max_len,
        eos_token_ids=eos,
        metrics=metrics,
        vocab_size=vocab,
    )
