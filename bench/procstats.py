"""Pure readers for the engine profiles: /proc memory of a process tree, the engines' KV cache log lines, llama-bench
JSON, /proc/cpuinfo. No heavy imports; tests/test_bench_procstats.py checks them on captured real output."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

PROC = Path("/proc")
_UNITS = {"kb": 1024, "mb": 1024**2, "gb": 1024**3}
MIB = 1024**2


def parse_status(text: str) -> dict[str, int]:
    """/proc/PID/status -> {"VmHWM": bytes, "VmRSS": bytes, ...} for every 'Vm*'/'Rss*' line with a unit."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^((?:Vm|Rss)\w+):\s+(\d+)\s+(kB|mB|gB)$", line.strip(), re.I)
        if m:
            out[m.group(1)] = int(m.group(2)) * _UNITS[m.group(3).lower()]
    return out


def children(pid: int, proc: Path = PROC) -> list[int]:
    """Direct children of ``pid`` (all its threads' children files; empty if it is gone)."""
    out: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def tree(pid: int, proc: Path = PROC) -> list[int]:
    """``pid`` and all its descendants, parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        if p in out:
            continue
        out.append(p)
        todo += children(p, proc)
    return out


def tree_memory(pid: int, proc: Path = PROC) -> dict[str, int]:
    """Sums over the process tree of VmHWM (each process's peak RSS) and VmRSS (now), and the process count.

    The VmHWM sum is an upper bound of the tree's peak when it has several processes (their peaks need not
    coincide); for a single process it is exactly its peak resident set.
    """
    hwm = rss = n = 0
    for p in tree(pid, proc):
        try:
            st = parse_status((proc / str(p) / "status").read_text())
        except OSError:
            continue
        hwm += st.get("VmHWM", 0)
        rss += st.get("VmRSS", 0)
        n += 1
    return {"vmHwmBytes": hwm, "vmRssBytes": rss, "processes": n}


class RssSampler:
    """Samples the tree's summed VmRSS every ``interval`` seconds in a thread; ``peak`` is the largest sum seen."""

    def __init__(self, pid: int, interval: float = 0.2, proc: Path = PROC) -> None:
        self.pid, self.interval, self.proc = pid, interval, proc
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_memory(self.pid, self.proc)["vmRssBytes"])
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# llama.cpp src/llama-kv-cache.cpp (b11312), one line per KV cache at context creation; a library INFO message, which
# llama-server prints only at log verbosity >= 4 (common/log.cpp maps GGML INFO to LOG_LEVEL_TRACE). Cells are per
# stream; with -np N and kv_unified = false there are N streams ("n_seq_max/n_stream seqs"):
#   llama_kv_cache: size =   32.00 MiB (   512 cells,   8 layers,  8/8 seqs), K (f16):   16.00 MiB, V (f16):   16.00 MiB
_LLAMA_KV = re.compile(
    r"llama_kv_cache(?:_unified)?:\s+size\s*=\s*(?P<size>[\d.]+)\s*MiB\s*\(\s*(?P<cells>\d+)\s+cells,\s*"
    r"(?P<layers>\d+)\s+layers,\s*(?P<seqs>\d+)/(?P<streams>\d+)\s+seqs\),\s*"
    r"K\s*\((?P<ktype>\w+)\):\s*(?P<k>[\d.]+)\s*MiB,\s*V\s*\((?P<vtype>\w+)\):\s*(?P<v>[\d.]+)\s*MiB"
)


def parse_llama_kv(log: str) -> list[dict[str, Any]]:
    """Every KV cache llama-server logged (the target's first; a draft model adds one), sizes in bytes."""
    out = []
    for m in _LLAMA_KV.finditer(log):
        out.append(
            {
                "bytes": round(float(m["size"]) * MIB),
                "cellsPerStream": int(m["cells"]),
                "streams": int(m["streams"]),
                "layers": int(m["layers"]),
                "seqs": int(m["seqs"]),
                "kType": m["ktype"],
                "vType": m["vtype"],
                "kBytes": round(float(m["k"]) * MIB),
                "vBytes": round(float(m["v"]) * MIB),
                "line": m.group(0),
            }
        )
    return out


# Our runners (runners/{pytorch,onnx}/runner.py), once the model is loaded:
#   ... KV budget: 123456 tokens (32768 bytes/token); max model len 512
_RUNNER_KV = re.compile(r"KV budget: (?P<tokens>\d+) tokens \((?P<per>\d+) bytes/token\); max model len (?P<len>\d+)")


def parse_runner_kv(log: str) -> dict[str, Any] | None:
    """The runner's KV budget line: token capacity, bytes per token, their product, max model length."""
    m = _RUNNER_KV.search(log)
    if m is None:
        return None
    tokens, per = int(m["tokens"]), int(m["per"])
    return {
        "budgetTokens": tokens,
        "bytesPerToken": per,
        "budgetBytes": tokens * per,
        "maxModelLen": int(m["len"]),
        "line": m.group(0),
    }


def parse_llama_bench(text: str) -> list[dict[str, Any]]:
    """llama-bench -o json: one entry per test (pp = prompt processing, tg = generation), tokens/s mean and stddev."""
    out = []
    for t in json.loads(text):
        n_prompt, n_gen = int(t["n_prompt"]), int(t["n_gen"])
        test = f"pp{n_prompt}" if n_gen == 0 else f"tg{n_gen}" if n_prompt == 0 else f"pp{n_prompt}+tg{n_gen}"
        out.append(
            {
                "test": test,
                "nPrompt": n_prompt,
                "nGen": n_gen,
                "threads": int(t["n_threads"]),
                "tokensPerSecond": float(t["avg_ts"]),
                "stddev": float(t["stddev_ts"]),
                "repetitions": len(t.get("samples_ts") or []),
                "build": t.get("build_commit"),
                "buildNumber": t.get("build_number"),
                "type": t.get("type_k"),
                "modelType": t.get("model_type"),
                "backends": t.get("backends"),
            }
        )
    return out


def parse_prometheus(text: str, name: str) -> float | None:
    """Sum of one metric's samples over all label sets (None when absent)."""
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})?\s+([0-9.eE+-]+|NaN)$", re.M)
    values = [float(v) for v in pattern.findall(text)]
    return sum(values) if values else None


def cpu_busy_seconds(stat: str, ticks_per_second: int = 100) -> float:
    """CPU seconds spent busy on all cores since boot, from /proc/stat's first line (user nice system idle iowait irq
    softirq steal ...): everything but idle and iowait."""
    fields = [int(x) for x in stat.splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / ticks_per_second


def stat_cpu_seconds(stat: str, ticks_per_second: int = 100) -> float:
    """/proc/PID/stat -> CPU seconds of the process and of its children it has waited for (utime stime cutime
    cstime, fields 14-17; counted after the last ')' since the command name may hold spaces and parentheses)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(f) for f in fields[11:15]) / ticks_per_second


def tree_cpu_seconds(pid: int, ticks_per_second: int = 100, proc: Path = PROC) -> float:
    """CPU seconds of a live process tree, reaped children included (processes gone unreaped are missed)."""
    total = 0.0
    for p in tree(pid, proc):
        try:
            total += stat_cpu_seconds((proc / str(p) / "stat").read_text(), ticks_per_second)
        except OSError:
            continue
    return total


def cpu_model(cpuinfo: str) -> dict[str, Any]:
    """/proc/cpuinfo -> model name, logical CPUs, and the SIMD flags that matter to the engines' kernels."""
    names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flags_line = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M)
    flags = set(flags_line.group(1).split()) if flags_line else set()
    wanted = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_bf16")
    return {
        "model": names[0].strip() if names else None,
        "logicalCpus": len(names),
        "simd": [f for f in wanted if f in flags],
    }
