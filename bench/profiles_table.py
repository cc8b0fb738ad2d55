"""Markdown tables of an engine-profiles result file (python -m bench.engine_profiles), for docs.

python -m bench.profiles_table bench/results/cpu-profiles.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MIB = 2**20


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v / MIB:,.1f}"


def tables(doc: dict[str, Any]) -> str:
    out = []
    m, hw, load = doc.get("model") or {}, doc["hardware"], doc["load"]
    out.append(
        f"{m.get('name')}: {m.get('parameters', 0) / 1e6:.1f}M parameters, {m.get('dtype')}; "
        f"{hw['cpu']['model']}, {hw['usableCores']} cores, {load['threads']} threads per engine; "
        f"{load['promptTokens']} prompt / {load['outputTokens']} output tokens (ignore_eos), "
        f"{load['requestsPerStep'] or str(load['secondsPerStep']) + ' s'} requests per step; {doc['date']}."
    )
    other = {e: (r.get("otherLoadDuringBench") or {}).get("otherCoresBusyMean") for e, r in doc["engines"].items()}
    whole = (hw.get("otherLoadDuringRun") or {}).get("otherCoresBusyMean")
    out.append("")
    out.append(
        f"Cores kept busy by other work on this machine during the run: {_f(whole, 2)} on average; during each "
        "engine's load: " + ", ".join(f"{e} {_f(v, 2)}" for e, v in other.items()) + "."
    )
    out.append("")
    out.append(
        "| engine | c | TTFT p50 ms | TTFT p95 ms | TTFT p99 ms | ITL p50 ms | out tok/s | req/s | errors "
        "| peak RSS MiB | KV MiB: allocated (llama.cpp) / admission budget (runners) | KV MiB in use, peak |"
    )
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in doc["table"]:
        out.append(
            f"| {r['engine']} | {r['concurrency']:g} | {_f(r['ttftP50Ms'])} | {_f(r['ttftP95Ms'])} | "
            f"{_f(r['ttftP99Ms'])} | {_f(r['itlP50Ms'])} | {_f(r['outputTokensPerSecond'])} | "
            f"{_f(r['requestsPerSecond'], 2)} | {r['errorRate']:.0%} | {_mib(r['peakRssBytes'])} | "
            f"{_mib(r['kvCapacityBytes'])} | {_mib(r['kvPeakUsedBytes'])} |"
        )
    lb = doc.get("llamaBench") or {}
    if sv := lb.get("serverVsBench"):
        out += [
            "",
            "| llama.cpp | llama-bench tok/s | llama-server tok/s (own timings, c=1) | server / bench |",
            "| --- | --- | --- | --- |",
        ]
        for key, name in (
            ("pp", f"prompt (pp{doc['load']['promptTokens']})"),
            ("tg", f"generation (tg{doc['load']['outputTokens']})"),
        ):
            out.append(
                f"| {name} | {_f(sv[key]['llamaBench'])} | {_f(sv[key]['llamaServer'])} | {sv[key]['ratio']:.2f} |"
            )
        if e2e := sv.get("tgEndToEndC1"):
            out.append(
                f"| generation, end to end at c=1 (`inference-backend bench` output tok/s) | "
                f"{_f(sv['tg']['llamaBench'])} | {_f(e2e['benchOutputTokensPerSecond'])} | {e2e['ratio']:.2f} |"
            )
    if (bound := doc.get("decodeBound")) and bound.get("engines"):
        out += [
            "",
            f"Copy bandwidth {bound['bandwidthBytesPerSecond'] / 1e9:.1f} GB/s (read + write, torch copy_):",
            "",
            "| engine | weight bytes / token | bound tok/s (batch 1) | measured 1000/ITL p50 at c=1 | fraction |",
            "| --- | --- | --- | --- | --- |",
        ]
        for engine, b in bound["engines"].items():
            out.append(
                f"| {engine} | {_mib(b['weightBytesPerToken'])} MiB | {_f(b['boundTokensPerSecond'])} | "
                f"{_f(b.get('decodeTokensPerSecondC1'))} | {_f(b.get('fractionOfBound'), 2)} |"
            )
    return "\n".join(out) + "\n"


def main() -> None:
    for path in sys.argv[1:]:
        sys.stdout.write(tables(json.loads(Path(path).read_text())))


if __name__ == "__main__":
    main()
