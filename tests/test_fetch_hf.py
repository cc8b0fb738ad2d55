"""``inference-backend fetch hf://...``: the real ``huggingface_hub`` client (snapshot_download, list_repo_files)
against a local HTTP server speaking the subset of the Hub's HTTP API they use (ib_testkit.stores.HubServer), with
HF_ENDPOINT pointed at it. The Hugging Face Hub itself cannot be reached from here (no internet), so this is the real
client against a local server, not the Hub: allow patterns, the token reaching the server as a Bearer header,
revisions, a dropped connection resumed with a Range request, a restart that completes an interrupted snapshot, and
a missing repository giving a clear error with exit code 1."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

from ib_testkit.stores import HubRepo, HubServer
from inference_backend.cli import main
from inference_backend.fetch import MARKER, FetchError, fetch, hf_allow_patterns, parse_hf

SHA = "89abcdef0123456789abcdef0123456789abcdef"
FILES = {
    "config.json": b'{"model_type": "llama"}',
    "tokenizer.json": b'{"version": "1.0"}',
    "tokenizer.model": b"sentencepiece",
    "model-00001-of-00002.safetensors": b"a" * 200_000,
    "model-00002-of-00002.safetensors": b"b" * 100_000,
    "pytorch_model.bin": b"old weights",
    "onnx/model.onnx": b"onnx graph",
    "gguf/model-q4_k_m.gguf": b"GGUF",
    "README.md": b"# a model",
}

BIG = bytes(range(256)) * (96 * 1024)  # 24 MiB: more than the client's 10 MiB read chunk, so half of it is kept


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    server = HubServer(
        repos={
            "acme/tiny": HubRepo(dict(FILES), sha=SHA),
            "acme/private": HubRepo({"config.json": b"{}", "model.safetensors": b"s" * 1000}, private=True),
            "acme/old": HubRepo({"config.json": b"{}", "pytorch_model.bin": b"p" * 10}),
            "acme/big": HubRepo({"config.json": b"{}", "model.safetensors": BIG}),
        },
        token="hf_secret_token",
    ).start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))  # never the user's cache or stored token
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        yield server
    finally:
        server.stop()


def _local(dest: Path) -> set[str]:
    return {
        p.relative_to(dest).as_posix()
        for p in dest.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(dest).parts and p.name not in (MARKER, ".fetch.lock")
    }


def test_repository_snapshot_takes_configs_tokenizers_and_safetensors(hub: HubServer, tmp_path: Path) -> None:
    out = io.StringIO()
    fetch("hf://acme/tiny", tmp_path, out)
    assert _local(tmp_path) == {
        "config.json",
        "tokenizer.json",
        "tokenizer.model",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    }
    assert (tmp_path / "model-00001-of-00002.safetensors").read_bytes() == FILES["model-00001-of-00002.safetensors"]
    got = {g.path.rsplit("/resolve/", 1)[1].split("/", 1)[1] for g in hub.file_gets()}
    assert "pytorch_model.bin" not in got and "onnx/model.onnx" not in got  # never requested, not just filtered


def test_format_selects_the_weights(hub: HubServer, tmp_path: Path) -> None:
    fetch("hf://acme/tiny", tmp_path / "onnx", io.StringIO(), fmt="onnx")
    assert "onnx/model.onnx" in _local(tmp_path / "onnx")
    assert not any(f.endswith(".safetensors") for f in _local(tmp_path / "onnx"))
    fetch("hf://acme/old", tmp_path / "old", io.StringIO())  # no safetensors: the PyTorch files
    assert _local(tmp_path / "old") == {"config.json", "pytorch_model.bin"}
    with pytest.raises(FetchError, match="no gguf weights"):
        fetch("hf://acme/old", tmp_path / "none", io.StringIO(), fmt="gguf")


def test_a_file_uri_and_include_patterns(hub: HubServer, tmp_path: Path) -> None:
    fetch("hf://acme/tiny/gguf/model-q4_k_m.gguf", tmp_path / "one", io.StringIO())
    assert _local(tmp_path / "one") == {"gguf/model-q4_k_m.gguf"}
    fetch("hf://acme/tiny", tmp_path / "inc", io.StringIO(), include=["*.json"])
    assert _local(tmp_path / "inc") == {"config.json", "tokenizer.json"}


def test_revision(hub: HubServer, tmp_path: Path) -> None:
    fetch(f"hf://acme/tiny@{SHA}/config.json", tmp_path, io.StringIO())
    assert _local(tmp_path) == {"config.json"}
    assert any(f"/resolve/{SHA}/config.json" in g.path for g in hub.file_gets())
    with pytest.raises(FetchError, match="revision v9 not found in acme/tiny"):
        fetch("hf://acme/tiny@v9", tmp_path / "x", io.StringIO())


def test_token_reaches_the_server_as_bearer(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FetchError, match="acme/private not found, or private and HF_TOKEN has no access"):
        fetch("hf://acme/private", tmp_path / "anon", io.StringIO())
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    fetch("hf://acme/private", tmp_path / "auth", io.StringIO())
    assert _local(tmp_path / "auth") == {"config.json", "model.safetensors"}
    gets = hub.file_gets("model.safetensors")
    assert gets and all(g.headers.get("authorization") == "Bearer hf_secret_token" for g in gets)


def test_dropped_connection_is_resumed_with_range(hub: HubServer, tmp_path: Path) -> None:
    """The server closes the connection half-way through a file: the client asks for the rest (Range from what it
    kept: whole 10 MiB chunks), and the file is complete and intact."""
    hub.drop_once.add("model.safetensors")
    fetch("hf://acme/big", tmp_path, io.StringIO())
    ranges = [g.headers.get("range") for g in hub.file_gets("model.safetensors")]
    assert len(ranges) == 2 and ranges[0] is None and ranges[1] == f"bytes={10 * 2**20}-", ranges
    assert (tmp_path / "model.safetensors").read_bytes() == BIG


def test_interrupted_snapshot_is_completed_by_the_next_run(hub: HubServer, tmp_path: Path) -> None:
    """A run that fails on one file (server errors) writes no marker; the next run downloads only that file (the
    client's metadata under DIR/.cache marks the others complete), then writes the marker; a third run sends no
    file request at all."""
    hub.fail.add("model-00002-of-00002.safetensors")
    assert main(["fetch", "hf://acme/tiny", str(tmp_path)]) == 1
    assert not (tmp_path / MARKER).exists()
    hub.fail.clear()
    hub.requests.clear()
    assert main(["fetch", "hf://acme/tiny", str(tmp_path)]) == 0
    again = {g.path.rsplit("/", 1)[1] for g in hub.file_gets()}
    assert again == {"model-00002-of-00002.safetensors"}, again
    assert (tmp_path / MARKER).is_file()
    hub.requests.clear()
    assert main(["fetch", "hf://acme/tiny", str(tmp_path)]) == 0
    assert hub.requests == []


def test_missing_repository_is_a_clear_error(
    hub: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fetch", "hf://acme/nothing-here", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "error: hf://acme/nothing-here: repository acme/nothing-here not found" in err, err
    assert "Traceback" not in err
    assert main(["fetch", "hf://acme/tiny/no-such-file.gguf", str(tmp_path / "f")]) == 1
    assert "hf://acme/tiny/no-such-file.gguf" in capsys.readouterr().err


def test_uri_parsing() -> None:
    assert parse_hf("hf://org/repo") == ("org/repo", None, None)
    assert parse_hf("hf://org/repo@v1.0/sub/file.gguf") == ("org/repo", "v1.0", "sub/file.gguf")
    for bad in ("hf://org", "hf://org/@x", "hf://org/repo@"):
        with pytest.raises(FetchError, match="expected hf://org/repo"):
            parse_hf(bad)
    assert "*.safetensors" in hf_allow_patterns(["a.safetensors", "b.bin"], None)
    assert "*.bin" in hf_allow_patterns(["b.bin"], None)
