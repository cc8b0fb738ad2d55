"""The outputs of a run: the combined JSON (with provenance), the table of every engine and concurrency, the
batch-1 decode bound per engine, and the plot."""

from __future__ import annotations

import contextlib
import json
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import procstats
from bench.engine_profiles import per_engine
from bench.engine_profiles.load import EXTRA_BODY
from bench.engine_profiles.machine import decode_bound
from bench.engine_profiles.steps import ROOT, Skip, git_commit, now

if TYPE_CHECKING:
    from bench.engine_profiles.run import Run

SCHEMA = "inference-backend.engine-profiles/v1"


def weights_per_token(run: Run, engine: str) -> int | None:
    """Bytes of weights read per decoded token at batch 1 in the format this engine serves (no embedding)."""
    m = run.model
    elem = {"float32": 4, "float16": 2, "bfloat16": 2}
    served = per_engine.served_dtype(engine, run.device, m.dtype)
    return (m.parameters() - m.vocab * m.hidden) * elem[served]


def bounds(run: Run) -> dict[str, Any] | None:
    bw = run.results.get("bandwidth")
    if not bw:
        return None
    out: dict[str, Any] = {"bandwidthBytesPerSecond": bw["bestBytesPerSecond"], "engines": {}}
    for engine, r in run.results.get("engines", {}).items():
        if not r.get("steps"):
            continue
        per_token = weights_per_token(run, engine)
        c1 = next((s for s in r.get("steps") or [] if s["target"] == 1), None)
        entry: dict[str, Any] = {
            "weightBytesPerToken": per_token,
            "boundTokensPerSecond": decode_bound(bw["bestBytesPerSecond"], per_token or 1),
        }
        if c1 and c1["itlMs"]["p50"]:
            entry["decodeTokensPerSecondC1"] = 1000 / c1["itlMs"]["p50"]
            entry["fractionOfBound"] = entry["decodeTokensPerSecondC1"] / entry["boundTokensPerSecond"]
        out["engines"][engine] = entry
    tg = next((t for t in (run.results.get("llamaBench") or {}).get("tests", []) if t["nPrompt"] == 0), None)
    if tg is not None and "llamacpp" in out["engines"]:
        bound = out["engines"]["llamacpp"]["boundTokensPerSecond"]
        out["engines"]["llama-bench"] = {
            "weightBytesPerToken": out["engines"]["llamacpp"]["weightBytesPerToken"],
            "boundTokensPerSecond": bound,
            "decodeTokensPerSecondC1": tg["tokensPerSecond"],
            "fractionOfBound": tg["tokensPerSecond"] / bound,
        }
    return out


def table(run: Run) -> list[dict[str, Any]]:
    rows = []
    for engine, r in run.results.get("engines", {}).items():
        kv = r.get("kv") or {}
        kv_cap = kv.get("allocatedBytes") or (kv.get("budget") or {}).get("budgetBytes")
        kv_used = kv.get("peakInUseBytes") or kv.get("peakReservedBytes")
        for s in r.get("steps", []):
            rows.append(
                {
                    "engine": engine,
                    "concurrency": s["target"],
                    "ttftP50Ms": s["ttftMs"]["p50"],
                    "ttftP95Ms": s["ttftMs"]["p95"],
                    "ttftP99Ms": s["ttftMs"]["p99"],
                    "itlP50Ms": s["itlMs"]["p50"],
                    "outputTokensPerSecond": s["outputTokensPerSecond"],
                    "requestsPerSecond": s["requestsPerSecond"],
                    "errorRate": s["errorRate"],
                    "completed": s["completed"],
                    "peakRssBytes": (r.get("peak") or {}).get("vmHwmBytes"),
                    "kvCapacityBytes": kv_cap,
                    "kvPeakUsedBytes": kv_used,
                }
            )
    return rows


def hardware(run: Run) -> dict[str, Any]:
    hw: dict[str, Any] = {
        "cpu": procstats.cpu_model(Path("/proc/cpuinfo").read_text()),
        "usableCores": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "memTotalBytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "loadAverageAtStart": run.results.get("loadAverageAtStart"),
        "loadAverageAtEnd": os.getloadavg(),
        "otherLoadDuringRun": run.other_load(),
    }
    if run.device == "cuda":
        with contextlib.suppress(Exception):
            import torch

            p = torch.cuda.get_device_properties(0)
            hw["gpu"] = {
                "name": p.name,
                "memoryBytes": p.total_memory,
                "sms": p.multi_processor_count,
                "capability": f"{p.major}.{p.minor}",
                "cuda": torch.version.cuda,
            }
    return hw


def write(run: Run) -> Path:
    combined = {
        "schema": SCHEMA,
        "label": run.label,
        "date": now(),
        "command": run.command,
        "preset": run.preset,
        "device": run.device,
        "hardware": hardware(run),
        "model": run.results.get("model"),
        "load": {
            "concurrency": list(run.load.concurrency),
            "promptTokens": run.load.prompt_tokens,
            "outputTokens": run.load.output_tokens,
            "requestsPerStep": run.load.requests,
            "secondsPerStep": run.load.seconds,
            "extraBody": EXTRA_BODY,
            "threads": run.threads,
        },
        "benchCli": {
            "pythonpath": run.load.bench_pythonpath,
            "commit": git_commit(Path(run.load.bench_pythonpath or ROOT / "operator").resolve().parent),
        },
        "greedyReference": {"tokens": run.greedy_ref, "source": "transformers generate(do_sample=False)"},
        "table": table(run),
        "llamaBench": run.results.get("llamaBench"),
        "bandwidth": run.results.get("bandwidth"),
        "decodeBound": bounds(run),
        "engines": {
            e: {k: v for k, v in r.items() if k not in ("bench", "logTail")} | {"raw": f"{run.label}/{e}.json"}
            for e, r in run.results.get("engines", {}).items()
        },
        "llamaBuild": run.results.get("llamaBuild"),
        "prerequisites": run.results.get("prerequisites"),
        "steps": run.log.steps,
    }
    path = run.out / f"{run.label}-profiles.json"
    path.write_text(json.dumps(combined, indent=2) + "\n")
    return path


def plot(run: Run) -> None:
    with run.log.step("plot"):
        if "plot" in run.skipped:
            raise Skip(run.skipped["plot"])
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        for engine, r in run.results.get("engines", {}).items():
            steps = r.get("steps") or []
            if not steps:
                continue
            c = [s["target"] for s in steps]
            ax1.plot(c, [s["outputTokensPerSecond"] for s in steps], marker="o", label=engine)
            ax2.plot(c, [s["ttftMs"]["p50"] for s in steps], marker="o", label=engine)
        for ax, title in ((ax1, "output tokens/s"), (ax2, "TTFT p50 (ms)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(list(run.load.concurrency), [str(c) for c in run.load.concurrency])
            ax.set_xlabel("concurrency")
            ax.set_title(title)
            ax.grid(True, alpha=0.3)
            if ax.lines:
                ax.legend()
        m = run.results.get("model") or {}
        fig.suptitle(
            f"{m.get('name', run.model.name)} ({(m.get('parameters') or 0) / 1e6:.0f}M params, "
            f"{run.model.dtype}) on {run.label}: {run.load.prompt_tokens} prompt / "
            f"{run.load.output_tokens} output tokens",
            fontsize=10,
        )
        fig.tight_layout()
        fig.savefig(run.out / f"{run.label}-profiles.png", dpi=110)
