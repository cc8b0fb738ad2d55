"""The workload model against measurements: accuracy per engine, held-out rows apart, rankings, a log-log plot.

    make bench-model                       (python -m bench.perf_model report)
    python -m bench.perf_model fit         (the per-engine/vendor efficiencies that fit the non-held-out rows)
    python -m bench.perf_model silicon     (tests/data/perf-calibration/aiconfigurator-silicon.csv from
                                            aiconfigurator's silicon_sample.csv, when its venv is present)

Rows: every CSV of tests/data/perf-calibration/ in the schema of its README (published.csv: published measurements
collected with their sources; aiconfigurator-silicon.csv: NVIDIA's end-to-end measurements of vLLM and SGLang that
aiconfigurator 0.12.0 ships). Each row becomes a placement (engine, SKU row, TP, dtype, KV dtype) and a workload
(concurrency or request rate per replica, prompt and output tokens), and the estimate comes from the operator's own
code path (selection/estimate.py), as `select` computes it. For each measured figure (TTFT p50, TPOT p50, output
tokens/s) the error is |log2(estimate / measured)|: 0.32 is 25%, 1 is 2x. Rows with ``holdout=true`` never enter a
fit (``fit`` skips them) and are reported apart. The plot (bench/results/perf-model.png) needs matplotlib, which
only this script imports.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from inference_backend.architectures import find, nearest_shape
from inference_backend.decision import Placement, ResolvedModel
from inference_backend.engines import card
from inference_backend.engines.card import FITTED
from inference_backend.facts import GPUFacts, HardwareClass
from inference_backend.facts.identify import INDEX
from inference_backend.memory import KV_DTYPE_BYTES, gpu_fit, kv_bytes_per_token, kv_heads_per_replica
from inference_backend.selection.estimate import Estimate, Replica, estimate
from inference_backend.selection.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "perf-calibration"
PLOT = ROOT / "bench" / "results" / "perf-model.png"
METRICS = (("ttft", "ttft_ms_p50"), ("tpot", "tpot_ms_p50"), ("tokens/s", "output_tokens_per_s"))
DTYPE = {
    "bf16": ("bfloat16", "none"),
    "fp16": ("float16", "none"),
    "fp32": ("float32", "none"),
    "fp8": ("fp8", "fp8"),
    "int8": ("int8", "int8"),
    "int4": ("int4", "awq"),
    "mxfp4": ("int4", "awq"),
}  # mxfp4: 4-bit weights, 16-bit compute on Hopper (w4a16 kernels)
GIB = 2**30
MEASURED_GPU = "measured-gpu.csv"
"""Rows bench/gpu/calibration_rows.py wrote on a lent GPU: where an engine/vendor has some, the fit uses only those."""
BURST = re.compile(
    r"sent at once|submitted at once|submitted together|request rate inf|one batch of|Offline: the harness", re.I
)
"""How a row's notes describe a burst: its ``concurrency`` requests sent together, once (an offline batch,
vLLM's benchmark_latency, a serving benchmark at request rate inf), which the model simulates step by step
(workload.burst) rather than taking as that many users in a closed loop."""
VARIANTS = {"pytorch": (re.compile(r"torch\.compile"), "torch.compile")}
"""engine -> (what a row's notes say, the card's variant): rows that measured another way of running the engine
than ours (gpt-fast's compiled PyTorch, not our eager runner) are rated with that variant's efficiencies
(Performance.variants) and reported as their own engine."""
IMPLIED_RELEASE = re.compile(r"implied release ([0-9][0-9A-Za-z.+-]*[0-9A-Za-z])")
"""How a row whose source names no release (an image tag such as ``latest``) says which release its date implies,
with the evidence, in ``notes``: the model rates it as that release; ``engine_version`` stays as the source gives it
(empty)."""
DP_ATTENTION = re.compile(r"--enable-dp-attention(?:.*?--dp(?:-size)?[ =]([0-9]+))?")
"""How a row's notes quote SGLang's data-parallel attention in the launch command its source gives: the attention
runs data-parallel over ``--dp`` groups of the replica's GPUs, and over all of them (``--dp`` = ``--tp``) without
one: SGLang before 0.4.4 set dp_size to tp_size when the flag was on (python/sglang/srt/server_args.py,
``if self.enable_dp_attention: self.dp_size = self.tp_size``; its DeepSeek docs: "Since v0.4.4, DP and TP attention
can be flexibly combined", docs/references/deepseek.md). The model then rates the step's attention per group
(workload.Device.attention_dp) and stores the KV heads of each request once, in its own group."""
DEFAULT_LENGTHS = (128, 200)
"""(prompt, output) tokens assumed where a row states only the other one (its notes say what the source gives)."""


def load_rows(paths: Iterable[Path] | None = None) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for path in sorted(paths or DATA.glob("*.csv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                row["file"] = path.name
                out.append(row)
    return out


@dataclass(frozen=True)
class Case:
    row: dict[str, str]
    engine: str
    placement: Placement
    model: ResolvedModel
    replica: Replica
    load: Workload

    @property
    def label(self) -> str:
        """The engine as reported: with its variant where the row measured one."""
        return f"{self.engine} ({self.replica.variant})" if self.replica.variant else self.engine

    @property
    def holdout(self) -> bool:
        return self.row.get("holdout", "").lower() == "true"


def _f(row: dict[str, str], key: str) -> float | None:
    v = (row.get(key) or "").strip()
    return float(v) if v else None


def _model(row: dict[str, str]) -> ResolvedModel:
    params = _f(row, "parameters") or 7e9
    active = _f(row, "active_parameters")
    uri = "hf://" + row["model"]
    shape, _ = find(uri, int(params), None)
    if shape is None or abs(math.log(shape.parameters / params)) > 0.15:
        shape = nearest_shape(int(active or params))
    dtype, quant = DTYPE.get(row.get("dtype") or "bf16", ("bfloat16", "none"))
    if (row.get("quantization") or "").startswith("gguf"):
        quant = row["quantization"].removeprefix("gguf-")
    if (row.get("quantization") or "") in PARTIAL_FP8:
        quant = row["quantization"]  # its own compute path where a card rates one (engines/vllm.py formats)
    return ResolvedModel(
        uri=uri,
        format="safetensors",
        parameters=int(params),
        dtype=dtype,
        quantization=quant,
        context_length=shape.context,
        layers=shape.layers,
        kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        shape_source="calibration",
        attention_heads=shape.attention_heads,
        kv_latent=shape.kv_latent,
        active_parameters=int(active) if active else None,
    )


def case(row: dict[str, str]) -> Case | None:
    """The placement and workload a calibration row describes (None: a row the model cannot place)."""
    engine = row["engine"]
    if engine not in {"vllm", "sglang", "tgi", "llamacpp", "onnxruntime", "pytorch"} or row["gpu"] == "cpu":
        return None
    sku, _ = INDEX.lookup(row["gpu"])
    if sku is None:
        return None
    tp = int(_f(row, "tp") or 1) * int(_f(row, "pp") or 1)
    replicas = int(_f(row, "replicas") or 1)
    gpu = GPUFacts(
        sku.names[0],
        sku.memory_mib,
        max(tp, 1),
        compute=sku.compute,
        vendor=sku.vendor,
        sku=sku.id,
        bandwidth_gbs=float(sku.bandwidth_gbs),
    )
    hw = HardwareClass(arch="amd64", cpu_millis=192000, memory_bytes=2048 * GIB, gpus=(gpu,))
    placement = Placement("gpu", hw, 1, gpu, tp)
    model = _model(row)
    kv_dtype = "fp8" if (row.get("kv_dtype") or "") == "fp8" else "float16"
    dp = _attention_dp(row, tp)
    # a request's KV heads (an MLA model's latent: one copy per TP rank of the group) live in its own group only
    heads = kv_heads_per_replica(model.kv_heads, tp // dp, model.kv_latent)
    kv_token = kv_bytes_per_token(model.layers, heads, model.head_dim, KV_DTYPE_BYTES[kv_dtype], model.kv_latent)
    from inference_backend.memory import QUANT_BYTES

    bpp = QUANT_BYTES.get(model.quantization, 2.0) if model.quantization != "none" else 2.0
    weights = model.parameters * (4.0 if model.dtype == "float32" else bpp)
    if (row.get("quantization") or "") in PARTIAL_FP8:
        weights = _partial_fp8_bytes(model)
    if not _f(row, "prompt_tokens") and not _f(row, "output_tokens"):
        return None  # a load without its lengths is not a workload the model can place
    # one length unstated (a "dozen-token" prompt, gpt-fast's default 200 new tokens): DEFAULT_LENGTHS stand in
    prompt = int(_f(row, "prompt_tokens") or DEFAULT_LENGTHS[0])
    output = max(int(_f(row, "output_tokens") or DEFAULT_LENGTHS[1]), 1)
    fit = gpu_fit(weights, 0.0, sku.memory_mib * 2**20, 0.9, tp)
    held = int(fit.kv_cache // max(kv_token * (prompt + output / 2), 1.0))  # steady state: prompt + half the output
    conc, rate = _f(row, "concurrency"), _f(row, "request_rate")
    load = Workload(
        prompt,
        output,
        concurrency=conc / replicas if conc else None,
        rate=rate / replicas if rate and not conc else None,
        burst=bool(conc) and bool(BURST.search(row.get("notes") or "")),
    )
    if load.concurrency is None and load.rate is None:
        return None
    slots = int(conc / replicas) if engine == "llamacpp" and conc else 0
    replica = Replica(
        engine,
        card(engine).profiles["gpu"],
        weights,
        kv_token,
        model.dtype,
        max(held, 1),
        slots,
        _version(row),
        _variant(engine, row.get("notes") or ""),
        dp,
    )
    return Case(row, engine, placement, model, replica, load)


PARTIAL_FP8 = {"fbgemm_fp8"}
"""Quantization methods whose checkpoints keep part of the weights in 16 bits: Meta's FP8 Llama 3.1 checkpoints
(config.json quantization_config.quant_method ``fbgemm_fp8``) quantize the feed-forward layers only, row-wise, and
not those of the first and last layers ("The Llama 3 Herd of Models", arXiv 2407.21783, section 6.2: no quantization
in the self-attention layers, nor in the first and last Transformer layers; the checkpoint's
``modules_to_not_convert`` lists every self_attn projection, layers 0 and 125's MLP and lm_head). Llama-3.1-405B-FP8
weighs about 483 GB, not 405 GB: on 8x H100 that halves the room left for the KV cache."""


def _partial_fp8_bytes(model: ResolvedModel) -> float:
    """Weight bytes of a PARTIAL_FP8 checkpoint: attention projections in 16 bits, the rest (feed-forward layers and
    embeddings, which the shape does not separate: about 1% of a 405B model) in FP8 but for the first and last
    layers' share, in 16 bits."""
    width = (model.attention_heads or 0) * model.head_dim
    attention = model.layers * (2 * width * width + 2 * width * model.kv_heads * model.head_dim)
    rest = max(model.parameters - attention, 0)
    edge = 2 / max(model.layers, 2)
    return 2.0 * attention + rest * ((1 - edge) * 1.0 + edge * 2.0)


def _attention_dp(row: dict[str, str], tp: int) -> int:
    """The groups a row's SGLang replica runs attention data-parallel over (DP_ATTENTION; 1: none)."""
    m = DP_ATTENTION.search(row.get("notes") or "") if row["engine"] == "sglang" else None
    if m is None:
        return 1
    dp = int(m.group(1) or tp)
    return dp if dp > 0 and tp % dp == 0 else 1


def _version(row: dict[str, str]) -> str:
    """The release the row measured: as its source states it, else the one its notes say its date implies."""
    implied = IMPLIED_RELEASE.search(row.get("notes") or "")
    return row.get("engine_version") or (implied.group(1) if implied else "")


def _variant(engine: str, notes: str) -> str:
    pattern, name = VARIANTS.get(engine, (None, ""))
    return name if pattern is not None and pattern.search(notes) else ""


def errors(c: Case) -> dict[str, tuple[float, float]]:
    """metric -> (estimate, measured) for each figure the row has."""
    e: Estimate = estimate(c.replica, c.placement, c.model, c.load)
    got = {"ttft": e.ttft_ms, "tpot": e.tpot_ms, "tokens/s": e.tokens_per_second}
    out = {}
    for name, col in METRICS:
        m = _f(c.row, col)
        if m and m > 0 and math.isfinite(got[name]) and got[name] > 0:
            out[name] = (got[name], m)
    return out


def log2err(pair: tuple[float, float]) -> float:
    return abs(math.log2(pair[0] / pair[1]))


def summary(cases: list[Case]) -> dict[str, Any]:
    by_engine: dict[str, list[float]] = defaultdict(list)
    by_metric: dict[str, list[float]] = defaultdict(list)
    allv: list[float] = []
    for c in cases:
        for metric, pair in errors(c).items():
            v = log2err(pair)
            by_engine[c.label].append(v)
            by_metric[metric].append(v)
            allv.append(v)
    return {"engine": by_engine, "metric": by_metric, "all": allv}


def _line(name: str, vals: list[float]) -> str:
    if not vals:
        return f"  {name:<14} -"
    within = sum(v <= 1 for v in vals) / len(vals)
    return (
        f"  {name:<14} n={len(vals):<4} median |log2| {statistics.median(vals):.2f}  worst {max(vals):.2f}  "
        f"within 2x {within:.0%}"
    )


TIE = 0.05
"""Pairs whose measured tokens/s differ by less than this (natural log, about 5%) are ties and agree whichever way
the estimate orders them: the spread one configuration shows between repeats (llama-bench's own +- in the
llmgpubench rows reaches 2-4% of the prompt rate; a serving benchmark's sample of requests, a host's clocks and
its CPU move a figure by as much), so such a measured order is not a ranking the model could be held to.
`make bench-model` counts and prints them apart."""


@dataclass(frozen=True)
class Ranking:
    agree: int
    """Pairs the estimate orders as measured, ties included."""
    total: int
    bad: list[str]
    """The disagreeing pairs, described."""
    ties: list[str]
    """The pairs within TIE measured, described."""
    unjudgeable: list[str] = field(default_factory=list)
    """Pairs left out of ``agree`` and ``total``: one side is a self-contradictory row (``contradictions``)."""


def _work(row: dict[str, str]) -> tuple[float, float, float] | None:
    """(parameters a token runs through, prompt tokens, output tokens) of a row, for ``contradictions``; an unstated
    prompt is -1 (equal only to another unstated one: the same harness's default)."""
    params, output = _f(row, "active_parameters") or _f(row, "parameters"), _f(row, "output_tokens")
    return (params, _f(row, "prompt_tokens") or -1.0, output) if params and output else None


def _less_work(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """Whether a request of shape ``a`` asks no more work per output token than one of ``b``, and less of some:
    parameters no more; prompt no longer (prefill), nor prompt + output (the context each decode step reads), nor
    prompt per output token (the prefill each output token carries)."""
    (pa, ia, oa), (pb, ib, ob) = a, b
    if (ia < 0) != (ib < 0):
        return False
    return pa <= pb and ia <= ib and ia + oa <= ib + ob and ia * ob <= ib * oa and a != b


def contradictions(rows: list[dict[str, str]]) -> dict[str, str]:
    """Rows whose source contradicts itself, for the rankings only (the accuracy figures keep every row): within
    one source (a results file, or the folder of a set published one file per run), engine and release, GPU and
    count, TP, dtype and quantization, and load (concurrency or request rate), a row that asks less work per output
    token than another (``_less_work``: a smaller model, or a shorter prompt and context) but measured fewer output
    tokens/s by more than TIE. No model in which more work takes no less time can place both, so a ranking pair
    involving it does not say which side is faster. Per-request fixed costs (HTTP, tokenisation: milliseconds) are
    taken as small against a request's decode (seconds). row id -> the row it contradicts, described."""
    groups: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        if _f(r, "output_tokens_per_s") and _work(r):
            where = (r.get("source_url") or "").rsplit("/", 1)[0]
            keys = ("engine", "engine_version", "gpu", "gpu_count", "tp", "dtype", "quantization")
            load = ("concurrency", "request_rate")
            groups[(r["file"], where, *(r.get(k) or "" for k in keys + load))].append(r)
    found: dict[str, str] = {}
    for items in groups.values():
        for a in items:
            for b in items:
                wa, wb = _work(a), _work(b)
                assert wa is not None and wb is not None
                ta, tb = float(a["output_tokens_per_s"]), float(b["output_tokens_per_s"])
                if _less_work(wa, wb) and math.log(tb / ta) >= TIE and a["id"] not in found:
                    found[a["id"]] = (
                        f"row {a['id']} ({wa[0]:.3g} parameters, {wa[1]:.0f}+{wa[2]:.0f} tokens: {ta:.4g} tokens/s) "
                        f"vs row {b['id']} ({wb[0]:.3g}, {wb[1]:.0f}+{wb[2]:.0f}: {tb:.4g})"
                    )
    return found


def rankings(cases: list[Case], involving: tuple[str, ...] = ()) -> Ranking:
    """Pairs of rows on the same hardware, model and load that differ in engine (or in GPU for the same engine):
    whether the estimate orders their tokens/s as the measurement does (ties within TIE measured agree)."""
    groups: dict[tuple[str, ...], list[tuple[Case, float, float]]] = defaultdict(list)
    for c in cases:
        pair = errors(c).get("tokens/s")
        if pair is None:
            continue
        r = c.row
        load = (
            r["model"],
            r["tp"],
            r["concurrency"],
            r["request_rate"],
            r["prompt_tokens"],
            r["output_tokens"],
            r["dtype"],
            r["file"],
        )
        groups[("engine", r["gpu"], *load)].append((c, *pair))
        groups[("gpu", r["engine"], *load)].append((c, *pair))
    agree = total = 0
    bad: list[str] = []
    ties: list[str] = []
    unjudgeable: list[str] = []
    odd = contradictions([c.row for c in cases])
    for key, items in groups.items():
        for i, (a, ea, ma) in enumerate(items):
            for b, eb, mb in items[i + 1 :]:
                if (key[0] == "engine" and a.engine == b.engine) or (key[0] == "gpu" and a.row["gpu"] == b.row["gpu"]):
                    continue
                sides = {a.engine, b.engine, a.row["gpu"], b.row["gpu"]}
                if involving and not sides & set(involving):
                    continue
                what = f"{a.row['id']} vs {b.row['id']}: measured {ma:.4g} / {mb:.4g}, estimated {ea:.4g} / {eb:.4g}"
                if a.row["id"] in odd or b.row["id"] in odd:
                    why = odd.get(a.row["id"]) or odd[b.row["id"]]
                    unjudgeable.append(f"{what} (source contradicts itself: {why})")
                    continue
                total += 1
                if abs(math.log(ma / mb)) < TIE:
                    agree += 1
                    ties.append(what)
                elif (ea > eb) == (ma > mb):
                    agree += 1
                else:
                    bad.append(what)
    return Ranking(agree, total, bad, ties, unjudgeable)


PLAN_ROW = "sglang060-vllm-h100x4-llama31-70b-sharegpt-offline"
"""Llama-3.1-70B bf16 on 4x H100, vLLM 0.6.0 saturated (SGLang's v0.6.0 benchmark, 5,000 ShareGPT prompts at once)."""


def plan_check() -> tuple[int, int, str]:
    """(GPUs the plan takes, GPUs the published throughput implies, the plan's reason for its replicas) for
    a service asking ten times PLAN_ROW's throughput from Llama-3.1-70B bf16 on H100s (ShareGPT's prompts average
    about 220 tokens; the row states only the output length)."""
    from ib_testkit.factories import MODELS, cluster, node, spec
    from inference_backend.selection import select

    row = next(r for r in load_rows() if r["id"] == PLAN_ROW)
    published = float(row["output_tokens_per_s"])
    objectives = {
        "tokensPerSecond": int(10 * published),
        "promptTokens": 220,
        "outputTokens": round(float(row["output_tokens"])),
    }
    s = spec(model={"modelRef": "llama-3-1-70b"}, backend="vllm", replicas=1, objectives=objectives)
    d = select(s, cluster(node("h100-a", "h100", 8, cpu="192", memory="1900Gi")), MODELS)
    assert d.placement is not None and d.plan is not None
    gpus = d.placement.gpus_per_replica * d.plan.replicas
    why = next((r for r in d.reasons if r.startswith("the objectives need")), "")
    return gpus, 10 * int(row["tp"]), why


def report(plot: bool = True) -> int:
    rows = load_rows()
    cases = [c for r in rows if (c := case(r)) is not None]
    print(f"{len(rows)} calibration rows ({', '.join(sorted({r['file'] for r in rows}))}); {len(cases)} placed")
    for label, subset in (
        ("fitted rows (holdout=false)", [c for c in cases if not c.holdout]),
        ("held-out rows (holdout=true)", [c for c in cases if c.holdout]),
    ):
        s = summary(subset)
        print(f"{label}: {len(subset)} rows")
        for engine in sorted(s["engine"]):
            print(_line(engine, s["engine"][engine]))
        for metric in ("ttft", "tpot", "tokens/s"):
            print(_line(metric, s["metric"][metric]))
        print(_line("all", s["all"]))
    r = rankings(cases)
    print(
        f"rankings (same hardware, model and load; engines against each other and GPUs against each other): "
        f"{r.agree}/{r.total} pairs agree, {len(r.ties)} of them ties (measured within {TIE:.0%}: agree either way); "
        f"{len(r.unjudgeable)} more unjudgeable (a side its own source contradicts: contradictions)"
    )
    for side in ("AMD_Instinct_MI300X_OAM", "tgi"):
        r2 = rankings(cases, involving=(side,))
        print(f"  pairs involving {side}: {r2.agree}/{r2.total} agree ({len(r2.ties)} ties)")
    for b in r.bad:
        print("  disagrees: " + b)
    for t in r.ties:
        print("  tie: " + t)
    for u in r.unjudgeable:
        print("  unjudgeable: " + u)
    gpus, implied, _ = plan_check()
    print(
        f"Llama-3.1-70B bf16 on H100s at 10x {PLAN_ROW}'s throughput: the plan takes {gpus} GPUs, the published "
        f"throughput implies {implied} ({max(gpus, implied) / min(gpus, implied):.2f}x; limit 1.5x)"
    )
    if plot:
        _plot(cases)
    return 0


def _plot(cases: list[Case]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(7, 7))
    marks = {"ttft": "o", "tpot": "s", "tokens/s": "^"}
    colors = {
        "vllm": "C0",
        "sglang": "C1",
        "tgi": "C2",
        "llamacpp": "C3",
        "onnxruntime": "C4",
        "pytorch": "C5",
        "pytorch (torch.compile)": "C6",
    }
    for c in cases:
        for metric, (est, meas) in errors(c).items():
            color = colors.get(c.label, "k")
            style = {"facecolors": "none", "edgecolors": color} if c.holdout else {"color": color}
            ax.scatter(meas, est, marker=marks[metric], s=18, alpha=0.8, **style)
    lo, hi = 1e-1, 1e6
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.plot([lo, hi], [2 * lo, 2 * hi], "k:", lw=0.6)
    ax.plot([lo, hi], [lo / 2, hi / 2], "k:", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (ms for TTFT o / TPOT s; tokens/s ^)")
    ax.set_ylabel("estimated")
    ax.set_title("workload model vs calibration rows (hollow: held out; dotted: 2x)")
    for engine, col in colors.items():
        ax.scatter([], [], c=col, label=engine)
    ax.legend(loc="upper left")
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110, bbox_inches="tight")
    print(f"plot: {PLOT.relative_to(ROOT)}")


FIT_GRID = {
    "prefill": (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.45, 0.55, 0.65, 0.75),
    "decode": (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "step_ms": (0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0),
    "seq_us": (5.0, 15.0, 50.0, 150.0, 400.0),
    "layer_us": (0.0, 30.0, 60.0, 100.0, 150.0, 200.0, 250.0, 350.0, 550.0),
    "burst": (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0),
    "request_ms": (2.0, 8.0, 20.0, 40.0, 80.0),
    "moe": (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0),
    "bandwidth_gbs": (0.0, 700.0, 800.0, 900.0, 1000.0, 1100.0, 1200.0, 1400.0, 1700.0),
    "kv": (0.0, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.04, 0.08, 0.12, 0.15, 0.2, 0.25, 0.3),
}


FIT_ONLY: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("onnxruntime", "nvidia", ""): ("prefill", "decode", "step_ms"),
    ("llamacpp", "amd", ""): ("step_ms", "seq_us", "layer_us", "kv"),
    ("vllm", "amd", "format:fbgemm_fp8"): ("decode",),
}
"""Entries whose rows inform only some factors, and which the fit varies alone: ONNX Runtime's GPU rows are prompt
latencies (the Mistral ONNX model card): one step per row, so its prefill rate, the share of the bandwidth its
weight reads reach (a 32-token prompt's step is bound by them) and its step overhead are fitted; the rest of the
entry (per-sequence and per-request costs, the wave share) stays an estimate for our runner. llama.cpp's MI300X
rows are single-stream tokens/s over prompt and generation together (LLM-Inference-Bench's pg test): the decode
step and its growth with context are what they measure, not the prefill rate. ROCm vLLM's row-wise FP8 path
(Meta's checkpoints) has three rows of one source: only its decode share is fitted, the rest is the per-tensor FP8
entry's."""


def _slot(c: Case) -> tuple[str, str, str]:
    """(engine, vendor, "" or the older release's cut-off, "variant:" and its name or "format:" and the compute
    format): which efficiency entry of the card rates the row."""
    from inference_backend.selection.perf import _older, compute_format

    assert c.placement.gpu is not None
    vendor = c.placement.gpu.vendor
    if c.replica.variant:
        return (c.engine, vendor, "variant:" + c.replica.variant)
    fmt = compute_format(c.model, c.replica.serving_dtype)
    if any((v, f) == (vendor, fmt) for v, f, _ in card(c.engine).performance.formats):
        return (c.engine, vendor, "format:" + fmt)
    for v, before, _ in card(c.engine).performance.older:
        if v == vendor and c.replica.version and _older(c.replica.version, before):
            return (c.engine, vendor, before)
    return (c.engine, vendor, "")


def _get(slot: tuple[str, str, str]) -> Any:
    perf = card(slot[0]).performance
    if slot[2].startswith("variant:"):
        return next((e for v, n, e in perf.variants if (v, "variant:" + n) == slot[1:]), None)
    if slot[2].startswith("format:"):
        return next((e for v, n, e in perf.formats if (v, "format:" + n) == slot[1:]), None)
    if slot[2]:
        return next(e for v, b, e in perf.older if (v, b) == slot[1:])
    return perf.efficiency.get(slot[1])


def _set(slot: tuple[str, str, str], eff: Any) -> None:
    """Swap one efficiency entry on the (frozen) card in place, for the fit's trials."""
    perf = card(slot[0]).performance
    if slot[2].startswith("variant:"):
        variants = tuple((v, n, eff if (v, "variant:" + n) == slot[1:] else e) for v, n, e in perf.variants)
        object.__setattr__(perf, "variants", variants)
    elif slot[2].startswith("format:"):
        formats = tuple((v, n, eff if (v, "format:" + n) == slot[1:] else e) for v, n, e in perf.formats)
        object.__setattr__(perf, "formats", formats)
    elif slot[2]:
        older = tuple((v, b, eff if (v, b) == slot[1:] else e) for v, b, e in perf.older)
        object.__setattr__(perf, "older", older)
    else:
        effs = dict(perf.efficiency)
        effs[slot[1]] = eff
        object.__setattr__(perf, "efficiency", effs)


LOSS_CLIP = 1.5
"""The fit minimizes the mean of |log2(estimate / measured)| clipped at this (2.8x): unlike the median, the mean
weighs every row (the target counts rows within 2x), and the clip keeps a few rows the physics cannot reach
(launch-bound prefill of early DeepSeek-R1 support, say) from pulling every other row off."""


def fit(engine: str = "") -> int:
    """Coordinate descent over FIT_GRID, per efficiency entry with rows, on the clipped mean |log2| of the
    non-held-out rows it rates (LOSS_CLIP)."""
    cases = [c for r in load_rows() if (c := case(r)) is not None and not c.holdout]
    groups: dict[tuple[str, str, str], list[Case]] = defaultdict(list)
    for c in cases:
        groups[_slot(c)].append(c)
    for key, group in sorted(groups.items()):
        if engine and key[0] != engine:
            continue
        measured = [c for c in group if c.row["file"] == MEASURED_GPU]
        group = measured or group  # rows measured on a lent GPU win over published ones for their engine/vendor
        eff = _get(key)
        if eff is None or FITTED not in eff.source:  # an estimate by design (our runners on GPUs): not fitted
            continue
        if len(group) < 3:
            print(f"{key}: n={len(group)}: too few rows to fit; kept")
            continue

        def score(e: Any, group: list[Case] = group, key: tuple[str, str, str] = key) -> float:
            _set(key, e)
            vals = [min(log2err(p), LOSS_CLIP) for c in group for p in errors(c).values()]
            return statistics.fmean(vals) if vals else 0.0

        first = score(eff)
        best, best_score = eff, first
        for _ in range(2):
            for name, grid in FIT_GRID.items():
                if key in FIT_ONLY and name not in FIT_ONLY[key]:
                    continue
                for v in grid:
                    cand = replace(best, **{name: v})
                    sc = score(cand)
                    if sc < best_score - 1e-9:
                        best, best_score = cand, sc
        _set(key, best)
        print(
            f"{key}: n={len(group)} clipped mean |log2| {first:.2f} -> {best_score:.2f}: prefill {best.prefill}, "
            f"decode {best.decode}, step_ms {best.step_ms}, seq_us {best.seq_us}, layer_us {best.layer_us}, "
            f"burst {best.burst}, request_ms {best.request_ms}, moe {best.moe}, bandwidth_gbs {best.bandwidth_gbs}, "
            f"kv {best.kv}"
        )
        print(
            f"    Efficiency({best.prefill}, {best.decode}, {best.step_ms}, {best.seq_us}, {best.request_ms}, ..., "
            f"{best.layer_us}, {best.burst}, moe={best.moe}, bandwidth_gbs={best.bandwidth_gbs}, kv={best.kv})"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=("report", "fit"), nargs="?", default="report")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--engine", default="", help="fit only this engine's entries")
    a = ap.parse_args()
    return fit(a.engine) if a.cmd == "fit" else report(not a.no_plot)


if __name__ == "__main__":
    sys.exit(main())
