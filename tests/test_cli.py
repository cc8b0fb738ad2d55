"""`inference-backend select`: JSON and text output, exit codes 0 / 3 / 2, examples against example node lists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from inference_backend.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "docs/examples").glob("*.yaml") if p.name != "models.yaml")
NODE_LISTS = sorted((ROOT / "docs/examples/nodes").glob("*.yaml"))
MODELS = str(ROOT / "docs/examples/models.yaml")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "inference_backend.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def test_examples_cover_every_engine_and_a_draft() -> None:
    texts = "".join(p.read_text() for p in EXAMPLES)
    for engine in ("vllm", "tgi", "llamacpp", "onnxruntime", "pytorch"):
        assert any(engine in p.name for p in EXAMPLES), engine
    assert "draftModelRef" in texts
    assert {p.name for p in NODE_LISTS} >= {"cpu-only.yaml", "h100x8.yaml", "l4.yaml", "gpu-nolabels.yaml"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("nodes", NODE_LISTS, ids=lambda p: p.stem)
def test_every_example_against_every_node_list(example: Path, nodes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["select", "-f", str(example), "--nodes", str(nodes), "--models", MODELS, "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == (0 if out["satisfiable"] else 3)
    assert set(out) >= {
        "backend",
        "satisfiable",
        "reasons",
        "tensorParallelSize",
        "gpusPerReplica",
        "speculativeDecoding",
    }
    assert isinstance(out["speculativeDecoding"]["enabled"], bool) and out["speculativeDecoding"]["reason"]
    assert out["reasons"] and all(isinstance(r, str) and r for r in out["reasons"])
    engine = example.stem.split("-")[0]
    if out["satisfiable"]:
        if f"backend: {engine}" in example.read_text():
            assert out["backend"] == engine, out["reasons"]
        if out["gpusPerReplica"] == 0:
            assert out["tensorParallelSize"] == 0
    else:
        assert out["backend"] is None and out["tensorParallelSize"] == 0


@pytest.mark.parametrize(
    ("example", "nodes", "backend", "tp"),
    [
        ("vllm-llama-3-1-8b", "h100x8", "vllm", 1),
        ("vllm-llama-3-1-70b-tp", "h100x8", "vllm", 4),
        ("tgi-mistral-7b", "l4", "tgi", 1),
        ("llamacpp-cpu-gguf", "cpu-only", "llamacpp", 0),
        ("onnxruntime-phi-3", "cpu-only", "onnxruntime", 0),
        ("pytorch-research", "gpu-nolabels", "pytorch", 1),
    ],
)
def test_each_engine_example_is_satisfiable_somewhere(example: str, nodes: str, backend: str, tp: int) -> None:
    res = run(
        "select",
        "-f",
        f"docs/examples/{example}.yaml",
        "--nodes",
        f"docs/examples/nodes/{nodes}.yaml",
        "--models",
        MODELS,
        "-o",
        "json",
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["backend"], out["tensorParallelSize"]) == (backend, tp)


def test_text_output_shows_the_decision_path() -> None:
    res = run(
        "select",
        "-f",
        "docs/examples/vllm-llama-3-1-8b.yaml",
        "--nodes",
        "docs/examples/nodes/h100x8.yaml",
        "--models",
        MODELS,
    )
    assert res.returncode == 0
    assert "InferenceBackend llama-chat: backend vllm" in res.stdout
    assert "  1. model llama-3-1-8b: facts from the registered Model" in res.stdout
    assert "chosen: vllm on 1x NVIDIA-H100-80GB-HBM3" in res.stdout
    assert "rejected:" in res.stdout and "llamacpp: format safetensors is not one it serves" in res.stdout


def test_unsatisfiable_exits_3() -> None:
    res = run("select", "-f", "docs/examples/vllm-llama-3-1-70b-tp.yaml", "--nodes", "docs/examples/nodes/l4.yaml")
    assert res.returncode == 3
    assert "NOT SATISFIABLE" in res.stdout and "does not fit" in res.stdout


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (
            "spec:\n  model: {uri: 'hf://x/y', parameters: 8B}\n  kvCache: {memoryFraction: 1.5}\n",
            "spec.kvCache.memoryFraction: Input should be less than or equal to 1",
        ),
        ("spec:\n  model: {parameters: 8B}\n", "spec.model: set model.modelRef or model.uri"),
        ("spec:\n  model: {uri: 'hf://x/y', parameters: 8B}\n  backnd: vllm\n", "spec.backnd: Extra inputs"),
        (
            "spec:\n  model: {uri: 'hf://x/y', parameters: 8B}\n  speculativeDecoding: {numSpeculativeTokens: 17,"
            " method: ngram}\n",
            "spec.speculativeDecoding.numSpeculativeTokens: Input should be less than or equal to 16",
        ),
        (
            "spec:\n  model: {uri: 'hf://x/y', parameters: 8B}\n  speculativeDecoding: {method: draft}\n",
            "draftModelRef is required when method is draft",
        ),
        ("spec:\n  model: {uri: 'hf://x/y'}\n", "spec.model.parameters: needed to size the model"),
        ("spec:\n  model: {uri: 's3://b/weights', parameters: 1B}\n", "spec.model.format: cannot infer the format"),
        ("spec:\n  model: {modelRef: nope}\n", "spec.model.modelRef: Model 'nope' not found"),
        ("spec:\n  model: {uri: 'hf://x/y', parameters: 8 billion}\n", "spec.model.parameters: String should match"),
        (
            "spec:\n  model: {uri: 'hf://x/y.gguf', parameters: 8B, format: safetensors, quantization: q4_k_m}\n",
            "model.format must be gguf",
        ),
    ],
)
def test_invalid_input_exits_2_naming_the_field(tmp_path: Path, manifest: str, message: str) -> None:
    f = tmp_path / "ib.yaml"
    f.write_text(
        "apiVersion: serving.inferencebackend.io/v1alpha1\nkind: InferenceBackend\nmetadata: {name: x}\n" + manifest
    )
    res = run("select", "-f", str(f), "--nodes", "docs/examples/nodes/mixed.yaml")
    assert res.returncode == 2, res.stdout
    assert message in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("spec: [\n")
    res = run("select", "-f", str(f), "--nodes", "docs/examples/nodes/mixed.yaml")
    assert res.returncode == 2 and "not valid YAML" in res.stderr and "Traceback" not in res.stderr
    res = run("select", "-f", str(tmp_path / "none.yaml"), "--nodes", "docs/examples/nodes/mixed.yaml")
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_several_documents_one_json_line_each(tmp_path: Path) -> None:
    docs = [(ROOT / "docs/examples" / n).read_text() for n in ("pytorch-research.yaml", "vllm-llama-3-1-70b-tp.yaml")]
    f = tmp_path / "two.yaml"
    f.write_text("\n---\n".join(docs))
    res = run("select", "-f", str(f), "--nodes", "docs/examples/nodes/cpu-only.yaml", "-o", "json")
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(o["name"], o["satisfiable"]) for o in lines] == [("research-gpt", True), ("llama-70b", False)]
    assert res.returncode == 3
