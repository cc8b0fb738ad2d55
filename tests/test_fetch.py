"""inference-backend fetch against a real S3-compatible server (moto's server mode on 127.0.0.1): recursive copies,
idempotence, parallel GETs (counted server-side, ib_testkit.stores.S3Server), the completion marker a model cache
relies on (a second run into the same directory sends no GET), and an interrupted download completed."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")

from ib_testkit.stores import S3Server, put_objects  # noqa: E402
from inference_backend.cli import main  # noqa: E402
from inference_backend.fetch import MARKER, FetchError, fetch  # noqa: E402

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
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
    }.items():
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
        "config.json",
        "model-00001.safetensors",
        "tokenizer/tokenizer.json",
    ]
    assert (tmp_path / "model-00001.safetensors").read_bytes() == FILES["llama/model-00001.safetensors"]
    assert not (tmp_path / "unrelated.bin").exists()
    assert "3 file(s)" in out.getvalue() and "fetch done" in out.getvalue()


def test_single_file(s3: str, tmp_path: Path) -> None:
    fetch("s3://models/llama/config.json", tmp_path, io.StringIO())
    assert (tmp_path / "config.json").read_bytes() == FILES["llama/config.json"]


def test_idempotent_skips_complete_files_and_redoes_partial(s3: str, tmp_path: Path) -> None:
    fetch("s3://models/llama", tmp_path, io.StringIO())
    # An interrupted run: no completion marker, one file truncated (wrong size).
    (tmp_path / MARKER).unlink()
    (tmp_path / "config.json").write_bytes(b"{")
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


# ---- parallel downloads and the model cache, with requests counted by the server ------------------------------

MANY = {f"shards/model-{i:05d}-of-00008.safetensors": bytes([i]) * 50_000 for i in range(8)} | {
    "shards/config.json": b'{"model_type": "llama"}'
}


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A fresh moto server whose first two object GETs wait for each other at a barrier (5 s at most)."""
    server = S3Server(barrier_parties=2).start()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    put_objects(server.endpoint, "models", MANY.items())
    server.reset()
    try:
        yield server
    finally:
        server.stop()


def test_prefix_objects_are_downloaded_concurrently(counted: S3Server, tmp_path: Path) -> None:
    """Two GETs in flight at once, seen by the server (a sequential client breaks the barrier: max stays 1)."""
    out = io.StringIO()
    files = fetch("s3://models/shards/", tmp_path, out, workers=4)
    assert len(files) == 9
    assert counted.max_concurrent_gets >= 2, counted.max_concurrent_gets
    assert "4 at a time" in out.getvalue()
    for rel, body in MANY.items():
        assert (tmp_path / rel.removeprefix("shards/")).read_bytes() == body


def test_one_worker_is_sequential(counted: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counterpart that shows the count can fail: IB_FETCH_WORKERS=1 never has two GETs in flight."""
    monkeypatch.setenv("IB_FETCH_WORKERS", "1")
    fetch("s3://models/shards/", tmp_path, io.StringIO())
    assert counted.max_concurrent_gets == 1


def test_workers_out_of_range_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IB_FETCH_WORKERS", "lots")
    with pytest.raises(FetchError, match="IB_FETCH_WORKERS='lots' is not an integer"):
        fetch("s3://models/x", tmp_path, io.StringIO())
    with pytest.raises(FetchError, match="workers must be 1 to 64"):
        fetch("s3://models/x", tmp_path, io.StringIO(), workers=0)


def test_cache_dir_second_run_downloads_nothing(
    counted: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI twice into one cache directory (a pod and its restart, or a second replica): the second run finds
    the completion marker and sends no request at all."""
    cache = tmp_path / "cache" / "s3-shards"
    assert main(["fetch", "s3://models/shards/", str(cache)]) == 0
    first = len(counted.object_gets())
    assert first >= 9
    counted.reset()
    assert main(["fetch", "s3://models/shards/", str(cache)]) == 0
    assert counted.requests == []
    assert "nothing to download" in capsys.readouterr().out
    # Another URI into the same directory is not taken for complete.
    put_objects(counted.endpoint, "other", [("m/config.json", b"{}")])
    counted.reset()
    assert main(["fetch", "s3://other/m/", str(cache)]) == 0
    assert len(counted.object_gets("/other/")) == 1


def test_interrupted_download_is_completed(counted: S3Server, tmp_path: Path) -> None:
    """A run killed mid-way leaves finished files and a .partial: the next run fetches only what is missing."""
    fetch("s3://models/shards/", tmp_path, io.StringIO())
    (tmp_path / MARKER).unlink()
    done = tmp_path / "model-00003-of-00008.safetensors"
    done.rename(done.with_name(done.name + ".partial"))
    done.with_name(done.name + ".partial").write_bytes(b"\\3" * 100)  # a truncated partial file
    (tmp_path / "model-00007-of-00008.safetensors").unlink()
    counted.reset()
    fetch("s3://models/shards/", tmp_path, io.StringIO())
    fetched = sorted(r.path.rsplit("/", 1)[1] for r in counted.object_gets())
    assert set(fetched) == {"model-00003-of-00008.safetensors", "model-00007-of-00008.safetensors"}, fetched
    assert done.read_bytes() == MANY["shards/model-00003-of-00008.safetensors"]
    assert not list(tmp_path.glob("*.partial"))
    assert (tmp_path / MARKER).is_file()


def test_a_second_pod_waits_for_the_first(counted: S3Server, tmp_path: Path) -> None:
    """Two concurrent first downloads into one cache (two replicas, two processes): one downloads, the other waits
    on the lock and then finds the marker; every object is fetched once."""
    cache = tmp_path / "cache"
    code = "import sys; from inference_backend.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "fetch", "s3://models/shards/", str(cache), "--workers", "2"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    texts = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], texts
    assert sum("completed by another pod" in t or "nothing to download" in t for t in texts) == 1, texts
    keys = [r.path for r in counted.object_gets()]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 9, keys


def test_links_planted_in_the_cache_are_removed_never_followed(s3: str, tmp_path: Path) -> None:
    """A .partial or .fetch.lock symlink planted in the cache made fetch write outside its directory."""
    dest, outside = tmp_path / "cache", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    victim = outside / "victim"
    victim.write_bytes(b"keep")
    same_size = outside / "same-size"
    same_size.write_bytes(b"y" * len(FILES["llama/config.json"]))
    (dest / "model-00001.safetensors.partial").symlink_to(victim)
    (dest / ".fetch.lock").symlink_to(outside / "lock")
    (dest / ".fetch-complete.json.tmp").symlink_to(outside / "marker")
    (dest / "tokenizer").symlink_to(outside)  # a directory on the way to tokenizer/tokenizer.json
    (dest / "config.json").symlink_to(same_size)  # the right size, but a link: not "already complete"
    out = io.StringIO()
    files = fetch("s3://models/llama/", dest, out)
    assert sorted(p.name for p in outside.iterdir()) == ["same-size", "victim"]
    assert victim.read_bytes() == b"keep" and same_size.read_bytes() == b"y" * len(FILES["llama/config.json"])
    for f in files:
        assert not f.is_symlink() and f.resolve().is_relative_to(dest.resolve()), f
    assert not (dest / "tokenizer").is_symlink()
    assert (dest / "tokenizer/tokenizer.json").read_bytes() == FILES["llama/tokenizer/tokenizer.json"]
    assert (dest / "config.json").read_bytes() == FILES["llama/config.json"]
    assert "removed the symbolic link" in out.getvalue()


def test_a_planted_marker_link_is_not_trusted(s3: str, tmp_path: Path) -> None:
    dest, forged = tmp_path / "cache", tmp_path / "forged.json"
    dest.mkdir()
    forged.write_text('{"uri": "s3://models/llama/", "patterns": [], "files": ["../../etc/passwd"]}')
    (dest / MARKER).symlink_to(forged)
    files = fetch("s3://models/llama/", dest, io.StringIO())
    assert {p.name for p in files} == {"config.json", "model-00001.safetensors", "tokenizer.json"}
    assert not (dest / MARKER).is_symlink()


def test_a_cache_directory_that_is_a_link_is_refused(s3: str, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cache").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FetchError, match="without following links"):
        fetch("s3://models/llama/", tmp_path / "cache", io.StringIO())


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "/etc/passwd", "a//b", "./a", "a/\x00"])
def test_listed_keys_that_leave_the_directory_are_refused(rel: str) -> None:
    from inference_backend.fetch import safe_parts

    with pytest.raises(FetchError, match="not a relative path inside"):
        safe_parts(rel)
