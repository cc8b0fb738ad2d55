"""The machine under the profile: copy bandwidth (and the decode bound it implies), CPU time taken by other work."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench import procstats


def measure_bandwidth(device: str, gib: float, reps: int = 10) -> dict[str, Any]:
    """Copy bandwidth of one large torch copy_ on ``device`` (bytes read + written per second, best of ``reps``)."""
    import torch

    n = int(gib * 2**30) // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(reps + 3):
        if device == "cuda":
            start_ev = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end_ev = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start_ev.record()
            dst.copy_(src)
            end_ev.record()
            torch.cuda.synchronize()
            seconds = start_ev.elapsed_time(end_ev) / 1000
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - t0
        if i >= 3:  # 3 warm-ups (first touch of the pages, clocks)
            times.append(seconds)
    moved = 2 * src.numel() * src.element_size()
    del src, dst
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "device": device,
        "bufferBytes": n * 4,
        "bytesMovedPerCopy": moved,
        "reps": reps,
        "threads": torch.get_num_threads() if device == "cpu" else None,
        "bestBytesPerSecond": moved / min(times),
        "meanBytesPerSecond": moved * len(times) / sum(times),
        "method": "torch dst.copy_(src), float32; bytes read + bytes written per second",
    }


def decode_bound(bandwidth: float, weights_per_token: int) -> float:
    """Batch-1 decode ceiling in tokens/s: every weight except the embedding table is read once per token."""
    return bandwidth / weights_per_token


def cpu_accounting() -> dict[str, float]:
    """Busy CPU seconds of the whole machine vs this run's own processes (this one and its waited-for
    children: servers, bench CLI, llama-bench): the difference is other work that shared the cores."""
    import resource

    own = sum(
        getattr(resource.getrusage(who), f)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for f in ("ru_utime", "ru_stime")
    )
    # live children (servers, the bench CLI while it runs) are not in RUSAGE_CHILDREN yet
    ticks = os.sysconf("SC_CLK_TCK")
    own += sum(procstats.tree_cpu_seconds(c, ticks) for c in procstats.children(os.getpid()))
    busy = procstats.cpu_busy_seconds(Path("/proc/stat").read_text(), ticks)
    return {"machineBusy": busy, "own": own, "wall": time.monotonic()}


def other_load(start: dict[str, float] | None) -> dict[str, Any] | None:
    """CPU time that other work took on the machine since ``start`` (a cpu_accounting()), or None without one."""
    if not start:
        return None
    end = cpu_accounting()
    wall = end["wall"] - start["wall"]
    other = (end["machineBusy"] - start["machineBusy"]) - (end["own"] - start["own"])
    return {
        "wallSeconds": round(wall, 1),
        "ownCpuSeconds": round(end["own"] - start["own"], 1),
        "otherCpuSeconds": round(other, 1),
        "otherCoresBusyMean": round(other / wall, 2) if wall else None,
        "source": "/proc/stat busy time minus getrusage(self + children); other work on the same cores",
    }
