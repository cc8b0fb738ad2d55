"""``inference-backend fetch URI DIR``: copy model weights from an object store into a local directory.

Runs as the init container of engine pods (engines/artifacts.py). fsspec with s3fs (s3://), gcsfs (gs://), the
HTTP filesystem (https://) and huggingface_hub's HfFileSystem (hf://, when installed). A URI naming one object
copies that file into DIR; a prefix is copied recursively, keeping relative paths. Idempotent: a file already in
DIR with the remote size is skipped, so a restarted init container resumes. Progress goes to stdout.

Credentials come from the environment (the pod sets them from the model's credentialsSecret): AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, optional AWS_ENDPOINT_URL and AWS_REGION for s3://; GOOGLE_APPLICATION_CREDENTIALS_JSON
(a service-account key) for gs://; HF_TOKEN for hf://.
"""

from __future__ import annotations

import json
import os
import posixpath
import sys
import time
from pathlib import Path
from typing import Any, TextIO

CHUNK = 8 * 2**20


class FetchError(RuntimeError):
    """The copy failed; the message says what and where."""


def _filesystem(scheme: str) -> Any:
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - fetch extra missing
        raise FetchError("fsspec is not installed (pip install 'inference-backend[fetch]')") from exc
    options: dict[str, Any] = {}
    if scheme == "s3":
        endpoint = os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            options["endpoint_url"] = endpoint
        region = os.environ.get("AWS_REGION")
        if region:
            options["client_kwargs"] = {"region_name": region}
        if not os.environ.get("AWS_ACCESS_KEY_ID"):
            options["anon"] = True
    elif scheme == "gs":
        creds = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS_JSON")
        if creds:
            try:
                options["token"] = json.loads(creds)
            except json.JSONDecodeError as exc:
                raise FetchError("GOOGLE_APPLICATION_CREDENTIALS_JSON is not valid JSON") from exc
        else:
            options["token"] = "anon"
    elif scheme == "hf":
        token = os.environ.get("HF_TOKEN")
        if token:
            options["token"] = token
    protocol = {"https": "https", "http": "http"}.get(scheme, scheme)
    try:
        return fsspec.filesystem(protocol, **options)
    except (ImportError, ValueError) as exc:
        raise FetchError(f"no filesystem for {scheme}:// ({exc})") from exc


def _plan(fs: Any, uri: str, scheme: str) -> list[tuple[str, str, int]]:
    """(remote path, relative local path, size) of every file to copy."""
    path = uri if scheme in ("http", "https") else uri.split("://", 1)[1]
    path = path.rstrip("/")  # HfFileSystem paths are "org/repo[/file]" too
    info = fs.info(path)
    if info.get("type") != "directory":
        return [(path, posixpath.basename(path), int(info.get("size") or 0))]
    files: dict[str, Any] = fs.find(path, detail=True)
    out = []
    for remote in sorted(files):
        meta = files[remote]
        if meta.get("type") == "directory":
            continue
        rel = posixpath.relpath(remote.split("://", 1)[-1], path.split("://", 1)[-1])
        out.append((remote, rel, int(meta.get("size") or 0)))
    if not out:
        raise FetchError(f"{uri}: no files under this prefix")
    return out


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def fetch(uri: str, dest: str | Path, out: TextIO = sys.stdout) -> list[Path]:
    """Copy ``uri`` (a file or a prefix) into ``dest``; returns the local files. Raises FetchError."""
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme not in ("s3", "gs", "hf", "https", "http"):
        raise FetchError(f"{uri}: unsupported scheme (s3://, gs://, hf://, https://)")
    fs = _filesystem(scheme)
    dest = Path(dest)
    try:
        plan = _plan(fs, uri, scheme)
    except FileNotFoundError as exc:
        raise FetchError(f"{uri}: not found") from exc
    except FetchError:
        raise
    except Exception as exc:  # botocore/gcsfs/http errors: report, never a traceback
        raise FetchError(f"{uri}: {type(exc).__name__}: {exc}") from exc
    total = sum(size for _, _, size in plan)
    print(f"fetch {uri} -> {dest}: {len(plan)} file(s), {_human(total)}", file=out, flush=True)
    done_bytes = 0
    local_files: list[Path] = []
    start = time.monotonic()
    for i, (remote, rel, size) in enumerate(plan, 1):
        target = dest / rel
        if not target.resolve().is_relative_to(dest.resolve()):
            raise FetchError(f"{remote}: refusing to write outside {dest}")
        local_files.append(target)
        if target.is_file() and target.stat().st_size == size:
            done_bytes += size
            print(f"[{i}/{len(plan)}] {rel}: complete ({_human(size)}), skipped", file=out, flush=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        try:
            with fs.open(remote, "rb") as src, open(partial, "wb") as dst:
                while chunk := src.read(CHUNK):
                    dst.write(chunk)
        except Exception as exc:
            partial.unlink(missing_ok=True)
            raise FetchError(f"{remote}: {type(exc).__name__}: {exc}") from exc
        if partial.stat().st_size != size and size:
            got = partial.stat().st_size
            partial.unlink(missing_ok=True)
            raise FetchError(f"{remote}: got {got} bytes, expected {size}")
        partial.replace(target)
        done_bytes += size
        rate = done_bytes / max(time.monotonic() - start, 1e-6)
        print(f"[{i}/{len(plan)}] {rel}: {_human(size)} ({_human(done_bytes)}/{_human(total)}, "
              f"{_human(rate)}/s)", file=out, flush=True)  # fmt: skip
    print(f"fetch done: {len(plan)} file(s) in {dest}", file=out, flush=True)
    return local_files
