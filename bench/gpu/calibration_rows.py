"""Calibration rows from a lent GPU: vLLM and SGLang served and measured here, and the harness's results of our
runners and llama.cpp (bench/engine_profiles), written in the schema of tests/data/perf-calibration/README.md.

    python -m bench.gpu.calibration_rows --results OUT/h200.json --model DIR --out OUT/measured-gpu.csv
        [--engines vllm,sglang] [--concurrency 1,4,16] [--prompt 512] [--output 128]

bench/gpu/h200.sh runs it after the harness. vLLM and SGLang run when their Python packages are importable on the
device (`python -m vllm.entrypoints.cli.main serve DIR`, `python -m sglang.launch_server --model-path DIR`, the
engines' defaults plus host, port, dtype and served name); each is measured over streaming /v1/completions with
random token-id prompts of ``--prompt`` tokens and ``--output`` tokens (ignore_eos), ``c`` requests at a time for
two rounds per concurrency: TTFT p50/p95 (first chunk), TPOT p50 ((last - first chunk) / (tokens - 1)), output
tokens/s of the round. The rows name the GPU (nvidia-smi), the engine version and the command; copied to
tests/data/perf-calibration/measured-gpu.csv they are measured rows, which `make bench-model-fit` prefers to
published ones for the same engine and vendor (bench/perf_model.py). Not run yet: no GPU was lent when it was written.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ib_testkit import free_port
from ib_testkit.calibration import COLUMNS

SERVERS = {
    "vllm": lambda py, model, port: [
        py,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--served-model-name",
        "m",
    ],
    "sglang": lambda py, model, port: [
        py,
        "-m",
        "sglang.launch_server",
        "--model-path",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--served-model-name",
        "m",
    ],
}


def gpu_product() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip().splitlines()[0].replace(" ", "-") if out.strip() else "unknown"


def _stream(url: str, prompt: list[int], output: int) -> tuple[float, float, int]:
    """(TTFT s, TPOT s, tokens) of one streamed completion."""
    import httpx

    body = {"model": "m", "prompt": prompt, "max_tokens": output, "temperature": 0, "ignore_eos": True, "stream": True}
    t0 = time.monotonic()
    first = last = 0.0
    n = 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text") is not None:
                now = time.monotonic() - t0
                first = first or now
                last = now
                n += 1
    return first, (last - first) / max(n - 1, 1), n


def measure(url: str, concurrency: int, prompt: int, output: int, vocab: int, rounds: int = 2) -> dict[str, float]:
    ttft: list[float] = []
    tpot: list[float] = []
    rates = []
    rnd = random.Random(concurrency)
    for _ in range(rounds):
        jobs = [[rnd.randrange(300, vocab) for _ in range(prompt)] for _ in range(concurrency)]
        t = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            done = list(pool.map(lambda p: _stream(url, p, output), jobs))
        rates.append(sum(n for _, _, n in done) / (time.monotonic() - t))
        ttft += [a * 1000 for a, _, _ in done]
        tpot += [b * 1000 for _, b, _ in done]
    ttft.sort()
    return {
        "ttft_ms_p50": statistics.median(ttft),
        "ttft_ms_p95": ttft[min(len(ttft) - 1, int(0.95 * len(ttft)))],
        "tpot_ms_p50": statistics.median(tpot),
        "output_tokens_per_s": statistics.median(rates),
    }


def serve_and_measure(engine: str, model: Path, args: argparse.Namespace, log: Path) -> list[dict[str, Any]]:
    import httpx

    port = free_port()
    argv = SERVERS[engine](sys.executable, str(model), port)
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + args.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{engine} exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        version = importlib.import_module(engine).__version__
        out = []
        for c in args.concurrency:
            fig = measure(url, c, args.prompt, args.output, args.vocab)
            out.append(_row(engine, version, c, args, fig, " ".join(argv[1:])))
        return out
    finally:
        proc.terminate()
        proc.wait(120)


def harness_rows(results: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Our runners and llama-server as the harness measured them (bench/engine_profiles: concurrency steps)."""
    doc = json.loads(results.read_text())
    out = []
    for engine, res in doc.get("engines", {}).items():
        version = json.dumps(res.get("version", {}), sort_keys=True)[:120]
        for step in res.get("steps", []):
            if step.get("kind") != "concurrency" or step.get("errored"):
                continue
            fig = {
                "ttft_ms_p50": step["ttftMs"]["p50"],
                "ttft_ms_p95": step["ttftMs"]["p95"],
                "tpot_ms_p50": step["itlMs"]["p50"],
                "output_tokens_per_s": step["outputTokensPerSecond"],
            }
            out.append(_row(engine, version, int(step["target"]), args, fig, str(doc.get("command", ""))))
    return out


def _row(
    engine: str, version: str, c: int, args: argparse.Namespace, fig: dict[str, float], cmd: str
) -> dict[str, Any]:
    return {
        "id": f"measuredgpu-{engine}-{args.gpu.lower()}-c{c}",
        "engine": engine,
        "engine_version": version,
        "gpu": args.gpu,
        "gpu_count": 1,
        "tp": 1,
        "pp": 1,
        "replicas": 1,
        "model": args.model_id,
        "parameters": args.parameters,
        "active_parameters": "",
        "dtype": "bf16",
        "quantization": "",
        "kv_dtype": "",
        "concurrency": c,
        "request_rate": "",
        "prompt_tokens": args.prompt,
        "output_tokens": args.output,
        **{k: f"{v:.3f}" for k, v in fig.items()},
        "total_tokens_per_s": "",
        "source_url": "bench/gpu/h200.sh",
        "source_location": cmd[:300],
        "source_date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "notes": "measured on a lent GPU by bench/gpu/calibration_rows.py: random weights at the model's shape, "
        "token-id prompts, ignore_eos, two rounds per concurrency",
        "holdout": "false",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, help="the harness's JSON (our runners and llama-server)")
    ap.add_argument("--model", type=Path, required=True, help="the bf16 safetensors directory vLLM/SGLang serve")
    ap.add_argument("--model-id", default="meta-llama/Llama-2-7b-hf", help="the HF id whose shape the model has")
    ap.add_argument("--parameters", default="6.74e9")
    ap.add_argument("--engines", default="vllm,sglang")
    ap.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--start-timeout", type=float, default=900)
    ap.add_argument("--gpu", default=gpu_product())
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = harness_rows(args.results, args) if args.results and args.results.exists() else []
    for engine in (e for e in args.engines.split(",") if e):
        if importlib.util.find_spec(engine) is None:
            print(f">> {engine}: not installed on this machine; skipped")
            continue
        try:
            rows += serve_and_measure(engine, args.model, args, args.out.with_suffix(f".{engine}.log"))
        except Exception as exc:  # the other engine's rows still count
            print(f"!! {engine}: {type(exc).__name__}: {exc}")
    for i, r in enumerate(sorted(rows, key=lambda r: r["id"])):
        r["holdout"] = "true" if i % 4 == 1 else "false"
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(sorted(rows, key=lambda r: r["id"]))
    print(f">> {len(rows)} calibration rows in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
