"""Measure the engines at the real Llama-2-7B shape on this CPU, and write the rows the selection reads.

    flock /tmp/ib-heavy.lock nice -n 10 python -m bench.profiles_7b measure [--configs llamacpp-q8_0,...]
    python -m bench.profiles_7b write [--check]      (operator/inference_backend/engines/profiles_7b.py)

Configurations (one at a time; each model is written, served, measured and deleted before the next, unless a later
one in the list serves it too):

- llamacpp-q8_0, llamacpp-q4_k_m: llama-server (hack/build-llama-server) on a random GGUF written with the gguf
  package (bench/gguf_random.py), `-t THREADS -np 8 -c 5120` (8 slots of 640 tokens: 2.5 GiB of f16 KV);
- pytorch-bf16: our PyTorch runner, `--dtype bfloat16 --threads THREADS`, on bench_model's `llama2-7b` preset
  (random weights made directly in bfloat16 and written shard by shard: about 13.5 GB on disk, one shard in memory;
  the server then holds the 13.5 GB);
- onnx-int4, onnx-int8: our ONNX server (`--threads THREADS`, batching as the operator renders it on CPU:
  continuous) on an onnxruntime-genai model of the same preset built by genai's model builder (`-p int4|int8 -e cpu`)
  from a random checkpoint already quantized in the Olive format, the builder's address space capped at
  --max-build-memory-gib (bench/genai_random.py says why: from float weights the builder needs more than this
  machine's 24 GiB); the build's argv, seconds and peak RSS go into the row;
- onnx-int4-generator: the same model on the same server with `--genai-runtime genai --batching dynamic` (genai's
  Generator instead of onnxruntime directly, the CPU default, in its own best mode): a comparison, left out of the
  rows the selection reads.

Each is measured over HTTP (/v1/completions with token-id prompts, `ignore_eos`), after one warm-up request:
TTFT = the time of one request with a 512-token prompt and max_tokens 1; single-stream tokens/s = (GEN - 1) / (time
of an 8-token prompt with max_tokens GEN - the shorter of two with max_tokens 1, one before and one after);
tokens/s at concurrency 8 = 8 x GEN / the wall time of 8 such requests sent at once; peak RSS = VmHWM of the server
process. Results merge into bench/results/cpu-7b.json (so a partial run keeps what it measured), each row with its
machine, versions, date and argv.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ib_testkit import free_port
from ib_testkit.llama_server import llama_cpp_source, llama_server_bin

from bench import procstats
from bench.bench_model import BenchModel, llama_skeleton
from bench.profiles import write_or_check

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "cpu-7b.json"
MODULE = ROOT / "operator" / "inference_backend" / "engines" / "profiles_7b.py"
CONFIGS = {
    "llamacpp-q8_0": ("llamacpp", "q8_0"),
    "llamacpp-q4_k_m": ("llamacpp", "q4_k_m"),
    "pytorch-bf16": ("pytorch", "bfloat16"),
    "onnx-int4": ("onnxruntime", "int4"),
    "onnx-int8": ("onnxruntime", "int8"),
    "onnx-int4-generator": ("onnxruntime", "int4"),
}
# measured for comparison only, left out of the rows the selection reads: the server's flags they add to its default
VARIANTS = {"onnx-int4-generator": ["--genai-runtime", "genai", "--batching", "dynamic"]}
BUILD = "ib-build.json"  # in a genai model directory: how genai_random.build made it
PROMPT = 512
VOCAB = 32000


def _ids(n: int, seed: int, vocab: int = VOCAB) -> list[int]:
    rnd = random.Random(seed)
    return [1] + [rnd.randrange(min(300, vocab // 2), vocab) for _ in range(n - 1)]


def _post(url: str, prompt: list[int], max_tokens: int, timeout: float = 3600) -> tuple[float, int]:
    import httpx

    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    t = time.monotonic()
    r = httpx.post(url + "/v1/completions", json=body, timeout=timeout)
    r.raise_for_status()
    return time.monotonic() - t, int(r.json()["usage"]["completion_tokens"])


def measure_server(
    url: str, pid: int, gen: int, vocab: int = VOCAB, prompt: int = PROMPT, concurrencies: tuple[int, ...] = ()
) -> dict[str, Any]:
    _post(url, _ids(8, 0, vocab), 2)  # warm-up: pages the weights in
    ttft, _ = _post(url, _ids(prompt, 1, vocab), 1)
    one, _ = _post(url, _ids(8, 2, vocab), 1)
    full, n = _post(url, _ids(8, 3, vocab), gen)
    # the first short request after the long one may pay for a change of buffers (the ONNX server refits its KV
    # buffer to the new length): the shorter of two, one on each side of the long request, is the fixed cost
    one = min(one, _post(url, _ids(8, 4, vocab), 1)[0])
    jobs = [_ids(8, 10 + i, vocab) for i in range(8)]
    t = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        done = list(pool.map(lambda p: _post(url, p, gen), jobs))
    wall8 = time.monotonic() - t
    at = {}
    for c in concurrencies:  # more loads: c requests of GEN tokens sent at once, aggregate tokens/s
        jobs = [_ids(8, 100 * c + i, vocab) for i in range(c)]
        t = time.monotonic()
        with ThreadPoolExecutor(c) as pool:
            done_c = list(pool.map(lambda p: _post(url, p, gen), jobs))
        at[str(c)] = round(sum(k for _, k in done_c) / (time.monotonic() - t), 3)
    return {"tokensPerSecondAt": at} | {
        "ttftMs": round(ttft * 1000, 1),
        "promptTokens": prompt,
        "tokensPerSecond1": round((n - 1) / max(full - one, 1e-9), 3),
        "generated": gen,
        "tokensPerSecond8": round(sum(k for _, k in done) / wall8, 3),
        "peakRssBytes": procstats.tree_memory(pid)["vmHwmBytes"],
        "seconds": {"ttft": round(ttft, 2), "one": round(one, 2), "full": round(full, 2), "wall8": round(wall8, 2)},
    }


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 1800) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(log.read_text(errors="replace")[-3000:])


def _serve(
    argv: list[str], log: Path, env: dict[str, str], gen: int, small: bool, concurrencies: tuple[int, ...] = ()
) -> dict[str, Any]:
    port = int(argv[argv.index("--port") + 1])
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env})
    try:
        t = time.monotonic()
        _wait(url, proc, log)
        loaded = time.monotonic() - t
        small_runner = small and any(a.startswith("inference_backend.runners.") for a in argv)
        out = measure_server(url, proc.pid, gen, *((320, 128) if small_runner else (VOCAB, PROMPT)), concurrencies)
        out["loadSeconds"] = round(loaded, 1)
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _model(engine: str, weights: str, work: Path, small: bool, build_memory: int) -> tuple[Path, int, float]:
    """The model path, its parameters and weight bytes per parameter (``small``: a tiny shape, for a smoke test)."""
    from bench.bench_model import PRESETS
    from bench.gguf_random import LLAMA2_7B, SMALL, tensor_types

    if engine == "onnxruntime":
        return _genai_model(PRESETS["tiny" if small else "llama2-7b"], weights, work, build_memory)

    if engine == "llamacpp":
        shape = SMALL if small else LLAMA2_7B
        out = work / f"llama2-7b-{weights}.gguf"
        src = llama_cpp_source()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src / "gguf-py"), str(ROOT)])}
        if not out.exists():
            cmd = [sys.executable, "-m", "bench.gguf_random", str(out), "--type", weights, *(["--small"] * small)]
            subprocess.run(cmd, check=True, cwd=ROOT, env=env)
        params = shape.parameters()
        return out, params, _gguf_weight_bytes(tensor_types(shape, weights)) / params
    preset = PRESETS["tiny" if small else "llama2-7b"]
    out = work / f"{preset.name}-{weights}"
    if not (out / "model.safetensors.index.json").exists():
        bf16_checkpoint(preset, out)
    return out, preset.parameters(), 2.0


def _genai_model(m: BenchModel, weights: str, work: Path, build_memory: int) -> tuple[Path, int, float]:
    """genai_random's build of ``m`` in ``weights`` (int4/int8), reused when built before; bytes per parameter: the
    ONNX files' size (scales, zero points and the float32 embedding included) over the parameters."""
    from bench.genai_random import build, olive_checkpoint

    out = work / f"{m.name}-genai-{weights}"
    if not (out / BUILD).exists():
        ckpt = work / f"{m.name}-olive-{weights}"
        if not (ckpt / "model.safetensors.index.json").exists():
            olive_checkpoint(m, ckpt, int(weights.removeprefix("int")))
        info = build(ckpt, out, int(weights.removeprefix("int")), build_memory)
        info["argv"] = [Path(a).name if a.startswith(str(work)) else a for a in info["argv"]]
        (out / BUILD).write_text(json.dumps(info) + "\n")
        subprocess.run(["rm", "-rf", str(ckpt)], check=True)
    size = sum(f.stat().st_size for f in out.glob("model.onnx*"))
    return out, m.parameters(), size / m.parameters()


def bf16_checkpoint(m: BenchModel, out: Path, layers_per_shard: int = 4) -> None:
    """A random LlamaForCausalLM checkpoint in bfloat16 written shard by shard (memory: one shard, not the model),
    with bench_model's tokenizer and config."""
    import torch
    from safetensors.torch import save_file

    llama_skeleton(m, out)
    gen = torch.Generator().manual_seed(m.seed)
    kv = m.kv_heads * m.head_dim

    def rand(*shape: int) -> torch.Tensor:
        return torch.empty(shape, dtype=torch.bfloat16).normal_(0.0, m.init_range, generator=gen)

    groups: list[dict[str, torch.Tensor] | None] = [None] * (1 + -(-m.layers // layers_per_shard))
    weight_map: dict[str, str] = {}
    for g in range(len(groups)):
        if g == 0:
            t = {
                "model.embed_tokens.weight": rand(m.vocab, m.hidden),
                "lm_head.weight": rand(m.vocab, m.hidden),
                "model.norm.weight": torch.ones(m.hidden, dtype=torch.bfloat16),
            }
        else:
            t = {}
            for i in range((g - 1) * layers_per_shard, min(g * layers_per_shard, m.layers)):
                p = f"model.layers.{i}."
                t |= {
                    p + "self_attn.q_proj.weight": rand(m.hidden, m.hidden),
                    p + "self_attn.k_proj.weight": rand(kv, m.hidden),
                    p + "self_attn.v_proj.weight": rand(kv, m.hidden),
                    p + "self_attn.o_proj.weight": rand(m.hidden, m.hidden),
                    p + "mlp.gate_proj.weight": rand(m.intermediate, m.hidden),
                    p + "mlp.up_proj.weight": rand(m.intermediate, m.hidden),
                    p + "mlp.down_proj.weight": rand(m.hidden, m.intermediate),
                    p + "input_layernorm.weight": torch.ones(m.hidden, dtype=torch.bfloat16),
                    p + "post_attention_layernorm.weight": torch.ones(m.hidden, dtype=torch.bfloat16),
                }
        name = f"model-{g + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file(t, str(out / name), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(t, name)
        del t
    index = {"metadata": {"total_size": 2 * m.parameters()}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _gguf_weight_bytes(layout: list[tuple[str, Any, str]]) -> int:
    from bench.gguf_random import BLOCKS

    total = 0
    for _name, dims, qtype in layout:
        if qtype == "F32":
            total += 4 * dims[0]
        else:
            elements, size, _ = BLOCKS[qtype]
            total += dims[0] * dims[1] // elements * size
    return total


def _argv(engine: str, model: Path, threads: int, extra: list[str]) -> tuple[list[str], str]:
    port = str(free_port())
    if engine == "llamacpp":
        binary = llama_server_bin()
        res = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
        version = (res.stdout + res.stderr).strip()
        argv = [
            str(binary),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "-t",
            str(threads),
            "-np",
            "8",
            "-c",
            "5120",
            "--alias",
            "m",
        ]
        return argv, "llama-server " + version.splitlines()[0].removeprefix("version: ")
    if engine == "onnxruntime":
        import onnxruntime
        import onnxruntime_genai
        from inference_backend.engines import card

        onnx = card("onnxruntime")  # batching as the operator renders it on CPU for batching.strategy auto
        batching = onnx.auto_batching.get("cpu", onnx.batching[0])
        if "--batching" in extra:  # a variant's own batching replaces the default (one --batching on the line)
            i = extra.index("--batching")
            batching, extra = extra[i + 1], extra[:i] + extra[i + 2 :]
        argv = [
            sys.executable,
            "-m",
            "inference_backend.runners.onnx",
            "--model",
            str(model),
            "--served-model-name",
            "m",
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "--threads",
            str(threads),
            "--batching",
            batching,
            *extra,
        ]
        versions = f"onnxruntime {onnxruntime.__version__}, onnxruntime-genai {onnxruntime_genai.__version__}"
        return argv, f"inference-backend ONNX server, {versions}"
    import torch

    argv = [
        sys.executable,
        "-m",
        "inference_backend.runners.pytorch",
        "--model",
        str(model),
        "--served-model-name",
        "m",
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--dtype",
        "bfloat16",
        "--threads",
        str(threads),
    ]
    return argv, f"inference-backend pytorch runner, torch {torch.__version__}"


def _llama_bench(model: Path, threads: int) -> Any:
    """llama-bench's pp512 and tg16 on the same GGUF and threads (one repetition): the engine without HTTP."""
    argv = [
        str(llama_server_bin().with_name("llama-bench")),
        "-m",
        str(model),
        "-t",
        str(threads),
        "-p",
        str(PROMPT),
        "-n",
        "16",
        "-r",
        "1",
        "-o",
        "json",
    ]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=True)
        return {
            "argv": [model.name if a == str(model) else a for a in argv[1:]],
            "results": procstats.parse_llama_bench(res.stdout),
        }
    except (subprocess.SubprocessError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[-500:]}"}


def _machine() -> dict[str, Any]:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    mem = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
    return {"cpu": cpu, "cores": os.cpu_count(), "memTotalGiB": round(mem / 2**20, 1)}


def measure(
    configs: list[str],
    work: Path,
    threads: int,
    gen: int,
    keep: bool,
    out: Path,
    small: bool,
    build_memory: int = 17 * 2**30,
    concurrencies: tuple[int, ...] = (),
) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {"rows": {}}
    machine = _machine()
    work.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(configs):
        engine, weights = CONFIGS[name]
        t = time.monotonic()
        try:
            model, params, bpp = _model(engine, weights, work, small, build_memory)
        except Exception as exc:  # e.g. genai's model builder past its memory cap: say so, go on with the others
            row = {
                "error": f"{type(exc).__name__}: {str(exc)[-1500:]}",
                "engine": engine,
                "weights": weights,
                "modelSeconds": round(time.monotonic() - t, 1),
                "machine": machine,
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "command": "python -m bench.profiles_7b measure " + " ".join(sys.argv[2:]),
            }
            print(json.dumps(row), flush=True)
            result["rows"][name] = row
            out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
            continue
        made = time.monotonic() - t
        argv, version = _argv(engine, model, threads, VARIANTS.get(name, []))
        env = {"PYTHONPATH": str(ROOT / "operator")} if engine != "llamacpp" else {}
        print(f">> {name}: {' '.join(argv)}", flush=True)
        load = Path("/proc/loadavg").read_text().split()[0]
        try:
            row = _serve(argv, work / f"{name}.log", env, gen, small, concurrencies)
        except Exception as exc:  # keep the other configurations' rows; say what failed
            row = {"error": f"{type(exc).__name__}: {str(exc)[-1500:]}"}
        # other work on the machine slows the run: the 1-minute load average before and after it
        row["loadAverage"] = [float(load), float(Path("/proc/loadavg").read_text().split()[0])]
        row |= {
            "engine": engine,
            "weights": weights,
            "parameters": params,
            "bytesPerParam": round(bpp, 4),
            "threads": threads,
            "version": version,
            "modelSeconds": round(made, 1),
            "machine": machine,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "argv": [a if a != str(model) else model.name for a in argv],
        }
        if engine == "llamacpp" and "error" not in row:
            row["llamaBench"] = _llama_bench(model, threads)
        if (model / BUILD).exists():
            row["build"] = json.loads((model / BUILD).read_text())
        print(json.dumps(row), flush=True)
        row["command"] = "python -m bench.profiles_7b measure " + " ".join(sys.argv[2:])
        result["rows"][name] = row
        if all("machine" in r for r in result["rows"].values()):
            result.pop("machine", None)  # the file's machine: only for rows measured before each row named its own
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        if not keep and CONFIGS[name] not in [CONFIGS[c] for c in configs[i + 1 :]]:  # a later one may reuse it
            subprocess.run(["rm", "-rf", str(model)], check=True)
    return result


def derive(result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """engine -> the MeasuredRow fields of each measured configuration (rows with an error, and the comparison
    variants, are left out). Each row names the machine it ran on (rows from before that: the file's)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, r in sorted(result["rows"].items()):
        if "error" in r or name in VARIANTS:
            continue
        machine = r.get("machine", result.get("machine"))
        out.setdefault(r["engine"], []).append(
            {
                "weights": r["weights"],
                "parameters": r["parameters"],
                "bytes_per_param": r["bytesPerParam"],
                "cores": r["threads"],
                "prompt_tokens": r["promptTokens"],
                "ttft_ms": r["ttftMs"],
                "tokens_per_second_1": r["tokensPerSecond1"],
                "tokens_per_second_8": r["tokensPerSecond8"],
                "tokens_per_second_at": [
                    [int(c), v] for c, v in sorted(r.get("tokensPerSecondAt", {}).items(), key=lambda kv: int(kv[0]))
                ],
                "peak_rss_gib": round(r["peakRssBytes"] / 2**30, 2),
                "provenance": (
                    f"measured: {machine['cpu']}, {r['threads']} threads; random Llama-2-7B shape "
                    f"({r['parameters'] / 1e9:.2f}B, {r['weights']}); {r['version']}; {r['date'][:10]}; "
                    f"`{r['command']}` ({name}: {' '.join(r['argv'][1:])}); other work "
                    f"on the machine: 1-minute load average {r['loadAverage'][0]:g} before, "
                    f"{r['loadAverage'][1]:g} after"
                ),
            }
        )
    return out


def render_module(rows: dict[str, list[dict[str, Any]]]) -> str:
    text = MODULE.read_text()
    head, _, rest = text.partition("# fmt: off\n")
    _, _, tail = rest.partition("# fmt: on\n")
    body = "MEASURED_7B_CPU: dict[str, list[dict[str, Any]]] = " + (
        json.dumps(rows, indent=4, sort_keys=True) if rows else "{}"
    )
    head = head.removeprefix("# ruff: noqa: E501\n")
    long = any(len(line) > 120 for line in body.splitlines())
    return ("# ruff: noqa: E501\n" if long else "") + head + "# fmt: off\n" + body + "\n# fmt: on\n" + tail


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--configs", default=",".join(CONFIGS))
    m.add_argument("--work", type=Path, default=Path("/tmp/ib-profiles-7b"))
    m.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    m.add_argument("--gen", type=int, default=16, help="output tokens per request in the tokens/s steps")
    m.add_argument(
        "--concurrency",
        default="",
        help="more loads besides 1 and 8, e.g. 4,16: aggregate tokens/s of "
        "that many requests sent at once (the workload model's batch growth)",
    )
    m.add_argument("--keep", action="store_true", help="keep the models (else each is deleted after its run)")
    m.add_argument("--out", type=Path, default=RESULTS)
    m.add_argument("--small", action="store_true", help="tiny shapes instead of 7B: a smoke test of this script")
    m.add_argument(
        "--max-build-memory-gib", type=float, default=17.0, help="address-space cap of genai's model builder (onnx-*)"
    )
    w = sub.add_parser("write")
    w.add_argument("--check", action="store_true")
    a = p.parse_args()
    if a.cmd == "measure":
        memory = int(a.max_build_memory_gib * 2**30)
        extra = tuple(int(c) for c in a.concurrency.split(",") if c)
        measure(a.configs.split(","), a.work, a.threads, a.gen, a.keep, a.out, a.small, memory, extra)
        return 0
    text = render_module(derive(json.loads(RESULTS.read_text())))
    return write_or_check(MODULE, text, a.check, "python -m bench.profiles_7b write")


if __name__ == "__main__":
    sys.exit(main())
