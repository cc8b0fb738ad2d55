"""Engine profiles, measured: the same model served by the PyTorch runner (safetensors), our ONNX Runtime server
(ONNX) and llama-server (GGUF), each started with the args the operator renders, loaded by `inference-backend bench`.

    make bench-engines          (the CPU profiles of this machine, under flock /tmp/ib-bench.lock)
    $(hack/runners-venv)/bin/python -m bench.engine_profiles --preset cpu --out bench/results --label cpu
    bench/gpu/h200.sh [--reduced] (the 7B shape on one GPU; --reduced: the tiny model on CPU, same code path)

Steps: bench model (bench/bench_model.py) -> per engine: render (bench/profile_render.py) -> start the real
process -> /health -> greedy tokens on a fixed prompt (all formats must agree with transformers) -> warm-up ->
`inference-backend bench` at each concurrency -> peak RSS (VmHWM of the server's process tree), KV cache size (from
the server's own log) -> stop. Then llama-bench on the same GGUF with the same threads, and llama-server's own
timings at concurrency 1 for comparison. Every step has a time budget; a step that cannot run is recorded as
skipped with its reason, and the rest goes on. Writes OUT/LABEL/<engine>.json, OUT/LABEL/llama-bench.json,
OUT/LABEL-profiles.json (combined, with provenance) and OUT/LABEL-profiles.png.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import random
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ib_testkit import free_port
from ib_testkit.llama_server import llama_cpp_pins, llama_cpp_source, llama_server_bin

from bench import bench_model, procstats
from bench.bench_model import PRESETS, BenchModel
from bench.profile_render import ENGINES, localize, render

ROOT = Path(__file__).resolve().parents[1]

SCHEMA = "inference-backend.engine-profiles/v1"
RUNNER_MODULES = {"pytorch": "inference_backend.runners.pytorch", "onnxruntime": "inference_backend.runners.onnx"}
GREEDY_TOKENS = 16
EOS_ID = 2
HEALTH_TIMEOUT = 600.0
EXTRA_BODY = {"ignore_eos": True, "temperature": 0}
"""Added to every load request: exactly --output-tokens tokens (ignore_eos: vLLM's extension in our runners, native in
llama-server), and greedy decoding in all three, so that no engine pays for a different default sampler chain
(llama-server's default is temperature 0.8 with top-k/top-p/min-p; the runners' the OpenAI default 1.0) and the
generated text, hence the load, is the same from run to run."""


# ---- small utilities -----------------------------------------------------------------------------------------------


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def http_json(url: str, payload: Any = None, timeout: float = 120) -> tuple[int, Any]:
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
            status = int(resp.status)
    except urllib.error.HTTPError as e:
        body, status = e.read(), int(e.code)
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:
        return status, body.decode(errors="replace")


def http_text(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode(errors="replace"))


def git_commit(root: Path = ROOT) -> str | None:
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "bench", "operator", ":!bench/results"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if head.returncode == 0 else None


def prompt_ids(vocab: int, n: int, seed: int) -> list[int]:
    """A fixed prompt of ``n`` token ids (no special tokens: ids 0-3 are <pad> <s> </s> <unk>)."""
    rnd = random.Random(seed)
    return [rnd.randrange(4, vocab) for _ in range(n)]


class Budget:
    """The run's deadline: each step gets min(its own limit, what is left)."""

    def __init__(self, total_s: float) -> None:
        self.deadline = time.monotonic() + total_s

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def take(self, limit: float) -> float:
        return max(0.0, min(limit, self.left()))


@dataclass
class StepLog:
    """What happened to each step: ok / skipped / failed, why, how long."""

    steps: list[dict[str, Any]] = field(default_factory=list)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        rec: dict[str, Any] = {"step": name, "status": "ok"}
        t0 = time.monotonic()
        print(f">> {name}", flush=True)
        try:
            yield rec
        except Skip as e:
            rec.update(status="skipped", reason=str(e))
        except Exception as e:  # one step failing must not lose the others' results
            rec.update(status="failed", reason=f"{type(e).__name__}: {e}"[-3000:])
        finally:
            rec["seconds"] = round(time.monotonic() - t0, 1)
            self.steps.append(rec)
            if rec["status"] != "ok":
                print(f"   {rec['status']}: {rec.get('reason', '')[:800]}", flush=True)


class Skip(Exception):
    """A step that cannot run here, with the reason (recorded, not an error)."""


# ---- serving -------------------------------------------------------------------------------------------------------


@dataclass
class Served:
    engine: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def start(engine: str, argv: list[str], env: dict[str, str], log: Path, timeout: float) -> Served:
    port = int(argv[argv.index("--port") + 1])
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")} | env
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env)
    srv = Served(engine, argv, env, proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{engine} exited with {proc.returncode} before /health:\n{srv.output()[-3000:]}")
        with contextlib.suppress(OSError):
            if urllib.request.urlopen(srv.url + "/health", timeout=5).status == 200:
                return srv
        time.sleep(0.3)
    srv.stop()
    raise TimeoutError(f"{engine} not healthy after {timeout:.0f}s:\n{srv.output()[-3000:]}")


def greedy(srv: Served, model: str, ids: list[int], n: int) -> list[int]:
    """Greedy continuation of ``ids`` as token ids, through each engine's own API."""
    if srv.engine == "llamacpp":  # tools/server /completion: token-array prompt, "tokens" in the reply
        body = {"prompt": ids, "n_predict": n, "temperature": 0, "cache_prompt": False, "return_tokens": True}
        status, out = http_json(srv.url + "/completion", body, timeout=600)
        assert status == 200, (status, out)
        return strip_eos([int(t) for t in out["tokens"]])
    body = {"model": model, "prompt": ids, "max_tokens": n, "temperature": 0, "return_token_ids": True}
    status, out = http_json(srv.url + "/v1/completions", body, timeout=600)
    assert status == 200, (status, out)
    return strip_eos([int(t) for t in out["choices"][0]["token_ids"]])


def transformers_greedy(hf_dir: Path, ids: list[int], n: int, device: str) -> list[int]:
    """The reference: transformers' own generate() on the safetensors checkpoint, greedy, up to EOS (excluded)."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype).to(device).eval()  # type: ignore[arg-type]
    x = torch.tensor([ids], device=device)
    with torch.inference_mode():
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return strip_eos([int(t) for t in out[0, len(ids) :].tolist()])


def strip_eos(tokens: list[int]) -> list[int]:
    """Tokens before the first EOS (id 2 in the bench tokenizer): engines differ in whether they return it."""
    return tokens[: tokens.index(EOS_ID)] if EOS_ID in tokens else tokens


class MetricSampler:
    """Polls GET /metrics during the load for the largest value of one gauge (runners: ib:kv_cache_usage_perc)."""

    def __init__(self, url: str, name: str | None, interval: float = 0.5) -> None:
        self.url, self.name, self.interval = url, name, interval
        self.peak: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                v = procstats.parse_prometheus(http_text(self.url + "/metrics"), str(self.name))
                if v is not None:
                    self.peak = v if self.peak is None else max(self.peak, v)
            self._stop.wait(self.interval)

    def __enter__(self) -> MetricSampler:
        if self.name is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


# ---- the load step (`inference-backend bench`) --------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    concurrency: tuple[int, ...]
    prompt_tokens: int
    output_tokens: int
    requests: int | None
    seconds: float | None
    bench_pythonpath: str | None  # where `inference_backend.bench` lives until the bench CLI is merged

    def argv(self, url: str, model: str, processor: Path, extra_body: dict[str, Any], out: Path) -> list[str]:
        cmd = [
            sys.executable,
            "-c",
            "import sys; from inference_backend.cli import main; sys.exit(main())",
            "bench",
            "--url",
            url,
            "--model",
            model,
            "--processor",
            str(processor),
            "--concurrency",
            ",".join(str(c) for c in self.concurrency),
            "--prompt-tokens",
            str(self.prompt_tokens),
            "--prompt-stdev",
            "0",
            "--output-tokens",
            str(self.output_tokens),
            "--output-stdev",
            "0",
        ]
        cmd += ["--requests", str(self.requests)] if self.requests else ["--seconds", f"{self.seconds:g}"]
        if extra_body:
            cmd += ["--extra-body", json.dumps(extra_body)]
        return [*cmd, "--out", str(out), "--no-progress"]


def run_load(load: Load, argv: list[str], timeout: float, log: Path) -> dict[str, Any]:
    """Run the bench CLI; returns its bench.json. The one place that knows how the load is generated."""
    env = dict(os.environ)
    if load.bench_pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (load.bench_pythonpath, env.get("PYTHONPATH")) if p)
    with log.open("wb") as fh:
        res = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    out = Path(argv[argv.index("--out") + 1]) / "bench.json"
    if res.returncode != 0 or not out.exists():
        raise RuntimeError(f"bench exited {res.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
    return dict(json.loads(out.read_text()))


def summarize_steps(bench: dict[str, Any]) -> list[dict[str, Any]]:
    keep = (
        "kind",
        "target",
        "completed",
        "errored",
        "incomplete",
        "errorRate",
        "ttftMs",
        "itlMs",
        "latencyMs",
        "outputTokensPerSecond",
        "outputTokensMean",
        "requestsPerSecond",
        "durationS",
    )
    return [{k: s.get(k) for k in keep} for s in bench.get("steps", [])]


# ---- llama.cpp: versions, llama-bench, server timings ------------------------------------------------------------


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


# ---- memory bandwidth and the llama.cpp CUDA build ----------------------------------------------------------------


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


# ---- the run -------------------------------------------------------------------------------------------------------


@dataclass
class Run:
    preset: str
    model: BenchModel
    device: str
    engines: tuple[str, ...]
    load: Load
    threads: int | None
    out: Path
    label: str
    work: Path
    llama_bin: Path
    budget: Budget
    command: str
    build_llama_cuda: bool = False
    llama_cuda_fa: bool = False
    bandwidth_gib: float = 1.0
    log: StepLog = field(default_factory=StepLog)
    paths: dict[str, Path] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    greedy_ref: list[int] | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    build: subprocess.Popen[bytes] | None = None

    @property
    def raw_dir(self) -> Path:
        return self.out / self.label

    # -- prerequisites, bandwidth, build --
    def prerequisites(self) -> bool:
        from bench.gpu import prereqs

        with self.log.step("prerequisites") as rec:
            src = llama_cpp_source()
            pre = prereqs.check(self.device, src, None if self.build_llama_cuda else self.llama_bin)
            self.results["prerequisites"] = pre
            for comp, st in pre["components"].items():
                if not st["ready"]:
                    self.skipped[comp] = "; ".join(st["reasons"])
            rec["notReady"] = sorted(self.skipped)
            print(prereqs.report(pre), flush=True)
        return "model" not in self.skipped

    def bandwidth(self) -> None:
        with self.log.step("memory bandwidth (torch copy)") as rec:
            gib = self.bandwidth_gib
            bw = measure_bandwidth(self.device, gib)
            self.results["bandwidth"] = bw
            rec["GBps"] = round(bw["bestBytesPerSecond"] / 1e9, 1)

    def start_llama_build(self) -> None:
        with self.log.step("llama.cpp CUDA build: start (background)") as rec:
            if "llamacpp" in self.skipped:
                raise Skip(self.skipped["llamacpp"])
            build = self.work / "llama-cuda"
            script = llama_cuda_build_script(llama_cpp_source(), build, os.cpu_count() or 8, self.llama_cuda_fa)
            rec["script"] = script
            log = (self.work / "llama-cuda-build.log").open("wb")
            self.build = subprocess.Popen(
                ["bash", "-c", script], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            self.llama_bin = build / "bin"
            self.results["llamaBuild"] = {
                "script": script,
                "flashAttentionKernels": self.llama_cuda_fa,
                "started": now(),
            }

    def wait_llama_build(self) -> None:
        if self.build is None:
            return
        with self.log.step("llama.cpp CUDA build: wait") as rec:
            t0 = time.monotonic()
            try:
                rc = self.build.wait(timeout=self.budget.take(3600))
            except subprocess.TimeoutExpired:
                os.killpg(self.build.pid, signal.SIGKILL)
                self.build.wait()
                rc = None
            tail = (self.work / "llama-cuda-build.log").read_text(errors="replace")[-3000:]
            self.results["llamaBuild"] |= {
                "returncode": rc,
                "waitedSeconds": round(time.monotonic() - t0, 1),
                "finished": now(),
                "logTail": tail,
            }
            self.build = None
            if rc != 0:
                reason = "did not finish in the time budget" if rc is None else f"failed with {rc}"
                self.skipped["llamacpp"] = f"llama.cpp CUDA build {reason}"
                raise Skip(self.skipped["llamacpp"] + f": {tail[-600:]}")
            rec["returncode"] = rc

    # -- the model, one format at a time --
    def ensure_format(self, engine: str) -> bool:
        m, w = self.model, self.work / "models"
        if engine in self.paths:
            return True
        if engine in self.skipped:
            return False
        name = {"pytorch": "safetensors", "onnxruntime": "onnx export", "llamacpp": "gguf (convert_hf_to_gguf.py)"}
        with self.log.step(f"model: {name[engine]}") as rec:
            if engine != "pytorch" and not self.ensure_format("pytorch"):
                raise Skip("no safetensors model")
            if engine == "pytorch":
                self.paths[engine] = bench_model.make_safetensors(m, w / m.name, device=self.device)
            elif engine == "onnxruntime":
                self.paths[engine] = bench_model.export_onnx(self.paths["pytorch"], w / f"{m.name}-onnx")
            else:
                src = llama_cpp_source()
                if not (src / "convert_hf_to_gguf.py").exists():
                    raise Skip(f"llama.cpp source with convert_hf_to_gguf.py not found at {src}")
                gguf = w / f"{m.name}-{bench_model.GGUF_TYPES[m.dtype]}.gguf"
                self.paths[engine] = bench_model.convert_gguf(
                    self.paths["pytorch"], gguf, m.dtype, timeout=self.budget.take(900)
                )
            rec["path"] = str(self.paths[engine])
        if engine not in self.paths:
            failed = self.log.steps[-1]
            self.skipped[engine] = f"{failed['step']} {failed['status']}: {failed.get('reason', '')[:500]}"
            return False
        self.results["model"] = bench_model.facts(
            m, self.paths["pytorch"], self.paths.get("onnxruntime"), self.paths.get("llamacpp")
        )
        return True

    def reference(self) -> None:
        with self.log.step("greedy reference (transformers generate)") as rec:
            ids = prompt_ids(self.model.vocab, 24, seed=1)
            self.greedy_ref = transformers_greedy(self.paths["pytorch"], ids, GREEDY_TOKENS, self.device)
            rec.update(prompt=ids, tokens=self.greedy_ref)

    # -- one engine --
    def engine(self, engine: str) -> None:
        engines = self.results.setdefault("engines", {})
        if engine == "llamacpp":
            self.wait_llama_build()
        for need in (engine, "load"):
            if need in self.skipped:
                engines[engine] = {"status": "skipped", "reason": f"{need}: {self.skipped[need]}"}
                print(f"   {engine} skipped: {engines[engine]['reason'][:500]}", flush=True)
                return
        if not self.ensure_format(engine):
            engines[engine] = {"status": "skipped", "reason": self.skipped[engine]}
            return
        if engine == "llamacpp" and not self.llama_bin.joinpath("llama-server").exists():
            engines[engine] = {"status": "skipped", "reason": f"{self.llama_bin}/llama-server not built"}
            return
        res: dict[str, Any] = {"engine": engine, "started": now()}
        engines[engine] = res
        max_c = max(self.load.concurrency)
        body, rendered = render(engine, self.model, self.device, max_c)
        port = free_port()
        loc = localize(
            engine,
            rendered,
            model_path=self.paths[engine],
            port=port,
            threads=self.threads,
            llama_cache=self.work / "llama-cache",
        )
        if engine == "llamacpp":
            argv = [str(self.llama_bin / "llama-server"), *loc.args]
        else:
            argv = [sys.executable, "-m", RUNNER_MODULES[engine], *loc.args]
        res["spec"] = body
        res["rendered"] = {
            "image": rendered.container.image,
            "command": list(rendered.container.command),
            "args": rendered.args,
            "env": rendered.env,
            "resources": rendered.container.resources,
            "decision": rendered.decision.reasons[-3:],
        }
        res["local"] = {"argv": argv, "env": loc.env, "mapped": loc.mapped}
        res["version"] = self.engine_version(engine)
        self.raw_dir.mkdir(parents=True, exist_ok=True)
        srv = None
        try:
            with self.log.step(f"{engine}: start") as rec:
                t0 = time.monotonic()
                log = self.work / f"{engine}.log"
                srv = start(engine, argv, loc.env, log, self.budget.take(HEALTH_TIMEOUT))
                res["loadSeconds"] = rec["loadSeconds"] = round(time.monotonic() - t0, 1)
                res["idle"] = procstats.tree_memory(srv.proc.pid)
            if srv is None:
                res["status"] = "failed"
                res["reason"] = self.log.steps[-1].get("reason")
                return
            self.after_start(engine, srv, res)
        finally:
            if srv is not None:
                res["exitCode"] = srv.stop()
                text = srv.output()
                if engine == "llamacpp":
                    text = self.llama_kv_log(argv, loc.env)
                res["kv"] = self.kv(engine, text, res)
                res["logTail"] = srv.output()[-3000:]
            res.setdefault("status", "ok" if res.get("steps") else "failed")
            res["finished"] = now()
            (self.raw_dir / f"{engine}.json").write_text(json.dumps(res, indent=2) + "\n")

    def llama_kv_log(self, argv: list[str], env: dict[str, str]) -> str:
        """llama-server prints its KV cache size only at log verbosity 4 (a library INFO message): start it once
        more with the same args and LLAMA_ARG_LOG_VERBOSITY=4 (logging only), read the log, stop it. The
        measured run keeps the rendered configuration untouched."""
        with self.log.step("llamacpp: KV size (second start at log verbosity 4)"):
            probe_argv = list(argv)
            probe_argv[probe_argv.index("--port") + 1] = str(free_port())
            probe = start("llamacpp", probe_argv, env | {"LLAMA_ARG_LOG_VERBOSITY": "4"},
                          self.work / "llamacpp-kv.log", self.budget.take(300))  # fmt: skip
            probe.stop()
            return probe.output()
        return ""

    def after_start(self, engine: str, srv: Served, res: dict[str, Any]) -> None:
        with self.log.step(f"{engine}: greedy tokens") as rec:
            ids = prompt_ids(self.model.vocab, 24, seed=1)
            toks = greedy(srv, self.model.name, ids, GREEDY_TOKENS)
            res["greedy"] = {"prompt": ids, "tokens": toks}
            if self.greedy_ref is not None:
                res["greedy"]["equalsTransformers"] = rec["equal"] = toks == self.greedy_ref
        with self.log.step(f"{engine}: warm-up"):
            warm = prompt_ids(self.model.vocab, self.load.prompt_tokens, seed=2)
            greedy(srv, self.model.name, warm, 8)
        if engine == "llamacpp":
            with self.log.step("llamacpp: server timings at concurrency 1"):
                ids = prompt_ids(self.model.vocab, self.load.prompt_tokens, seed=3)
                res["serverTimings"] = llama_server_timings(srv, ids, self.load.output_tokens, reps=3)
        with self.log.step(f"{engine}: bench") as rec:
            bench_out = self.work / "bench" / engine
            argv = self.load.argv(srv.url, self.model.name, self.paths["pytorch"], EXTRA_BODY, bench_out)
            res["benchCommand"] = shlex.join(argv)
            timeout = self.budget.take(3600)
            if timeout < 30:
                raise Skip(f"only {timeout:.0f}s of the time budget left")
            # runners: reserved KV tokens / budget; llama-server b11312 exports no KV usage (allocated at start)
            gauge = "ib:kv_cache_usage_perc" if engine != "llamacpp" else None
            cpu_start = self.cpu_accounting()
            with procstats.RssSampler(srv.proc.pid) as rss, MetricSampler(srv.url, gauge) as kv:
                bench = run_load(self.load, argv, timeout, self.work / f"bench-{engine}.log")
            res["otherLoadDuringBench"] = self.other_load(cpu_start)
            res["bench"] = bench
            res["steps"] = summarize_steps(bench)
            res["peak"] = procstats.tree_memory(srv.proc.pid) | {
                "sampledRssPeakBytes": rss.peak,
                "rssSamples": rss.samples,
            }
            if self.device == "cuda":
                res["peak"]["gpu"] = gpu_memory(procstats.tree(srv.proc.pid))
            res["kvUsagePeak"] = kv.peak
            rec["steps"] = len(res["steps"])

    def engine_version(self, engine: str) -> dict[str, Any]:
        import inference_backend

        v: dict[str, Any] = {"inferenceBackend": inference_backend.__version__, "commit": git_commit()}
        if engine == "llamacpp":
            v["llamaServer"] = llama_version(self.llama_bin / "llama-server")
        elif engine == "pytorch":
            import torch
            import transformers

            v |= {"torch": torch.__version__, "transformers": transformers.__version__}
        else:
            import onnxruntime

            v |= {"onnxruntime": onnxruntime.__version__, "providers": onnxruntime.get_available_providers()}
        return v

    def kv(self, engine: str, log_text: str, res: dict[str, Any]) -> dict[str, Any]:
        if engine == "llamacpp":
            caches = procstats.parse_llama_kv(log_text)
            out: dict[str, Any] = {
                "source": "llama-server log at verbosity 4 (llama_kv_cache: size = ...); allocated at start",
                "caches": caches,
            }
            if caches:
                out["allocatedBytes"] = caches[0]["bytes"]
            return out
        budget = procstats.parse_runner_kv(log_text)
        out = {
            "source": "runner log (KV budget: N tokens (B bytes/token)); allocated on demand per sequence",
            "budget": budget,
        }
        if budget is not None and res.get("kvUsagePeak") is not None:
            # ib:kv_cache_usage_perc = reserved tokens (prompt + max_tokens of running requests) / budget
            out["peakReservedBytes"] = round(budget["budgetBytes"] * res["kvUsagePeak"])
        return out

    # -- llama-bench --
    def llama_bench(self) -> None:
        gguf, server = self.paths.get("llamacpp"), self.results.get("engines", {}).get("llamacpp")
        binary = self.llama_bin / "llama-bench"
        with self.log.step("llama-bench") as rec:
            if gguf is None or not server or "local" not in server:
                raise Skip("no llama-server run to compare with")
            if not binary.exists():
                raise Skip(f"{binary} not built")
            args = server["local"]["argv"][1:]
            argv = llama_bench_argv(binary, gguf, args, self.load.prompt_tokens, self.load.output_tokens, reps=3)
            res = subprocess.run(argv, capture_output=True, text=True, timeout=self.budget.take(300))
            if res.returncode != 0:
                raise RuntimeError(f"llama-bench exited {res.returncode}: {res.stderr[-2000:]}")
            self.raw_dir.mkdir(parents=True, exist_ok=True)
            (self.raw_dir / "llama-bench.json").write_text(res.stdout)
            tests = procstats.parse_llama_bench(res.stdout)
            rec["command"] = shlex.join(argv)
            out: dict[str, Any] = {"command": shlex.join(argv), "tests": tests, "raw": f"{self.label}/llama-bench.json"}
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
            self.results["llamaBench"] = out

    # -- outputs --
    def weights_per_token(self, engine: str) -> int | None:
        """Bytes of weights read per decoded token at batch 1 in the format this engine serves (no embedding)."""
        m = self.model
        elem = {"float32": 4, "float16": 2, "bfloat16": 2}
        served = "float32" if engine == "onnxruntime" or (self.device == "cpu" and engine == "pytorch") else m.dtype
        return (m.parameters() - m.vocab * m.hidden) * elem[served]

    def bounds(self) -> dict[str, Any] | None:
        bw = self.results.get("bandwidth")
        if not bw:
            return None
        out: dict[str, Any] = {"bandwidthBytesPerSecond": bw["bestBytesPerSecond"], "engines": {}}
        for engine, r in self.results.get("engines", {}).items():
            if not r.get("steps"):
                continue
            per_token = self.weights_per_token(engine)
            c1 = next((s for s in r.get("steps") or [] if s["target"] == 1), None)
            entry: dict[str, Any] = {
                "weightBytesPerToken": per_token,
                "boundTokensPerSecond": decode_bound(bw["bestBytesPerSecond"], per_token or 1),
            }
            if c1 and c1["itlMs"]["p50"]:
                entry["decodeTokensPerSecondC1"] = 1000 / c1["itlMs"]["p50"]
                entry["fractionOfBound"] = entry["decodeTokensPerSecondC1"] / entry["boundTokensPerSecond"]
            out["engines"][engine] = entry
        tg = next((t for t in (self.results.get("llamaBench") or {}).get("tests", []) if t["nPrompt"] == 0), None)
        if tg is not None and "llamacpp" in out["engines"]:
            bound = out["engines"]["llamacpp"]["boundTokensPerSecond"]
            out["engines"]["llama-bench"] = {
                "weightBytesPerToken": out["engines"]["llamacpp"]["weightBytesPerToken"],
                "boundTokensPerSecond": bound,
                "decodeTokensPerSecondC1": tg["tokensPerSecond"],
                "fractionOfBound": tg["tokensPerSecond"] / bound,
            }
        return out

    def table(self) -> list[dict[str, Any]]:
        rows = []
        for engine, r in self.results.get("engines", {}).items():
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

    def hardware(self) -> dict[str, Any]:
        hw: dict[str, Any] = {
            "cpu": procstats.cpu_model(Path("/proc/cpuinfo").read_text()),
            "usableCores": len(os.sched_getaffinity(0)),
            "kernel": platform.release(),
            "memTotalBytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "loadAverageAtStart": self.results.get("loadAverageAtStart"),
            "loadAverageAtEnd": os.getloadavg(),
            "otherLoadDuringRun": self.other_load(),
        }
        if self.device == "cuda":
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

    def write(self) -> Path:
        combined = {
            "schema": SCHEMA,
            "label": self.label,
            "date": now(),
            "command": self.command,
            "preset": self.preset,
            "device": self.device,
            "hardware": self.hardware(),
            "model": self.results.get("model"),
            "load": {
                "concurrency": list(self.load.concurrency),
                "promptTokens": self.load.prompt_tokens,
                "outputTokens": self.load.output_tokens,
                "requestsPerStep": self.load.requests,
                "secondsPerStep": self.load.seconds,
                "extraBody": EXTRA_BODY,
                "threads": self.threads,
            },
            "benchCli": {
                "pythonpath": self.load.bench_pythonpath,
                "commit": git_commit(Path(self.load.bench_pythonpath or ROOT / "operator").resolve().parent),
            },
            "greedyReference": {"tokens": self.greedy_ref, "source": "transformers generate(do_sample=False)"},
            "table": self.table(),
            "llamaBench": self.results.get("llamaBench"),
            "bandwidth": self.results.get("bandwidth"),
            "decodeBound": self.bounds(),
            "engines": {
                e: {k: v for k, v in r.items() if k not in ("bench", "logTail")} | {"raw": f"{self.label}/{e}.json"}
                for e, r in self.results.get("engines", {}).items()
            },
            "llamaBuild": self.results.get("llamaBuild"),
            "prerequisites": self.results.get("prerequisites"),
            "steps": self.log.steps,
        }
        path = self.out / f"{self.label}-profiles.json"
        path.write_text(json.dumps(combined, indent=2) + "\n")
        return path

    def plot(self) -> None:
        with self.log.step("plot"):
            if "plot" in self.skipped:
                raise Skip(self.skipped["plot"])
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
            for engine, r in self.results.get("engines", {}).items():
                steps = r.get("steps") or []
                if not steps:
                    continue
                c = [s["target"] for s in steps]
                ax1.plot(c, [s["outputTokensPerSecond"] for s in steps], marker="o", label=engine)
                ax2.plot(c, [s["ttftMs"]["p50"] for s in steps], marker="o", label=engine)
            for ax, title in ((ax1, "output tokens/s"), (ax2, "TTFT p50 (ms)")):
                ax.set_xscale("log", base=2)
                ax.set_xticks(list(self.load.concurrency), [str(c) for c in self.load.concurrency])
                ax.set_xlabel("concurrency")
                ax.set_title(title)
                ax.grid(True, alpha=0.3)
                if ax.lines:
                    ax.legend()
            m = self.results.get("model") or {}
            fig.suptitle(
                f"{m.get('name', self.model.name)} ({(m.get('parameters') or 0) / 1e6:.0f}M params, "
                f"{self.model.dtype}) on {self.label}: {self.load.prompt_tokens} prompt / "
                f"{self.load.output_tokens} output tokens",
                fontsize=10,
            )
            fig.tight_layout()
            fig.savefig(self.out / f"{self.label}-profiles.png", dpi=110)

    def cpu_accounting(self) -> dict[str, float]:
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

    def other_load(self, start: dict[str, float] | None = None) -> dict[str, Any] | None:
        start = start or self.results.get("cpuAtStart")
        if not start:
            return None
        end = self.cpu_accounting()
        wall = end["wall"] - start["wall"]
        other = (end["machineBusy"] - start["machineBusy"]) - (end["own"] - start["own"])
        return {
            "wallSeconds": round(wall, 1),
            "ownCpuSeconds": round(end["own"] - start["own"], 1),
            "otherCpuSeconds": round(other, 1),
            "otherCoresBusyMean": round(other / wall, 2) if wall else None,
            "source": "/proc/stat busy time minus getrusage(self + children); other work on the same cores",
        }

    def go(self) -> Path:
        self.results["loadAverageAtStart"] = os.getloadavg()
        self.results["cpuAtStart"] = self.cpu_accounting()
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            if not self.prerequisites():
                return self.write()
            if self.build_llama_cuda and "llamacpp" in self.engines:
                self.start_llama_build()
            self.bandwidth()
            if self.ensure_format("pytorch") and self.preset != "llama2-7b":
                self.reference()  # the 7B shape: no exact-match claim (bf16, init 0.02: near-ties), no reference
            for engine in self.engines:
                self.engine(engine)
            if "llamacpp" in self.engines:
                self.llama_bench()
            self.plot()
        finally:
            if self.build is not None:
                os.killpg(self.build.pid, signal.SIGKILL)
        return self.write()


def gpu_memory(pids: list[int]) -> dict[str, Any] | None:
    """Device memory in use now (nvidia-smi): by the server's processes, and on the whole GPU."""
    try:
        q = ["nvidia-smi", "--format=csv,noheader,nounits"]
        total = subprocess.run([*q, "--query-gpu=memory.used,memory.total"], capture_output=True, text=True, timeout=20)
        apps = subprocess.run([*q, "--query-compute-apps=pid,used_memory"], capture_output=True, text=True, timeout=20)
        used, size = (int(x) for x in total.stdout.split(",")[:2])
        mine = sum(int(m) for p, m in (line.split(",") for line in apps.stdout.splitlines() if "," in line)
                   if int(p) in pids)  # fmt: skip
        return {"serverBytes": mine * 2**20, "gpuUsedBytes": used * 2**20, "gpuTotalBytes": size * 2**20,
                "source": "nvidia-smi (compute-apps of the server's process tree; memory.used of the GPU)"}  # fmt: skip
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="bench model shape (bench_model.PRESETS)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--engines",
        default=None,
        help="comma-separated subset of "
        + ",".join(ENGINES)
        + " (default: all; on cuda llamacpp before onnxruntime, whose fp32 export is the slowest step)",
    )
    p.add_argument("--concurrency", default="1,2,4,8")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=64)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--requests", type=int, default=None, help="requests per concurrency step (default 16)")
    g.add_argument("--seconds", type=float, default=None, help="seconds per concurrency step")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of every engine and llama-bench (default on cpu: all usable cores)",
    )
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--label", default=None, help="results name (default: the device, cpu or cuda)")
    p.add_argument("--work", type=Path, default=None, help="models, logs, raw bench output (default: $IB_CACHE/bench)")
    p.add_argument("--llama-bin", type=Path, default=None, help="directory with llama-server and llama-bench")
    p.add_argument(
        "--build-llama-cuda",
        action="store_true",
        help="build llama-server/llama-bench with CUDA (sm_90) in the background from the pinned source",
    )
    p.add_argument("--llama-cuda-fa", action="store_true", help="with --build-llama-cuda: build the FA kernels too")
    p.add_argument("--bandwidth-gib", type=float, default=None, help="copy buffer size (default: 1 on cpu, 4 on cuda)")
    p.add_argument(
        "--bench-pythonpath",
        default=os.environ.get("IB_BENCH_PYTHONPATH"),
        help="prepended to PYTHONPATH for `inference-backend bench` (its operator/ until it is merged)",
    )
    p.add_argument(
        "--budget-s", type=float, default=1800, help="time budget of the whole run (steps are skipped after)"
    )
    return p.parse_args(argv)


def build_run(a: argparse.Namespace, command: str) -> Run:
    cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
    threads = a.threads or (len(os.sched_getaffinity(0)) if a.device == "cpu" else None)
    default = ("pytorch", "llamacpp", "onnxruntime") if a.device == "cuda" else ENGINES
    engines = tuple(e for e in a.engines.split(",") if e) if a.engines else default
    unknown = set(engines) - set(ENGINES)
    if unknown:
        raise SystemExit(f"--engines: unknown {sorted(unknown)}; choose from {ENGINES}")
    load = Load(
        tuple(int(c) for c in a.concurrency.split(",")),
        a.prompt_tokens,
        a.output_tokens,
        a.requests if a.requests or a.seconds else 16,
        a.seconds,
        a.bench_pythonpath,
    )
    return Run(
        preset=a.preset,
        model=PRESETS[a.preset],
        device=a.device,
        engines=engines,
        load=load,
        threads=threads,
        out=a.out,
        label=a.label or a.device,
        work=a.work or cache / "bench" / a.preset,
        llama_bin=a.llama_bin or llama_server_bin().parent,
        budget=Budget(a.budget_s),
        command=command,
        build_llama_cuda=a.build_llama_cuda,
        llama_cuda_fa=a.llama_cuda_fa,
        bandwidth_gib=a.bandwidth_gib or (4.0 if a.device == "cuda" else 1.0),
    )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    command = shlex.join(["python", "-m", "bench.engine_profiles", *(argv if argv is not None else sys.argv[1:])])
    run = build_run(a, command)
    run.work.mkdir(parents=True, exist_ok=True)
    path = run.go()
    doc = json.loads(path.read_text())
    for row in doc["table"]:
        print(json.dumps(row))
    failed = [s for s in run.log.steps if s["status"] == "failed"]
    skipped = [s for s in run.log.steps if s["status"] == "skipped"]
    print(f">> wrote {path}: {len(run.log.steps)} steps, {len(failed)} failed, {len(skipped)} skipped")
    measured = [e for e, r in doc["engines"].items() if r.get("steps")]
    if not measured:
        print(">> no engine was measured (see the prerequisites and the skipped steps above)")
        return 3
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
