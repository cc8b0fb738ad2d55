"""`inference-backend model inspect`: every printed field, per format, against the shape the artifact was made from.

Artifacts are real files written by the formats' libraries (safetensors.numpy, gguf.GGUFWriter, onnx.helper; see
ib_testkit.artifacts); expected values come from the shapes, not from the inspector. A model saved by transformers,
the runner's ONNX export and llama.cpp's converter are checked in tests/runners/test_model_inspect_artifacts.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit import artifacts as art
from ib_testkit.factories import cluster, node, spec
from inference_backend.api.model import Model
from inference_backend.modelinfo import tensors as tz
from inference_backend.modelinfo.vocab import vocab_hash
from inference_backend.quantity import parse_parameters
from inference_backend.selection import select

from tests.contracts.gguf_models import tiny_vocab, write_tiny_llama_gguf

TOKENS = [f"tok{i}" for i in range(253)] + ["<s>", "</s>", "<pad>"]  # 256 ids, the last three added tokens
LLAMA = dict(hidden=64, layers=3, heads=4, kv_heads=2, inter=160, vocab=256)
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 160,
    "vocab_size": 256,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
    "dtype": "bfloat16",
}
MOE = dict(hidden=64, layers=2, heads=8, kv_heads=2, inter=96, vocab=256, experts=8)
MIXTRAL_CONFIG = {  # the keys of Mixtral-8x7B's config.json, at a tiny size
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 96,
    "vocab_size": 256,
    "max_position_embeddings": 32768,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "dtype": "bfloat16",
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "inference_backend.cli", "model", "inspect", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)


def inspect(path: Path, *extra: str) -> dict[str, Any]:
    res = cli(str(path), "--uri", "s3://models/x", *extra)
    assert res.returncode == 0, res.stderr
    doc = yaml.safe_load(res.stdout)
    Model.model_validate(doc)  # what a user would kubectl apply: a valid Model
    assert doc["kind"] == "Model"
    return dict(doc["spec"])


def moe_active(shapes: art.Shapes, experts: int, used: int) -> int:
    routed = sum(math.prod(s) for n, s in shapes.items() if ".experts." in n)
    return art.count(shapes) - routed + routed // experts * used


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("artifacts")
    dense = art.llama_shapes(**LLAMA)
    moe = art.moe_shapes(**MOE)
    vocab, *_ = tiny_vocab(320)
    out = {
        "llama": art.hf_dir(root / "Llama-Tiny", LLAMA_CONFIG, dense, tokens=TOKENS),
        "llama-sharded": art.hf_dir(root / "sharded", LLAMA_CONFIG, dense, shards=3, tokens=TOKENS),
        "llama-f32": art.hf_dir(root / "f32", {**LLAMA_CONFIG, "dtype": "float32"}, dense, dtype="float32"),
        "mixtral": art.hf_dir(root / "mixtral", MIXTRAL_CONFIG, moe, tokens=TOKENS),
        "gguf-f32": write_tiny_llama_gguf(root / "tiny-f32.gguf", n_layer=2, n_embd=128, n_head=4, n_head_kv=2),
        "gguf-f16": write_tiny_llama_gguf(
            root / "tiny-f16.gguf", n_layer=3, n_embd=64, n_head=2, n_head_kv=1, f16=True, n_ctx_train=1024
        ),
        "gguf-moe": art.moe_gguf(root / "moe.gguf", vocab=vocab),
        "onnx": art.onnx_graph(root / "model.onnx", layers=3, kv_heads=2, head_dim=16, shapes=dense),
    }
    index_only = art.hf_dir(root / "index-only", LLAMA_CONFIG, dense, shards=2)
    for shard in index_only.glob("*.safetensors"):
        shard.unlink()
    out["index-only"] = index_only
    return out


def _dense(vocab: int = 256) -> int:
    return art.count(art.llama_shapes(**{**LLAMA, "vocab": vocab}))


# write_tiny_llama_gguf's shapes: token_embd + output (vocab x embd), output_norm; per layer two norms, q and o
# (embd x embd), k and v (kv heads x head dim x embd), gate/up/down (n_ff x embd); moe_gguf: experts x gate/up/down
GGUF_F32 = 2 * 320 * 128 + 128 + 2 * (2 * 128 + 2 * 128 * 128 + 2 * 64 * 128 + 3 * 256 * 128)
GGUF_F16 = 2 * 320 * 64 + 64 + 3 * (2 * 64 + 2 * 64 * 64 + 2 * 32 * 64 + 3 * 256 * 64)
_GGUF_MOE_LAYER = 2 * 64 + 2 * 64 * 64 + 2 * 32 * 64 + 4 * 64 + 3 * 4 * 96 * 64
GGUF_MOE = 2 * 320 * 64 + 64 + 2 * _GGUF_MOE_LAYER
GGUF_MOE_ACTIVE = GGUF_MOE - 2 * 3 * 4 * 96 * 64 + 2 * 3 * 2 * 96 * 64
MIX = art.moe_shapes(**MOE)

# (artifact, field, expected): every field each format prints
CASES: list[tuple[str, str, Any]] = [
    ("llama", "format", "safetensors"),
    ("llama", "architecture", "LlamaForCausalLM"),
    ("llama", "parameters", tz.parameters_text(_dense())),
    ("llama", "dtype", "bfloat16"),
    ("llama", "contextLength", 8192),
    ("llama", "layers", 3),
    ("llama", "attentionHeads", 4),
    ("llama", "kvHeads", 2),
    ("llama", "headDim", 16),
    ("llama", "tokenizer", {"family": "llama", "vocabSize": 256, "vocabHash": vocab_hash(TOKENS)}),
    ("llama", "experts", None),
    ("llama", "activeParameters", None),
    ("llama", "quantization", None),
    ("llama-sharded", "parameters", tz.parameters_text(_dense())),
    ("llama-sharded", "dtype", "bfloat16"),
    ("llama-f32", "dtype", "float32"),
    ("llama-f32", "tokenizer", None),
    ("index-only", "parameters", None),  # set below: total_size / 2 bytes (an estimate)
    ("mixtral", "architecture", "MixtralForCausalLM"),
    ("mixtral", "parameters", tz.parameters_text(art.count(MIX))),
    ("mixtral", "activeParameters", tz.parameters_text(moe_active(MIX, 8, 2))),
    ("mixtral", "experts", 8),
    ("mixtral", "activeExpertsPerToken", 2),
    ("mixtral", "attentionHeads", 8),
    ("mixtral", "kvHeads", 2),
    ("mixtral", "headDim", 8),
    ("mixtral", "contextLength", 32768),
    ("mixtral", "tokenizer", {"family": "mixtral", "vocabSize": 256, "vocabHash": vocab_hash(TOKENS)}),
    ("gguf-f32", "format", "gguf"),
    ("gguf-f32", "parameters", tz.parameters_text(GGUF_F32)),
    ("gguf-f32", "quantization", "f32"),
    ("gguf-f32", "dtype", "float32"),
    ("gguf-f32", "layers", 2),
    ("gguf-f32", "attentionHeads", 4),
    ("gguf-f32", "kvHeads", 2),
    ("gguf-f32", "headDim", 32),
    ("gguf-f32", "contextLength", 4096),
    ("gguf-f32", "architecture", None),
    ("gguf-f32", "tokenizer", {"family": "gpt-2", "vocabSize": 320, "vocabHash": vocab_hash(tiny_vocab(320)[0])}),
    ("gguf-f16", "parameters", tz.parameters_text(GGUF_F16)),
    ("gguf-f16", "quantization", "f16"),
    ("gguf-f16", "dtype", "float16"),
    ("gguf-f16", "layers", 3),
    ("gguf-f16", "attentionHeads", 2),
    ("gguf-f16", "kvHeads", 1),
    ("gguf-f16", "headDim", 32),
    ("gguf-f16", "contextLength", 1024),
    ("gguf-moe", "parameters", tz.parameters_text(GGUF_MOE)),
    ("gguf-moe", "activeParameters", tz.parameters_text(GGUF_MOE_ACTIVE)),
    ("gguf-moe", "experts", 4),
    ("gguf-moe", "activeExpertsPerToken", 2),
    ("gguf-moe", "contextLength", 2048),
    ("onnx", "format", "onnx"),
    ("onnx", "parameters", tz.parameters_text(_dense())),
    ("onnx", "dtype", "float32"),
    ("onnx", "layers", 3),
    ("onnx", "kvHeads", 2),
    ("onnx", "headDim", 16),
    ("onnx", "tokenizer", None),
]


def _id(case: tuple[str, str, Any]) -> str:
    artifact, field, expected = case
    return f"{artifact}-{field}={expected if not isinstance(expected, dict) else expected['family']}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_printed_field(case: tuple[str, str, Any], made: dict[str, Path]) -> None:
    artifact, field, expected = case
    got = _specs(made)[artifact].get(field)
    if artifact == "index-only" and field == "parameters":
        total = json.loads((made[artifact] / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
        expected = tz.parameters_text(total // 2)
    assert got == expected


_SPECS: dict[str, dict[str, Any]] = {}


def _specs(made: dict[str, Path]) -> dict[str, dict[str, Any]]:
    if not _SPECS:
        _SPECS.update({name: inspect(path) for name, path in made.items()})
    return _SPECS


def test_parameters_text_is_exact_and_parses_back() -> None:
    for n in (1, 999, 1000, 115_008, 8_030_261_248, 46_702_792_704, 1_000_000_000_000, 405_853_388_800):
        text = tz.parameters_text(n)
        assert parse_parameters(text) == n, text
    assert tz.parameters_text(8_030_261_248) == "8.030261248B"


def test_default_name_and_uri_from_a_hub_cache_path(tmp_path: Path, made: dict[str, Path]) -> None:
    snap = tmp_path / "hub" / "models--meta-llama--Llama-3.2-1B" / "snapshots" / "4e20de362430cd3b72f300e6b0f18e50"
    snap.parent.mkdir(parents=True)
    snap.symlink_to(made["llama"], target_is_directory=True)
    res = cli(str(snap))
    assert res.returncode == 0, res.stderr
    doc = yaml.safe_load(res.stdout)
    assert doc["metadata"] == {"name": "llama-3-2-1b"}
    assert doc["spec"]["uri"] == "hf://meta-llama/Llama-3.2-1B"


def test_name_namespace_and_json(made: dict[str, Path]) -> None:
    res = cli(str(made["llama"]), "--uri", "hf://org/llama-tiny", "--namespace", "ml", "-o", "json")
    doc = json.loads(res.stdout)
    assert doc["metadata"] == {"name": "llama-tiny", "namespace": "ml"}
    res = cli(str(made["mixtral"]), "--uri", "hf://org/m", "--name", "mixtral-tiny")
    assert yaml.safe_load(res.stdout)["metadata"]["name"] == "mixtral-tiny"
    assert "#   activeParameters: safetensors headers" in res.stdout  # the comments name each fact's source


def test_an_inspected_model_drives_select(made: dict[str, Path], tmp_path: Path) -> None:
    """The printed Model is usable as printed: `select --models` sizes the served model with its facts."""
    models = tmp_path / "models.yaml"
    models.write_text(cli(str(made["mixtral"]), "--uri", "hf://org/mixtral-tiny", "--name", "mix").stdout)
    ib = {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": "m"},
        "spec": {"model": {"modelRef": "mix"}},
    }
    (tmp_path / "ib.yaml").write_text(yaml.safe_dump(ib))
    nodes = {"apiVersion": "v1", "kind": "List", "items": [node("cpu-1", cpu="8", memory="32Gi")]}
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump(nodes))
    cmd = [
        sys.executable,
        "-m",
        "inference_backend.cli",
        "select",
        "-f",
        str(tmp_path / "ib.yaml"),
        "--nodes",
        str(tmp_path / "nodes.yaml"),
        "--models",
        str(models),
        "-o",
        "json",
    ]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    active = parse_parameters(tz.parameters_text(moe_active(MIX, 8, 2)))
    assert out["satisfiable"], out["reasons"]
    assert any(f"({active / 1e9:.2f}B active per token)" in r for r in out["reasons"]), out["reasons"]
    assert not any("built-in shape" in r for r in out["reasons"])  # layers, kvHeads, headDim came from the Model


ERRORS: list[tuple[str, str]] = [
    ("missing", "no such file or directory"),
    ("empty-dir", "unknown model format"),
    ("text-file", "unknown model format"),
    ("truncated-safetensors", "model.safetensors"),
    ("garbage-safetensors-json", "corrupt safetensors header"),
    ("missing-shard", "names shards that are missing"),
    ("bad-config-json", "config.json: not valid JSON"),
    ("not-gguf", "not a GGUF file"),
    ("truncated-gguf", "corrupt GGUF header"),
    ("garbage-onnx", "not a readable ONNX model"),
    ("unknown-quant-method", "quant_method 'hqq'"),
    ("no-uri", "pass --uri"),
]


@pytest.mark.parametrize(("case", "message"), ERRORS, ids=[c for c, _ in ERRORS])
def test_bad_artifacts_exit_2_naming_the_file(case: str, message: str, made: dict[str, Path], tmp_path: Path) -> None:
    target = _broken(case, made, tmp_path)
    res = cli(str(target)) if case == "no-uri" else cli(str(target), "--uri", "s3://b/x")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert res.stderr.startswith("error: ") and message in res.stderr, res.stderr
    assert str(target) in res.stderr  # names the file (or, for a directory, the file in it)


def _broken(case: str, made: dict[str, Path], tmp: Path) -> Path:
    import shutil

    def copy(name: str) -> Path:
        dst = tmp / name
        src = made[name]
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy(src, dst)
        return dst

    if case == "missing":
        return tmp / "nope"
    if case == "empty-dir":
        (tmp / "empty").mkdir()
        return tmp / "empty"
    if case == "text-file":
        (tmp / "README.txt").write_text("hello")
        return tmp / "README.txt"
    if case == "truncated-safetensors":
        d = copy("llama")
        f = d / "model.safetensors"
        f.write_bytes(f.read_bytes()[:-100])
        return d
    if case == "garbage-safetensors-json":
        d = copy("llama")
        f = d / "model.safetensors"
        raw = f.read_bytes()
        f.write_bytes(
            raw[:8] + b"{" * (int.from_bytes(raw[:8], "little")) + raw[8 + int.from_bytes(raw[:8], "little") :]
        )
        return d
    if case == "missing-shard":
        d = copy("llama-sharded")
        sorted(d.glob("*.safetensors"))[1].unlink()
        return d
    if case == "bad-config-json":
        d = copy("llama")
        (d / "config.json").write_text("{not json")
        return d
    if case == "not-gguf":
        (tmp / "model.gguf").write_bytes(b"PK\x03\x04 not a gguf")
        return tmp / "model.gguf"
    if case == "truncated-gguf":
        f = copy("gguf-f16")
        f.write_bytes(f.read_bytes()[:200])
        return f
    if case == "garbage-onnx":
        (tmp / "model.onnx").write_bytes(b"\xff\xfe garbage that is not a protobuf \x00\x01" * 10)
        return tmp / "model.onnx"
    if case == "unknown-quant-method":
        d = copy("llama")
        config = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "hqq"}}))
        return d
    if case == "no-uri":
        return made["llama"]
    raise AssertionError(case)


def test_awq_checkpoint_counts_unpacked_weights(tmp_path: Path) -> None:
    """AWQ packs 8 int4 weights per int32 (qweight [in, out/8]); qzeros and scales are not parameters."""
    shapes = dict(art.llama_shapes(**LLAMA))
    kinds: dict[str, str] = {}
    expected = art.count(shapes)
    for name in [n for n in shapes if n.endswith("_proj.weight")]:
        out_f, in_f = shapes.pop(name)
        base = name.removesuffix(".weight")
        shapes |= {
            base + ".qweight": (in_f, out_f // 8),
            base + ".qzeros": (in_f // 64, out_f // 8),
            base + ".scales": (in_f // 64, out_f),
        }
        kinds |= {base + ".qweight": "int32", base + ".qzeros": "int32", base + ".scales": "float16"}
    config = {
        **LLAMA_CONFIG,
        "dtype": "float16",
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 64},
    }
    d = art.hf_dir(tmp_path / "awq", config, shapes, dtype="float16", tensor_dtypes=kinds)
    got = inspect(d)
    assert got["parameters"] == tz.parameters_text(expected)
    assert got["quantization"] == "awq"


def test_moe_is_sized_by_total_and_rated_by_active_parameters() -> None:
    """Same total weights, one rated by 2 of 8 experts: the same memory, a faster estimate."""
    from inference_backend.api.model import ModelSpec

    total, active = "46.702792704B", "12.879925248B"
    base = {
        "uri": "hf://mistralai/Mixtral-8x7B-v0.1",
        "parameters": total,
        "dtype": "bfloat16",
        "layers": 32,
        "kvHeads": 8,
        "headDim": 128,
    }
    nodes = cluster(node("h100", gpu="h100", count=8))
    s = spec(model={"modelRef": "m"}, backend="vllm")
    dense = select(s, nodes, {"m": ModelSpec.model_validate(base)})
    moe = select(
        s,
        nodes,
        {"m": ModelSpec.model_validate({**base, "activeParameters": active, "experts": 8, "activeExpertsPerToken": 2})},
    )
    assert dense.memory == moe.memory  # all experts are loaded
    assert dense.placement == moe.placement
    assert moe.estimate["ttftMillis"] < dense.estimate["ttftMillis"]
    assert moe.estimate["tokensPerSecond"] > dense.estimate["tokensPerSecond"]
    assert any("12.88B active per token" in r for r in moe.reasons)


@pytest.mark.parametrize(
    ("target", "draft", "accepted"),
    [
        (("llama3", "a"), ("llama3", "a"), True),
        (("llama", "a"), ("llama-bpe", "a"), True),  # same vocabulary, families named by different formats
        (("llama3", "a"), ("llama3", "b"), False),  # same family name, other vocabulary
        (("llama3", None), ("llama3", "b"), True),  # one side without a hash: the family decides
    ],
    ids=["same-hash", "hash-overrides-family-name", "hash-differs", "one-hash-missing"],
)
def test_draft_check_compares_vocab_hashes(
    target: tuple[str, str | None], draft: tuple[str, str | None], accepted: bool
) -> None:
    from inference_backend.api.model import ModelSpec
    from inference_backend.selection.model import draft_incompatibility, resolve_draft

    def model(params: str, tok: tuple[str, str | None]) -> ModelSpec:
        hashes = {"a": "sha256:" + "a" * 64, "b": "sha256:" + "b" * 64}
        tokenizer: dict[str, Any] = {"family": tok[0], "vocabSize": 128256}
        if tok[1]:
            tokenizer["vocabHash"] = hashes[tok[1]]
        return ModelSpec.model_validate({"uri": "hf://o/m", "parameters": params, "tokenizer": tokenizer})

    registry = {"t": model("8B", target), "d": model("1B", draft)}
    why = draft_incompatibility(resolve_draft("t", registry), resolve_draft("d", registry))
    assert (why is None) == accepted, why
