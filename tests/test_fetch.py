"""inference-backend fetch against a real S3-compatible server (moto's server mode on 127.0.0.1)."""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

from inference_backend.cli import main  # noqa: E402
from inference_backend.fetch import FetchError, fetch  # noqa: E402

FILES = {
    "llama/config.json": b'{"model_type": "llama"}',
    "llama/model-00001.safetensors": b"x" * 300_000,
    "llama/tokenizer/tokenizer.json": b'{"version": "1.0"}',
    "other/unrelated.bin": b"nope",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    mp = pytest.MonkeyPatch()
    for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_ENDPOINT_URL": endpoint,
                       "AWS_REGION": "us-east-1"}.items():  # fmt: skip
        mp.setenv(key, value)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="models")
    for key, body in FILES.items():
        client.put_object(Bucket="models", Key=key, Body=body)
    try:
        yield endpoint
    finally:
        mp.undo()
        server.stop()


def test_prefix_copied_recursively(s3: str, tmp_path: Path) -> None:
    out = io.StringIO()
    files = fetch("s3://models/llama/", tmp_path, out)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in files) == [
        "config.json", "model-00001.safetensors", "tokenizer/tokenizer.json"]  # fmt: skip
    assert (tmp_path / "model-00001.safetensors").read_bytes() == FILES["llama/model-00001.safetensors"]
    assert not (tmp_path / "unrelated.bin").exists()
    assert "3 file(s)" in out.getvalue() and "fetch done" in out.getvalue()


def test_single_file(s3: str, tmp_path: Path) -> None:
    fetch("s3://models/llama/config.json", tmp_path, io.StringIO())
    assert (tmp_path / "config.json").read_bytes() == FILES["llama/config.json"]


def test_idempotent_skips_complete_files_and_redoes_partial(s3: str, tmp_path: Path) -> None:
    fetch("s3://models/llama", tmp_path, io.StringIO())
    (tmp_path / "config.json").write_bytes(b"{")  # truncated: wrong size
    out = io.StringIO()
    fetch("s3://models/llama", tmp_path, out)
    assert out.getvalue().count("skipped") == 2
    assert (tmp_path / "config.json").read_bytes() == FILES["llama/config.json"]


def test_missing_object_is_a_clear_error(s3: str, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="s3://models/nothing-here: not found"):
        fetch("s3://models/nothing-here", tmp_path, io.StringIO())


def test_cli_exit_codes(s3: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fetch", "s3://models/llama/", str(tmp_path)]) == 0
    assert main(["fetch", "s3://no-such-bucket/x", str(tmp_path)]) == 1
    assert "error: s3://no-such-bucket/x" in capsys.readouterr().err
    assert main(["fetch", "ftp://x/y", str(tmp_path)]) == 1
