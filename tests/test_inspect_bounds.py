"""`model inspect` is bounded: every hostile artifact (ib_testkit.hostile_files) exits 2 naming the file, and large
real ones are read, each in a process limited to 20 s of CPU and 1 GiB of address space (resource.setrlimit), so a
loop, a quadratic conversion or a runaway allocation fails the test instead of the machine.

The GGUF reader (modelinfo/gguf_header.py) is also held to gguf-py's reader on the same file."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
from ib_testkit import gguf_files
from ib_testkit.hostile_files import HOSTILE, outside

CPU_SECONDS, ADDRESS_SPACE = 20, 2**30


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def inspect(path: Path, uri: str = "s3://bucket/model") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inference_backend.cli", "model", "inspect", str(path), "--uri", uri],
        preexec_fn=_limits,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("hostile")
    outside(r)
    return r


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_artifacts_exit_2_naming_the_file_within_limits(case: str, root: Path) -> None:
    path = HOSTILE[case](root)
    res = inspect(path)
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr
    assert str(path) in res.stderr, res.stderr
    assert "parameters" not in res.stdout  # nothing counted, from outside.safetensors or anywhere


def test_a_realistic_llama3_header_and_a_million_tokens_are_read_within_limits(tmp_path: Path) -> None:
    """A Llama-3 GGUF header took 17 s and 668 MiB, one with 1,000,000 tokens over 20 s and 1.4 GiB."""
    real = gguf_files.llama3_8b_q4_k_m(tmp_path / "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    res = inspect(real, "hf://bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "vocabSize: 128256" in res.stdout and "parameters: 8.030261312B" in res.stdout
    assert "quantization: q4_k_m" in res.stdout
    big = gguf_files.llama3_8b_q4_k_m(tmp_path / "million.gguf", n_tokens=1_000_000, n_merges=10)
    res = inspect(big, "hf://o/m/million.gguf")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "vocabSize: 1000000" in res.stdout


def test_the_gguf_reader_agrees_with_gguf_py(tmp_path: Path) -> None:
    """The same file through gguf-py's GGUFReader (llama.cpp's reference reader): every key it reads that ours keeps
    has the same value, the skipped arrays have the same lengths, the tensor table is the same."""
    gguf = pytest.importorskip("gguf")
    from inference_backend.modelinfo.gguf_header import read_header

    path = gguf_files.llama3_8b_q4_k_m(tmp_path / "small-vocab.gguf", n_tokens=3000, n_merges=2000)
    ref = gguf.GGUFReader(str(path), "r")
    ours = read_header(path, {int(k): v for k, v in gguf.GGML_QUANT_SIZES.items()})
    assert set(ours.fields) | set(ours.skipped) == {k for k in ref.fields if not k.startswith("GGUF.")}
    for key, field in ref.fields.items():
        if key.startswith("GGUF."):
            continue
        if key in ours.skipped:
            assert ours.skipped[key] == len(field.data), key
            continue
        value = field.contents()
        if isinstance(value, float):
            assert ours.fields[key] == pytest.approx(value), key
        else:
            assert ours.fields[key] == value, key
    assert [(t.name, t.shape, t.type) for t in ours.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type)) for t in ref.tensors
    ]
    assert sum(t.n_elements for t in ours.tensors) == sum(int(t.n_elements) for t in ref.tensors)
    assert ours.data_start == ref.data_offset


def test_a_hub_cache_snapshot_linking_to_its_blobs_is_read(tmp_path: Path) -> None:
    """Links are followed only inside the directory or the hub cache repository holding it (snapshots/REV/FILE ->
    ../../blobs/HASH, as huggingface_hub lays them out); a link elsewhere is refused (the hostile cases above)."""
    import json
    import struct

    repo = tmp_path / "hub" / "models--org--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / "0123abcd"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    files = {
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1}).encode(),
        "model.safetensors": struct.pack("<Q", len(header)) + header + bytes(16),
    }
    for i, (name, body) in enumerate(files.items()):
        (blobs / f"blob{i}").write_bytes(body)
        (snap / name).symlink_to(f"../../blobs/blob{i}")
    res = inspect(snap, "hf://org/tiny")
    assert res.returncode == 0, res.stderr
    assert "parameters: 0.004K" in res.stdout
