"""llama.cpp beside llama-server: its version, llama-bench on the same GGUF with the server's flags, llama-server's own
timings, the KV size from a second start, and the CUDA build of the pinned source (GPU runs). The steps here take the
Run (run.py) they belong to; they run when "llamacpp" is among its engines.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ib_testkit import free_port
from ib_testkit.llama_server import llama_cpp_pins, llama_cpp_source

from bench import procstats
from bench.engine_profiles.serving import Served, http_json, start
from bench.engine_profiles.steps import Skip, now

if TYPE_CHECKING:
    from bench.engine_profiles.run import Run


def llama_version(binary: Path) -> str:
    res = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    return (res.stdout + res.stderr).strip()


BENCH_FLAGS = {
    "-t": "-t",
    "-ngl": "-ngl",
    "-b": "-b",
    "-ub": "-ub",
    "-ctk": "-ctk",
    "-ctv": "-ctv",
    "--flash-attn": "-fa",
}
"""llama-server flags the renderer may emit -> the llama-bench flag with the same meaning (tools/llama-bench)."""


def llama_bench_argv(binary: Path, gguf: Path, server_args: list[str], prompt: int, gen: int, reps: int) -> list[str]:
    """llama-bench on the same GGUF with the server's threads, offload, batch sizes, KV types and flash-attn."""
    argv = [str(binary), "-m", str(gguf), "-p", str(prompt), "-n", str(gen), "-r", str(reps), "-o", "json"]
    for i, a in enumerate(server_args[:-1]):
        if a in BENCH_FLAGS:
            argv += [BENCH_FLAGS[a], server_args[i + 1]]
    return argv


def llama_server_timings(srv: Served, ids: list[int], gen: int, reps: int) -> dict[str, Any]:
    """llama-server's own prompt/generation speeds (the reply's `timings`) for one request at a time."""
    pp, tg = [], []
    for _ in range(reps):
        body = {"prompt": ids, "n_predict": gen, "ignore_eos": True, "cache_prompt": False, "temperature": 0}
        status, out = http_json(srv.url + "/completion", body, timeout=600)
        assert status == 200, (status, out)
        pp.append(float(out["timings"]["prompt_per_second"]))
        tg.append(float(out["timings"]["predicted_per_second"]))
    return {
        "promptTokensPerSecond": sum(pp) / reps,
        "genTokensPerSecond": sum(tg) / reps,
        "samples": {"pp": pp, "tg": tg},
        "promptTokens": len(ids),
        "genTokens": gen,
    }


def llama_cuda_build_script(src: Path, build: Path, jobs: int, flash_attn: bool) -> str:
    """Configure + build llama-server and llama-bench with CUDA for sm_90 only (hack/build-llama-server's options)."""
    pins = llama_cpp_pins()
    gen = "-G Ninja" if shutil.which("ninja") else ""
    return (
        f"cmake -S {shlex.quote(str(src))} -B {shlex.quote(str(build))} {gen} -DCMAKE_BUILD_TYPE=Release "
        "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 "
        f"-DGGML_CUDA_FA={'ON' if flash_attn else 'OFF'} "
        "-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
        "-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF "
        "-DBUILD_SHARED_LIBS=OFF "
        f"-DLLAMA_BUILD_NUMBER={pins['LLAMA_CPP_BUILD']} -DLLAMA_BUILD_COMMIT={pins['LLAMA_CPP_COMMIT']} "
        f"&& cmake --build {shlex.quote(str(build))} -j{jobs} --target llama-server llama-bench"
    )


def start_build(run: Run) -> None:
    """Start the CUDA build of llama-server/llama-bench in the background; run.llama_bin points at its output."""
    with run.log.step("llama.cpp CUDA build: start (background)") as rec:
        if "llamacpp" in run.skipped:
            raise Skip(run.skipped["llamacpp"])
        build = run.work / "llama-cuda"
        script = llama_cuda_build_script(llama_cpp_source(), build, os.cpu_count() or 8, run.llama_cuda_fa)
        rec["script"] = script
        log = (run.work / "llama-cuda-build.log").open("wb")
        run.build = subprocess.Popen(
            ["bash", "-c", script], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        run.llama_bin = build / "bin"
        run.results["llamaBuild"] = {
            "script": script,
            "flashAttentionKernels": run.llama_cuda_fa,
            "started": now(),
        }


def wait_build(run: Run) -> None:
    """Wait for the background build (within the budget); a failed or late build skips llamacpp."""
    if run.build is None:
        return
    with run.log.step("llama.cpp CUDA build: wait") as rec:
        t0 = time.monotonic()
        try:
            rc = run.build.wait(timeout=run.budget.take(3600))
        except subprocess.TimeoutExpired:
            os.killpg(run.build.pid, signal.SIGKILL)
            run.build.wait()
            rc = None
        tail = (run.work / "llama-cuda-build.log").read_text(errors="replace")[-3000:]
        run.results["llamaBuild"] |= {
            "returncode": rc,
            "waitedSeconds": round(time.monotonic() - t0, 1),
            "finished": now(),
            "logTail": tail,
        }
        run.build = None
        if rc != 0:
            reason = "did not finish in the time budget" if rc is None else f"failed with {rc}"
            run.skipped["llamacpp"] = f"llama.cpp CUDA build {reason}"
            raise Skip(run.skipped["llamacpp"] + f": {tail[-600:]}")
        rec["returncode"] = rc


def kv_log(run: Run, argv: list[str], env: dict[str, str]) -> str:
    """llama-server prints its KV cache size only at log verbosity 4 (a library INFO message): start it once
    more with the same args and LLAMA_ARG_LOG_VERBOSITY=4 (logging only), read the log, stop it. The
    measured run keeps the rendered configuration untouched."""
    with run.log.step("llamacpp: KV size (second start at log verbosity 4)"):
        probe_argv = list(argv)
        probe_argv[probe_argv.index("--port") + 1] = str(free_port())
        probe = start(
            "llamacpp",
            probe_argv,
            env | {"LLAMA_ARG_LOG_VERBOSITY": "4"},
            run.work / "llamacpp-kv.log",
            run.budget.take(300),
        )
        probe.stop()
        return probe.output()
    return ""


def bench(run: Run) -> None:
    """llama-bench with the measured server's flags, compared with llama-server's own timings and the load."""
    gguf, server = run.paths.get("llamacpp"), run.results.get("engines", {}).get("llamacpp")
    binary = run.llama_bin / "llama-bench"
    with run.log.step("llama-bench") as rec:
        if gguf is None or not server or "local" not in server:
            raise Skip("no llama-server run to compare with")
        if not binary.exists():
            raise Skip(f"{binary} not built")
        args = server["local"]["argv"][1:]
        argv = llama_bench_argv(binary, gguf, args, run.load.prompt_tokens, run.load.output_tokens, reps=3)
        res = subprocess.run(argv, capture_output=True, text=True, timeout=run.budget.take(300))
        if res.returncode != 0:
            raise RuntimeError(f"llama-bench exited {res.returncode}: {res.stderr[-2000:]}")
        run.raw_dir.mkdir(parents=True, exist_ok=True)
        (run.raw_dir / "llama-bench.json").write_text(res.stdout)
        tests = procstats.parse_llama_bench(res.stdout)
        rec["command"] = shlex.join(argv)
        out: dict[str, Any] = {"command": shlex.join(argv), "tests": tests, "raw": f"{run.label}/llama-bench.json"}
        timings = server.get("serverTimings")
        pp = next((t for t in tests if t["nGen"] == 0), None)
        tg = next((t for t in tests if t["nPrompt"] == 0), None)
        if timings and pp and tg:
            out["serverVsBench"] = {
                "pp": {
                    "llamaBench": pp["tokensPerSecond"],
                    "llamaServer": timings["promptTokensPerSecond"],
                    "ratio": timings["promptTokensPerSecond"] / pp["tokensPerSecond"],
                },
                "tg": {
                    "llamaBench": tg["tokensPerSecond"],
                    "llamaServer": timings["genTokensPerSecond"],
                    "ratio": timings["genTokensPerSecond"] / tg["tokensPerSecond"],
                },
            }
            c1 = next((s for s in server.get("steps", []) if s["target"] == 1), None)
            if c1:
                out["serverVsBench"]["tgEndToEndC1"] = {
                    "benchOutputTokensPerSecond": c1["outputTokensPerSecond"],
                    "ratio": c1["outputTokensPerSecond"] / tg["tokensPerSecond"],
                }
        run.results["llamaBench"] = out
