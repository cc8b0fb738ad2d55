"""The load: `inference-backend bench` (guidellm) against one server, and the fixed prompts of the greedy checks."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GREEDY_TOKENS = 16
EXTRA_BODY = {"ignore_eos": True, "temperature": 0}
"""Added to every load request: exactly --output-tokens tokens (ignore_eos: vLLM's extension in our runners, native in
llama-server), and greedy decoding in all three, so that no engine pays for a different default sampler chain
(llama-server's default is temperature 0.8 with top-k/top-p/min-p; the runners' the OpenAI default 1.0) and the
generated text, hence the load, is the same from run to run."""


def prompt_ids(vocab: int, n: int, seed: int) -> list[int]:
    """A fixed prompt of ``n`` token ids (no special tokens: ids 0-3 are <pad> <s> </s> <unk>)."""
    rnd = random.Random(seed)
    return [rnd.randrange(4, vocab) for _ in range(n)]


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
