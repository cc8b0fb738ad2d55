"""One run of the engine profiles: prerequisites, bandwidth, the model in each format, then per engine render ->
start -> greedy tokens -> warm-up -> load -> stop, and the outputs (report.py). Steps are recorded in run.log; what
cannot run is skipped with its reason."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ib_testkit import free_port
from ib_testkit.llama_server import llama_cpp_source

from bench import bench_model, procstats
from bench.bench_model import BenchModel
from bench.engine_profiles import llama, machine, per_engine, report
from bench.engine_profiles.load import EXTRA_BODY, GREEDY_TOKENS, Load, prompt_ids, run_load, summarize_steps
from bench.engine_profiles.serving import (
    HEALTH_TIMEOUT,
    MetricSampler,
    Served,
    gpu_memory,
    start,
    transformers_greedy,
)
from bench.engine_profiles.steps import Budget, Skip, StepLog, now
from bench.profile_render import localize, render


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

    # -- prerequisites, bandwidth --
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
            bw = machine.measure_bandwidth(self.device, gib)
            self.results["bandwidth"] = bw
            rec["GBps"] = round(bw["bestBytesPerSecond"] / 1e9, 1)

    def other_load(self, start: dict[str, float] | None = None) -> dict[str, Any] | None:
        """CPU time of other work since ``start`` (default: since the run started)."""
        return machine.other_load(start or self.results.get("cpuAtStart"))

    # -- the model, one format at a time --
    def ensure_format(self, engine: str) -> bool:
        m, w = self.model, self.work / "models"
        if engine in self.paths:
            return True
        if engine in self.skipped:
            return False
        with self.log.step(f"model: {per_engine.format_step(engine)}") as rec:
            if per_engine.needs_safetensors(engine) and not self.ensure_format("pytorch"):
                raise Skip("no safetensors model")
            self.paths[engine] = per_engine.write_model(engine, m, w, self.device, self.paths, self.budget)
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
        if per_engine.launcher(engine).waits_for_llama_build:
            llama.wait_build(self)
        for need in (engine, "load"):
            if need in self.skipped:
                engines[engine] = {"status": "skipped", "reason": f"{need}: {self.skipped[need]}"}
                print(f"   {engine} skipped: {engines[engine]['reason'][:500]}", flush=True)
                return
        if not self.ensure_format(engine):
            engines[engine] = {"status": "skipped", "reason": self.skipped[engine]}
            return
        if missing := per_engine.launcher(engine).missing(self.llama_bin):
            engines[engine] = {"status": "skipped", "reason": missing}
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
        argv = per_engine.launcher(engine).argv(self.llama_bin, loc.args)
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
        res["version"] = per_engine.version(engine, self.llama_bin)
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
                if per_engine.launcher(engine).kv_from_second_start:
                    text = llama.kv_log(self, argv, loc.env)
                res["kv"] = per_engine.launcher(engine).kv(text, res)
                res["logTail"] = srv.output()[-3000:]
            res.setdefault("status", "ok" if res.get("steps") else "failed")
            res["finished"] = now()
            (self.raw_dir / f"{engine}.json").write_text(json.dumps(res, indent=2) + "\n")

    def after_start(self, engine: str, srv: Served, res: dict[str, Any]) -> None:
        with self.log.step(f"{engine}: greedy tokens") as rec:
            ids = prompt_ids(self.model.vocab, 24, seed=1)
            toks = per_engine.greedy(srv, self.model.name, ids, GREEDY_TOKENS)
            res["greedy"] = {"prompt": ids, "tokens": toks}
            if self.greedy_ref is not None:
                res["greedy"]["equalsTransformers"] = rec["equal"] = toks == self.greedy_ref
        with self.log.step(f"{engine}: warm-up"):
            warm = prompt_ids(self.model.vocab, self.load.prompt_tokens, seed=2)
            per_engine.greedy(srv, self.model.name, warm, 8)
        if per_engine.launcher(engine).server_timings:
            with self.log.step(f"{engine}: server timings at concurrency 1"):
                ids = prompt_ids(self.model.vocab, self.load.prompt_tokens, seed=3)
                res["serverTimings"] = llama.llama_server_timings(srv, ids, self.load.output_tokens, reps=3)
        with self.log.step(f"{engine}: bench") as rec:
            bench_out = self.work / "bench" / engine
            argv = self.load.argv(srv.url, self.model.name, self.paths["pytorch"], EXTRA_BODY, bench_out)
            res["benchCommand"] = shlex.join(argv)
            timeout = self.budget.take(3600)
            if timeout < 30:
                raise Skip(f"only {timeout:.0f}s of the time budget left")
            gauge = per_engine.launcher(engine).kv_gauge
            cpu_start = machine.cpu_accounting()
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

    def go(self) -> Path:
        self.results["loadAverageAtStart"] = os.getloadavg()
        self.results["cpuAtStart"] = machine.cpu_accounting()
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            if not self.prerequisites():
                return report.write(self)
            if self.build_llama_cuda and "llamacpp" in self.engines:
                llama.start_build(self)
            self.bandwidth()
            if self.ensure_format("pytorch") and self.preset != "llama2-7b":
                self.reference()  # the 7B shape: no exact-match claim (bf16, init 0.02: near-ties), no reference
            for engine in self.engines:
                self.engine(engine)
            if "llamacpp" in self.engines:
                llama.bench(self)
            report.plot(self)
        finally:
            if self.build is not None:
                os.killpg(self.build.pid, signal.SIGKILL)
        return report.write(self)
