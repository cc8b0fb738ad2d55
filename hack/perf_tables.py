"""Generate the aiconfigurator performance tables the workload model prefers for vLLM and SGLang on NVIDIA GPUs.

    hack/aiconfigurator-venv                                   (the cached venv, built when absent)
    $IB_CACHE/venv-aiconfigurator-0.12.0/bin/python hack/perf_tables.py generate [--out FILE] [--quick]
    .venv/bin/python hack/perf_tables.py write                 (operator/inference_backend/selection/perf_tables.py)

``generate`` runs inside the aiconfigurator venv (aiconfigurator 0.12.0 with aiconfigurator-core: NVIDIA Dynamo's
configurator, Apache-2.0). For every point of GRID it calls ``aiconfigurator.cli.api.cli_estimate`` in aggregated
(in-flight batching) mode, the programmatic form of ``aiconfigurator cli estimate --model-path M --system S
--backend B --isl I --osl O --batch-size C --tp-size T``, which estimates from the kernel measurements
(GEMM, attention, NCCL) the package ships per system and backend version ("SILICON" database mode). It writes the
raw results with their provenance (aiconfigurator version, each system's database version, the call) to
bench/results/aiconfigurator.json. No GPU is used.

``write`` runs in the project's venv (no aiconfigurator, no pandas) and turns that JSON into a compact generated
module: per (backend, system, model, dtype, TP) one row of TTFT and TPOT over the (batch, ISL) grid. The operator
interpolates it (selection/perf_tables.py, selection/workload.py); it never imports aiconfigurator, pandas,
pyarrow or scipy. ``tests/test_perf_tables.py`` regenerates a sample of points when the venv is present and
compares them with the module.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "aiconfigurator.json"
MODULE = ROOT / "operator" / "inference_backend" / "selection" / "perf_tables.py"
VERSION = "0.12.0"

# The grid. Models are aiconfigurator's bundled configs (model_configs/), named by their HF ids; TP widths are the
# ones each model takes on the systems where it fits; batch is the number of concurrent requests (aiconfigurator's
# agg batch size = the load's concurrency); OSL 256 for every point (TPOT follows the mean context, ISL + OSL / 2).
SYSTEMS = ("h100_sxm", "h200_sxm", "a100_sxm", "b200_sxm", "l40s", "rtx_pro_6000_server")
BACKENDS = ("vllm", "sglang")
SGLANG_SYSTEMS = ("h100_sxm", "h200_sxm", "a100_sxm")
"""SGLang on the three most common datacenter parts only (each point takes seconds on 2 cores); vLLM on all six."""
MODELS: dict[str, tuple[int, ...]] = {
    "meta-llama/Meta-Llama-3.1-8B": (1,),
    "Qwen/Qwen3-32B": (1, 2),
    "meta-llama/Meta-Llama-3.1-70B": (2, 4, 8),
}
# fp8 weights and KV (w8a8): the Llama models at one width each, on the systems with fp8 tensor cores
FP8: dict[str, tuple[int, ...]] = {"meta-llama/Meta-Llama-3.1-8B": (1,), "meta-llama/Meta-Llama-3.1-70B": (4,)}
FP8_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "l40s")
BATCHES = (1, 16, 64, 256)
ISLS = (128, 1024, 4096)
OSL = 256
QUICK = {
    "systems": ("h100_sxm",),
    "backends": ("vllm",),
    "models": {"meta-llama/Meta-Llama-3.1-8B": (1,)},
    "batches": (1, 32),
    "isls": (512,),
}


def _points(quick: bool) -> list[dict[str, Any]]:
    systems = QUICK["systems"] if quick else SYSTEMS
    backends = QUICK["backends"] if quick else BACKENDS
    models = QUICK["models"] if quick else MODELS
    batches = QUICK["batches"] if quick else BATCHES
    isls = QUICK["isls"] if quick else ISLS
    out = []
    for system in systems:  # type: ignore[union-attr]
        for backend in backends:  # type: ignore[union-attr]
            if backend == "sglang" and system not in SGLANG_SYSTEMS and not quick:
                continue
            configs = [(m, "bfloat16", tp) for m, tps in models.items() for tp in tps]  # type: ignore[union-attr]
            if system in FP8_SYSTEMS and backend == "vllm" and not quick:
                configs += [(m, "fp8", tp) for m, tps in FP8.items() for tp in tps]
            for model, dtype, tp in configs:
                for isl in isls:  # type: ignore[union-attr]
                    for batch in batches:  # type: ignore[union-attr]
                        out.append(
                            {
                                "backend": backend,
                                "system": system,
                                "model": model,
                                "dtype": dtype,
                                "tp": tp,
                                "isl": isl,
                                "osl": OSL,
                                "batch": batch,
                            }
                        )
    return out


def estimate_point(p: dict[str, Any]) -> dict[str, Any]:
    """One aiconfigurator estimate (inside its venv)."""
    from aiconfigurator.cli.api import cli_estimate

    kw: dict[str, Any] = {}
    if p["dtype"] == "fp8":
        kw = {"gemm_quant_mode": "fp8", "kvcache_quant_mode": "fp8"}
    try:
        r = cli_estimate(
            p["model"],
            p["system"],
            backend_name=p["backend"],
            isl=p["isl"],
            osl=p["osl"],
            batch_size=p["batch"],
            tp_size=p["tp"],
            **kw,
        )
    except Exception as exc:  # OOM or a combination the database lacks: recorded, not fatal
        return {**p, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return {
        **p,
        "ttft_ms": round(float(r.ttft), 3),
        "tpot_ms": round(float(r.tpot), 4),
        "tokens_per_s": round(float(r.raw["tokens/s"]), 2),
        "version": r.backend_version,
        "kv_queued": r.kv_cache_warning is not None,
    }


def generate(out: Path, quick: bool) -> int:
    import logging

    logging.disable(logging.WARNING)
    import aiconfigurator

    points = _points(quick)
    done: dict[str, dict[str, Any]] = {}
    if out.exists() and not quick:  # resume: keep what a previous run estimated
        for row in json.loads(out.read_text())["rows"]:
            done[_key(row)] = row
    start = time.monotonic()
    rows = []
    for i, p in enumerate(points):
        row = done.get(_key(p)) or estimate_point(p)
        rows.append(row)
        if (i + 1) % 25 == 0 or i + 1 == len(points):
            print(f">> {i + 1}/{len(points)} in {time.monotonic() - start:.0f}s", flush=True)
            _dump(out, rows, aiconfigurator.__version__, quick)
    return 0


def _key(p: dict[str, Any]) -> str:
    return "|".join(str(p[k]) for k in ("backend", "system", "model", "dtype", "tp", "isl", "osl", "batch"))


def _dump(out: Path, rows: list[dict[str, Any]], version: str, quick: bool) -> None:
    versions = sorted({(r["backend"], r["system"], r["version"]) for r in rows if "version" in r})
    doc = {
        "provenance": {
            "tool": f"aiconfigurator {version} (aiconfigurator-core {version}), SILICON database mode, agg "
            "(in-flight batching) estimate",
            "databases": [f"{b}/{s}: {v}" for b, s, v in versions],
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "command": "hack/perf_tables.py generate" + (" --quick" if quick else ""),
            "call": "aiconfigurator.cli.api.cli_estimate(model, system, backend_name=B, isl=I, osl=O, "
            "batch_size=C, tp_size=T[, gemm_quant_mode='fp8', kvcache_quant_mode='fp8'])",
        },
        "rows": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")


def render(doc: dict[str, Any]) -> str:
    """The generated module: one entry per (backend, system, model, dtype, TP), TTFT/TPOT over (ISL, batch)."""
    tables: dict[str, dict[str, Any]] = {}
    for r in doc["rows"]:
        if "error" in r:
            continue
        key = f"{r['backend']}|{r['system']}|{r['model']}|{r['dtype']}|{r['tp']}"
        t = tables.setdefault(key, {"version": r["version"], "points": []})
        t["points"].append([r["isl"], r["batch"], r["ttft_ms"], r["tpot_ms"], int(bool(r.get("kv_queued")))])
    for t in tables.values():
        t["points"].sort()
    prov = doc["provenance"]
    lines = [
        "# ruff: noqa: E501",
        '"""aiconfigurator tables: generated by hack/perf_tables.py, do not edit by hand.',
        "",
        f"Source: {prov['tool']}; generated {prov['date']} by `{prov['command']}`",
        f"({prov['call']}), raw results in bench/results/aiconfigurator.json.",
        "Databases (backend/system: version): " + ", ".join(prov["databases"]) + ".",
        "",
        "Each entry: (backend|system|HF model|dtype|TP) -> the backend database version and points",
        "[ISL, concurrency, TTFT ms, TPOT ms, KV-queued flag] at OSL " + str(OSL) + ".",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "# fmt: off",
        f"AICONFIGURATOR_VERSION = {json.dumps(VERSION)}",
        f"PROVENANCE = {json.dumps(prov['tool'])}",
        f"OSL = {OSL}",
        "",
        "TABLES: dict[str, dict[str, object]] = {",
    ]
    for key in sorted(tables):
        t = tables[key]
        pts = ", ".join("[" + ", ".join(_num(x) for x in p) + "]" for p in t["points"])
        lines.append(f"    {key!r}: {{'version': {t['version']!r}, 'points': [{pts}]}},")
    lines += ["}", "# fmt: on", ""]
    return "\n".join(lines)


def _num(x: float) -> str:
    if isinstance(x, int):
        return str(x)
    return f"{x:.4g}"


SILICON_MODELS = {
    "meta-llama/Llama-3.1-70B": 7.06e10,
    "meta-llama/Llama-3.1-8B-Instruct": 8.03e9,
    "nvidia/Llama-3.1-8B-Instruct-FP8": 8.03e9,
    "Qwen/Qwen3-32B": 3.28e10,
}
SILICON_GPUS = {
    "h100_sxm": "NVIDIA-H100-80GB-HBM3",
    "h200_sxm": "NVIDIA-H200",
    "b200_sxm": "NVIDIA-B200",
    "a100_sxm": "NVIDIA-A100-SXM4-80GB",
    "l40s": "NVIDIA-L40S",
}
SILICON_OUT = ROOT / "tests" / "data" / "perf-calibration" / "aiconfigurator-silicon.csv"


def silicon(src: Path, every: int) -> int:
    """Calibration rows from aiconfigurator's silicon_sample.csv: NVIDIA's end-to-end measurements of vLLM and
    SGLang (aggregated serving) for the dense models the tables cover, every ``every``-th row by id."""
    import csv

    from ib_testkit.calibration import COLUMNS  # the project venv's (generate runs in aiconfigurator's)

    rows = []
    with src.open(newline="") as f:
        for r in csv.DictReader(f):
            if (
                r["mode"] != "agg"
                or r["backend"] not in ("vllm", "sglang")
                or r["model_path"] not in SILICON_MODELS
                or r["system"] not in SILICON_GPUS
                or r["precision"] not in ("", "bf16", "fp8")
                or r["pp_size"] not in ("", "1")
                or r["attention_dp_size"] not in ("", "1")
            ):
                continue
            rows.append(r)
    rows.sort(key=lambda r: r["id"])
    rows = rows[::every]
    out = []
    for i, r in enumerate(rows):
        fp8 = r["precision"] == "fp8" or r["model_path"].endswith("FP8")
        tp = int(r["tp_size"])
        out.append(
            {
                "id": "aicsilicon-" + r["id"].lower().replace("_", "-"),
                "engine": r["backend"],
                "engine_version": r["backend_version"],
                "gpu": SILICON_GPUS[r["system"]],
                "gpu_count": tp,
                "tp": tp,
                "pp": 1,
                "replicas": 1,
                "model": r["model_path"],
                "parameters": f"{SILICON_MODELS[r['model_path']]:g}",
                "active_parameters": "",
                "dtype": "fp8" if fp8 else "bf16",
                "quantization": "fp8" if fp8 else "",
                "kv_dtype": "",
                "concurrency": r["batch_size"],
                "request_rate": "",
                "prompt_tokens": r["isl"],
                "output_tokens": r["osl"],
                "ttft_ms_p50": f"{float(r['silicon_ttft_ms']):.3f}",
                "ttft_ms_p95": "",
                "tpot_ms_p50": f"{float(r['silicon_tpot_ms']):.3f}",
                "output_tokens_per_s": "",
                "total_tokens_per_s": "",
                "source_url": "https://pypi.org/project/aiconfigurator-core/0.12.0/",
                "source_location": f"aiconfigurator_core/systems/silicon_sample.csv, id {r['id']}",
                "source_date": "2026-09",
                "notes": (
                    "NVIDIA's end-to-end measurement shipped with aiconfigurator-core 0.12.0 (Apache-2.0): "
                    f"{r['silicon_data_source'][:160]}; concurrency = the benchmark's batch size, fixed ISL/OSL; "
                    "the TTFT and TPOT columns are the file's silicon_ttft_ms and silicon_tpot_ms (their "
                    "statistic is not stated: taken as the median)"
                ),
                "holdout": "true" if i % 4 == 1 else "false",
            }
        )
    SILICON_OUT.parent.mkdir(parents=True, exist_ok=True)
    with SILICON_OUT.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(out)
    print(f"wrote {len(out)} rows to {SILICON_OUT.relative_to(ROOT)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--out", type=Path, default=RESULTS)
    g.add_argument("--quick", action="store_true", help="two points only (a smoke test of the venv)")
    si = sub.add_parser("silicon", help="calibration rows from aiconfigurator's silicon_sample.csv")
    si.add_argument("--src", type=Path, required=True, help="aiconfigurator_core/systems/silicon_sample.csv")
    si.add_argument("--every", type=int, default=4)
    w = sub.add_parser("write")
    w.add_argument("--check", action="store_true", help="fail when the module differs from the JSON's rendering")
    args = ap.parse_args()
    if args.cmd == "generate":
        return generate(args.out, args.quick)
    if args.cmd == "silicon":
        return silicon(args.src, args.every)
    text = render(json.loads(RESULTS.read_text()))
    if args.check:
        same = MODULE.exists() and MODULE.read_text() == text
        print("perf_tables.py is " + ("up to date" if same else "stale: run hack/perf_tables.py write"))
        return 0 if same else 1
    MODULE.write_text(text)
    print(f"wrote {MODULE.relative_to(ROOT)} ({len(text) / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
