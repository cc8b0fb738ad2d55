#!/usr/bin/env python3
"""Parse `vllm serve` args with vLLM's own parser, exactly as `vllm serve` does; print the result as JSON.

Run with the vLLM venv's python (hack/vllm-venv), no GPU and no model needed:

    VLLM_TARGET_DEVICE=cpu $IB_CACHE/venv-vllm-0.33.0/bin/python hack/vllm_parse_args.py \
        '["meta-llama/Llama-3.1-8B", "--max-num-seqs", "64"]'      # or the JSON list on stdin

The args are those after `vllm serve` (model as first positional or --model). The harness calls the
real entry point, vllm.entrypoints.cli.main.main(), with sys.argv = ["vllm", "serve", *args], having
replaced ServeSubcommand.cmd (the function `vllm serve` dispatches to after parsing and
ServeSubcommand.validate -> validate_parsed_serve_args) by a capture. So parsing, --config handling,
FlexibleArgumentParser quirks and validation are vLLM's own. Then, like ServeSubcommand.cmd, it
applies model_tag -> model, builds AsyncEngineArgs.from_cli_args(args) and runs the checks that need no
model or device: CacheConfig construction (block size, kv cache dtype, gpu memory utilization, prefix
caching, kv offloading), the quantization method (ModelConfig's list, minus the per-platform check)
and the speculative config (merged exactly as create_speculative_config does;
keys checked against SpeculativeConfig's fields, method against its Literal).

Batch mode: a JSON list of such lists gives one result line per list (plus "index"/"returncode"),
exit 0; vLLM is imported once.

Output: one line `@@VLLM_PARSE_ARGS@@ <json>` on stdout (vLLM may log around it):
  {"ok": true, "vllm_version": ..., "args": {...namespace...}, "engine_args": {...}, "checks": {...}}
  {"ok": false, "stage": "parse"|"validate"|"engine_args"|"check", "error": "..."}
Exit status: 0 ok, 2 parse error (argparse), 3 validation error, 4 engine-args/check error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import json
import os
import sys
import typing
from pathlib import PurePath
from typing import Any

MARK = "@@VLLM_PARSE_ARGS@@"


def jsonable(value: Any, depth: int = 0) -> Any:
    if depth > 8:
        return repr(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return jsonable(value.value, depth + 1)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [jsonable(v, depth + 1) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name, None), depth + 1) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        with contextlib.suppress(Exception):
            return jsonable(value.model_dump(), depth + 1)
    return repr(value)


class Done(Exception):
    def __init__(self, payload: dict[str, Any], code: int) -> None:
        super().__init__(payload.get("error", "ok"))
        self.payload = payload
        self.code = code


def emit(payload: dict[str, Any], code: int) -> typing.NoReturn:
    raise Done(payload, code)


def print_result(payload: dict[str, Any]) -> None:
    sys.stdout.flush()
    print(f"{MARK} {json.dumps(payload, sort_keys=True)}", flush=True)


def literal_choices(tp: Any) -> list[Any] | None:
    """Values of a Literal (possibly inside Optional/Union/Annotated), else None."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return list(typing.get_args(tp))
    if origin is typing.Annotated:
        return literal_choices(typing.get_args(tp)[0])
    out: list[Any] = []
    for arg in typing.get_args(tp):
        if (sub := literal_choices(arg)) is not None:
            out += sub
    return out or None


def check_speculative(engine_args: Any) -> dict[str, Any] | None:
    """The no-model part of EngineArgs.create_speculative_config (vllm/engine/arg_utils.py)."""
    from vllm.config import SpeculativeConfig

    spec = dict(engine_args.speculative_config or {})
    for flag, key, attr in (
        ("--spec-method", "method", "spec_method"),
        ("--spec-model", "model", "spec_model"),
        ("--spec-tokens", "num_speculative_tokens", "spec_tokens"),
    ):
        value = getattr(engine_args, attr, None)
        if value is None:
            continue
        if key in spec:
            raise ValueError(f"{flag} and --speculative-config['{key}'] are mutually exclusive")
        spec[key] = value
    if not spec:
        return None
    spec = {k.replace("-", "_"): v for k, v in spec.items()}
    fields = {f.name: f for f in dataclasses.fields(SpeculativeConfig)}
    unknown = sorted(set(spec) - set(fields))
    if unknown:
        known = sorted(fields)
        raise ValueError(f"speculative config: unknown keys {unknown}; SpeculativeConfig fields: {known}")
    hints = typing.get_type_hints(SpeculativeConfig, include_extras=True)
    methods = literal_choices(hints.get("method"))
    if "method" in spec and methods is not None and spec["method"] not in methods:
        raise ValueError(f"speculative config: method {spec['method']!r} not in {methods}")
    # Field constraints of SpeculativeConfig (vllm/config/speculative.py): gt=0 / ge=1
    for key in ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"):
        if key in spec and not (isinstance(spec[key], int) and spec[key] >= 1):
            raise ValueError(f"speculative config: {key} must be an int >= 1, got {spec[key]!r}")
    return {"config": spec, "methods": methods}


def check_cache(engine_args: Any) -> dict[str, Any]:
    """CacheConfig as EngineArgs.create_engine_config builds it, minus the model-derived fields."""
    from vllm.config import CacheConfig

    names = {f.name for f in dataclasses.fields(CacheConfig)}
    kwargs = {
        k: getattr(engine_args, k)
        for k in (
            "block_size",
            "gpu_memory_utilization",
            "kv_cache_memory_bytes",
            "num_gpu_blocks_override",
            "enable_prefix_caching",
            "prefix_caching_hash_algo",
            "kv_offloading_size",
            "kv_offloading_backend",
        )
        if k in names and hasattr(engine_args, k)
    }
    if "cache_dtype" in names and engine_args.kv_cache_dtype != "auto":
        kwargs["cache_dtype"] = engine_args.kv_cache_dtype
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return jsonable(CacheConfig(**kwargs))


def check_quantization(engine_args: Any) -> dict[str, Any] | None:
    """The no-model part of ModelConfig._verify_quantization (vllm/config/model.py)."""
    from vllm.model_executor.layers import quantization as me_quant

    method = engine_args.quantization
    if method is None:
        return None
    if method not in me_quant.QUANTIZATION_METHODS:
        raise ValueError(f"Unknown quantization method: {method}. Must be one of {me_quant.QUANTIZATION_METHODS}.")
    deprecated = method in me_quant.DEPRECATED_QUANTIZATION_METHODS
    if deprecated and not engine_args.allow_deprecated_quantization:
        raise ValueError(f"The quantization method {method} is deprecated: needs --allow-deprecated-quantization")
    return {"method": method, "deprecated": deprecated, "methods": list(me_quant.QUANTIZATION_METHODS)}


def check_parallel(engine_args: Any) -> dict[str, Any]:
    """ParallelConfig as EngineArgs.create_engine_config builds it from the parallel flags (vllm/config/parallel.py),
    with the multi-node checks create_engine_config runs before it (--nnodes divides the world size tensor x
    pipeline x data parallel; 0 <= --node-rank < --nnodes). Reports the world size, the GPUs each node runs
    (local_world_size) and the node's rank, which the LeaderWorkerSet's pods must match."""
    from vllm.config import ParallelConfig

    e = engine_args
    within_dp = e.pipeline_parallel_size * e.tensor_parallel_size * e.prefill_context_parallel_size
    world = e.data_parallel_size * within_dp
    if e.nnodes > 1:
        if world % e.nnodes:
            raise ValueError(f"--nnodes {e.nnodes} must evenly divide the total world size ({world})")
        if not 0 <= e.node_rank < e.nnodes:
            raise ValueError(f"--node-rank must be between 0 and {e.nnodes - 1}; got {e.node_rank}")
    p = ParallelConfig(
        pipeline_parallel_size=e.pipeline_parallel_size,
        tensor_parallel_size=e.tensor_parallel_size,
        master_addr=e.master_addr,
        master_port=e.master_port,
        nnodes=e.nnodes,
        node_rank=e.node_rank,
        distributed_executor_backend=e.distributed_executor_backend,
    )
    return {
        "world_size": p.world_size,
        "local_world_size": p.local_world_size,
        "nnodes": p.nnodes,
        "node_rank": p.node_rank,
        "node_rank_within_dp": p.node_rank_within_dp,
        "master_addr": p.master_addr,
        "master_port": p.master_port,
        "distributed_executor_backend": jsonable(p.distributed_executor_backend),
    }


def check_lora(engine_args: Any) -> dict[str, Any] | None:
    """LoRAConfig as EngineArgs.create_engine_config builds it when --enable-lora is set (vllm/config/lora.py: the
    max_lora_rank choices, max_cpu_loras >= max_loras), and the --lora-modules as the OpenAI server reads them
    (entrypoints/openai/cli_args.py LoRAParserAction -> LoRAModulePath)."""
    if not engine_args.enable_lora:
        return None
    from vllm.config import LoRAConfig

    names = {f.name for f in dataclasses.fields(LoRAConfig)}
    kwargs = {
        k: getattr(engine_args, k)
        for k in ("max_lora_rank", "max_loras", "max_cpu_loras", "fully_sharded_loras", "lora_dtype")
        if k in names and hasattr(engine_args, k)
    }
    config = LoRAConfig(**{k: v for k, v in kwargs.items() if v is not None})
    return {"config": jsonable(config)}


def run(argv: list[str]) -> tuple[dict[str, Any], int]:
    try:
        _run(argv)
    except Done as done:
        return done.payload, done.code
    raise AssertionError("unreachable")


def _run(argv: list[str]) -> None:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm
    import vllm.entrypoints.cli.main as cli_main
    from vllm.entrypoints.cli.serve import ServeSubcommand

    captured: dict[str, Any] = {}

    def capture(args: Any) -> None:
        captured["args"] = args

    ServeSubcommand.cmd = staticmethod(capture)  # type: ignore[method-assign]
    err = io.StringIO()
    sys.argv = ["vllm", "serve", *argv]
    try:
        with contextlib.redirect_stderr(err):
            cli_main.main()
    except SystemExit as e:
        if "args" not in captured:
            text = err.getvalue().strip()
            if "usage:" in text:  # drop vLLM's import-time warnings before argparse's message
                text = text[text.index("usage:") :]
            emit({"ok": False, "stage": "parse", "error": text}, 2)
        raise AssertionError(f"unexpected exit {e.code}") from e
    except Exception as e:  # validate_parsed_serve_args raises ValueError/TypeError/KeyError
        emit({"ok": False, "stage": "validate", "error": f"{type(e).__name__}: {e}"}, 3)
    if "args" not in captured:
        emit({"ok": False, "stage": "parse", "error": "serve was not dispatched:\n" + err.getvalue()}, 2)
    sys.stderr.write(err.getvalue())

    args = captured["args"]
    # what ServeSubcommand.cmd does first
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag
    ns = {k: v for k, v in vars(args).items() if k != "dispatch_function"}
    try:
        engine_args = vllm.AsyncEngineArgs.from_cli_args(args)
    except Exception as e:
        emit({"ok": False, "stage": "engine_args", "error": f"{type(e).__name__}: {e}"}, 4)
    checks: dict[str, Any] = {}
    try:
        checks["speculative"] = check_speculative(engine_args)
        checks["cache_config"] = check_cache(engine_args)
        checks["quantization"] = check_quantization(engine_args)
        checks["parallel"] = check_parallel(engine_args)
        checks["lora"] = check_lora(engine_args)
    except Exception as e:
        emit({"ok": False, "stage": "check", "error": f"{type(e).__name__}: {e}"}, 4)
    emit(
        {
            "ok": True,
            "vllm_version": vllm.__version__,
            "args": jsonable(ns),
            "engine_args": jsonable(engine_args),
            "checks": checks,
        },
        0,
    )


def main() -> None:
    raw = sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read()
    data = json.loads(raw)
    if isinstance(data, list) and all(isinstance(a, str) for a in data):
        payload, code = run(data)
        print_result(payload)
        sys.exit(code)
    is_argv = lambda x: isinstance(x, list) and all(isinstance(a, str) for a in x)  # noqa: E731
    if isinstance(data, list) and all(is_argv(x) for x in data):
        # batch mode (one import of vLLM for many arg lists): one result line per list, in order
        for i, argv in enumerate(data):
            payload, code = run(argv)
            print_result({**payload, "index": i, "returncode": code})
        sys.exit(0)
    print("expected a JSON list of strings (or a list of such lists)", file=sys.stderr)
    sys.exit(64)


if __name__ == "__main__":
    main()
