"""onnxruntime-genai format models built from a local Hugging Face directory by genai's own model builder.

    build_genai(Path("tiny"), Path("tiny-genai-int4"), "int4")   # python -m onnxruntime_genai.models.builder ...

The builder runs offline on a local directory (-i); its output is genai_config.json, model.onnx (+ .data) and the
tokenizer files. Valid on CPU: fp32 and int4 built for the CPU EP; fp16 is built for the CUDA EP (the builder's
fp16 CPU graph fails at its first decode step) and that graph also runs on ONNX Runtime's CPU provider.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# precision -> the execution provider the builder targets
BUILD_EP = {"fp32": "cpu", "int4": "cpu", "fp16": "cuda"}


def build_genai(
    hf_dir: Path,
    out: Path,
    precision: str,
    ep: str | None = None,
    timeout: float = 900,
    extra_options: tuple[str, ...] = (),
) -> Path:
    """Run genai's model builder (`-p precision -e ep [--extra_options KEY=VALUE ...]`) on hf_dir into out; reuse a
    finished build."""
    if (out / "genai_config.json").exists():
        return out
    cmd = [
        sys.executable,
        "-m",
        "onnxruntime_genai.models.builder",
        "-i",
        str(hf_dir),
        "-o",
        str(out),
        "-p",
        precision,
        "-e",
        ep or BUILD_EP[precision],
        "-c",
        str(out.parent / f".{out.name}-cache"),
    ]
    if extra_options:
        cmd += ["--extra_options", *extra_options]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0 or not (out / "genai_config.json").exists():
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n{(res.stdout + res.stderr)[-4000:]}")
    return out
