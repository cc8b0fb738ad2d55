"""docs/quickstart-cpu.md: the manifest it shows is the file it applies, and the operator's own selection and
rendering pick llama.cpp on a CPU-only node for it, with llama-server downloading the GGUF file from Hugging Face."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs/quickstart-cpu.md"
MANIFEST = ROOT / "docs/quickstart/qwen2-5-0-5b-cpu.yaml"
CLI = str(Path(sys.executable).parent / "inference-backend")


def test_the_doc_shows_the_file_it_applies() -> None:
    text = DOC.read_text()
    shown = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert shown is not None
    assert yaml.safe_load(shown.group(1)) == yaml.safe_load(MANIFEST.read_text())
    assert f"kubectl apply -n quickstart -f {MANIFEST.relative_to(ROOT)}" in text


def test_llamacpp_on_a_cpu_node_downloads_the_gguf_file() -> None:
    nodes = ROOT / "docs/examples/nodes/cpu-only.yaml"
    res = subprocess.run(
        [CLI, "render", "-f", str(MANIFEST), "--nodes", str(nodes)], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    deployment = next(d for d in yaml.safe_load_all(res.stdout) if d and d["kind"] == "Deployment")
    assert deployment["metadata"]["labels"]["serving.inferencebackend.io/backend"] == "llamacpp"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:4] == ["-hf", "Qwen/Qwen2.5-0.5B-Instruct-GGUF", "-hff", "qwen2.5-0.5b-instruct-q4_k_m.gguf"]
    assert args[args.index("-a") + 1] == "qwen2.5-0.5b"  # the model name the doc's curl sends
    assert "nvidia.com/gpu" not in container["resources"].get("requests", {})
