#!/usr/bin/env python3
"""Parse and resolve `python -m sglang.launch_server` args with SGLang's own code; print the result as JSON.

Run with the SGLang venv's python (hack/sglang-venv), no GPU and no model needed:

    $IB_CACHE/venv-sglang-0.5.23/bin/python hack/sglang_parse_args.py \
        '["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "2"]'   # or the JSON on stdin

The args are those after `python -m sglang.launch_server` (or `sglang serve`). What runs is what
sglang/launch_server.py and Engine do before they touch a device, in order, each a stage:

  parse    load_plugins(); server_args.prepare_server_args(argv): SGLang's argparse parser
           (ServerArgs.add_cli_args: every field of arg_groups/fields/*.py plus the hand-registered
           ones), --config merging, ServerArgs.from_cli_args. argparse errors (unknown flag, bad
           choice, bad int) stop here.
  resolve  server_args.resolve_once(): the whole resolution pipeline (arg_groups/pipeline.py
           run_resolution_pipeline: deprecated-arg handling, defaults, model-specific adjustments,
           attention backend choice, memory settings, speculative decoding, kv-cache checks, ...),
           which raises on invalid combinations, as launch_server.run_server does.
  check    server_args.check_server_args() (arg_groups/validation_hook.py), as Engine does after
           resolving: parallel sizes vs nodes, served-model-name, LoRA, chunked prefill vs page size, ...

Two stand-ins make `resolve` and `check` run without a model or a GPU, and the result says when
they were used ("stand_ins"):
  * model: --model-path, --tokenizer-path and --speculative-draft-model-path that are not local
    directories are pointed, for resolve/check only, at a local directory holding only a
    config.json (Llama-3.1-8B's shape by default, or the case's "model_config"): resolution reads
    the model's config (architecture, heads, context length), never its weights or tokenizer.
    The hub is never asked (HF_HUB_OFFLINE=1).
  * device: with no --device, launch_server auto-detects the accelerator (get_device() raises on a
    machine without one); the harness resolves with device "cuda", which on a machine without a GPU
    takes SGLang's "GPU memory not known" branch (get_device_memory_capacity() -> None), so the
    memory-derived defaults (chunked_prefill_size, mem_fraction_static, cuda-graph batch sizes) are
    not the ones a real GPU would get. An explicit --device is kept.

Input: a JSON list of strings (one case), or a list of cases, each a list of strings or
{"args": [...], "model_config": {...}}. SGLang is imported once; each case runs in a forked child,
so one case's resolution (which sets environment variables and process-wide state) cannot leak
into the next.

Output: one line per case, `@@SGLANG_PARSE_ARGS@@ <json>` on stdout (SGLang logs on stderr):
  {"ok": true, "stage": "check", "sglang_version": ..., "args": {raw parsed fields},
   "resolved": {ServerArgs.resolved_dict()}, "stand_ins": {...}}
  {"ok": false, "stage": "parse"|"resolve"|"check", "error": "..."}
Batch results add "index" and "returncode". Exit status (single case): 0 ok, 2 parse error,
3 resolution error, 4 check error, 5 the child died; batch mode exits 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import io
import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path, PurePath
from typing import Any

MARK = "@@SGLANG_PARSE_ARGS@@"
CODES = {"parse": 2, "resolve": 3, "check": 4, "crash": 5}

# Llama-3.1-8B-Instruct's config.json (no weights, no tokenizer): what resolution reads of a model.
LLAMA_3_1_8B_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
MODEL_PATH_FIELDS = ("model_path", "tokenizer_path", "speculative_draft_model_path")


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
    with contextlib.suppress(Exception):
        import msgspec

        if isinstance(value, msgspec.Struct):
            return jsonable(msgspec.structs.asdict(value), depth + 1)
    return repr(value)


class Failed(Exception):
    def __init__(self, stage: str, error: str) -> None:
        super().__init__(error)
        self.stage = stage
        self.error = error


def argparse_error(text: str) -> str:
    """argparse's message without SGLang's very long usage text (and import-time warnings before it)."""
    lines = text.strip().splitlines()
    for i, line in enumerate(lines):
        if ": error:" in line:
            return "\n".join(lines[i:])
    return text.strip()[-4000:]


def model_dir(config: dict[str, Any], cache: dict[str, str]) -> str:
    key = json.dumps(config, sort_keys=True)
    if key not in cache:
        d = tempfile.mkdtemp(prefix="sglang-model-stand-in-")
        Path(d, "config.json").write_text(json.dumps(config, indent=1))
        cache[key] = d
    return cache[key]


def run_case(argv: list[str], model_config: dict[str, Any], dirs: dict[str, str]) -> dict[str, Any]:
    from importlib.metadata import version

    from sglang.srt.server_args import prepare_server_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            server_args = prepare_server_args(list(argv))
    except SystemExit as e:
        raise Failed("parse", argparse_error(err.getvalue()) or f"exit {e.code}") from e
    except Exception as e:  # from_cli_args / type parsers raising outside argparse
        raise Failed("parse", f"{type(e).__name__}: {e}") from e
    finally:
        sys.stderr.write(err.getvalue())
    raw = {f: getattr(server_args, f) for f in server_args.__struct_fields__}

    stand_ins: dict[str, Any] = {}
    for field in MODEL_PATH_FIELDS:
        path = getattr(server_args, field)
        if path is not None and not Path(path, "config.json").is_file():
            stand_in = model_dir(model_config, dirs)
            stand_ins[field] = {"given": path, "resolved_with": stand_in}
            setattr(server_args, field, stand_in)
    if server_args.device is None:
        stand_ins["device"] = {"given": None, "resolved_with": "cuda"}
        server_args.device = "cuda"

    try:
        server_args.resolve_once()
    except BaseException as e:
        sys.stderr.write(traceback.format_exc())
        raise Failed("resolve", f"{type(e).__name__}: {e}") from e
    try:
        server_args.check_server_args()
    except BaseException as e:
        sys.stderr.write(traceback.format_exc())
        raise Failed("check", f"{type(e).__name__}: {e}") from e
    return {
        "ok": True,
        "stage": "check",
        "sglang_version": version("sglang"),
        "args": jsonable(raw),
        "resolved": jsonable(server_args.resolved_dict()),
        "stand_ins": stand_ins,
    }


def run_in_child(case: Any, dirs: dict[str, str]) -> dict[str, Any]:
    """Run one case in a forked child (fresh process state, SGLang already imported)."""
    if isinstance(case, dict):
        argv, model_config = case["args"], case.get("model_config") or LLAMA_3_1_8B_CONFIG
    else:
        argv, model_config = case, LLAMA_3_1_8B_CONFIG
    model_dir(model_config, dirs)  # made in the parent, so every child reuses it
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        try:
            result = run_case(argv, model_config, dirs)
        except Failed as f:
            result = {"ok": False, "stage": f.stage, "error": f.error}
        except BaseException as e:
            result = {"ok": False, "stage": "crash", "error": f"{type(e).__name__}: {e}"}
        with os.fdopen(write_fd, "w") as out:
            out.write(json.dumps(result))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"ok": False, "stage": "crash", "error": f"child died (wait status {status})"}
    result: dict[str, Any] = json.loads(data)
    result["returncode"] = 0 if result["ok"] else CODES[result["stage"]]
    return result


def print_result(payload: dict[str, Any]) -> None:
    sys.stdout.flush()
    print(f"{MARK} {json.dumps(payload, sort_keys=True)}", flush=True)


def is_argv(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(a, str) for a in x)


def is_case(x: Any) -> bool:
    return is_argv(x) or (isinstance(x, dict) and is_argv(x.get("args")))


def main() -> None:
    raw = sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read()
    data = json.loads(raw)
    single = is_argv(data)
    if not single and not (isinstance(data, list) and all(is_case(x) for x in data)):
        print("expected a JSON list of strings (or a list of such lists / {'args': [...]} objects)", file=sys.stderr)
        sys.exit(64)
    # Before SGLang is imported: never reach for the hub, no usage reporting.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("DO_NOT_TRACK", "1")
    from sglang.srt.plugins import load_plugins

    load_plugins()  # as launch_server's __main__ does, before prepare_server_args
    # The heavy imports (server args, the resolution pipeline and what it pulls in), once, before forking.
    for module in ("sglang.srt.server_args", "sglang.srt.arg_groups.pipeline"):
        importlib.import_module(module)

    dirs: dict[str, str] = {}
    cases = [data] if single else data
    try:
        results = [run_in_child(case, dirs) for case in cases]
    finally:
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)
    if single:
        (result,) = results
        code = result.pop("returncode")
        print_result(result)
        sys.exit(code)
    for i, result in enumerate(results):
        print_result({**result, "index": i})
    sys.exit(0)


if __name__ == "__main__":
    main()
