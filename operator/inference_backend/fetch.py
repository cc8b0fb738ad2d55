"""``inference-backend fetch URI DIR``: copy model weights from a model store into a local directory.

Runs as the init container of engine pods (engines/artifacts.py), into an emptyDir or the model cache
(``spec.model.cache``: a PVC or a node path shared by the pods of a backend).

- ``s3://``, ``gs://``, ``https://``: fsspec (s3fs, gcsfs, the HTTP filesystem). A URI naming one object copies that
  file into DIR; a prefix is copied recursively, keeping relative paths, ``workers`` objects at a time (``--workers``,
  env ``IB_FETCH_WORKERS``, default 8). A file already in DIR with the remote size is skipped; a partial one (a
  ``.partial`` file, or a wrong size) is downloaded again.
- ``hf://org/repo[@revision][/file]``: ``huggingface_hub.snapshot_download`` into DIR, with allow patterns: the file
  the URI names, else the configs and tokenizer files plus the weights of ``--format`` (default safetensors, falling
  back to PyTorch ``.bin``/``.pt`` when the repository has no safetensors); ``--include`` replaces them. The Hub
  client skips files it already completed (its metadata under DIR/.cache/huggingface), resumes a file whose
  connection dropped (HTTP Range) within a run, and downloads a file interrupted by a restart again.

Once everything is in DIR, ``DIR/.fetch-complete.json`` is written atomically (rename), naming the URI and the
patterns; a later run for the same URI and patterns finds it and does nothing (no request at all): a restarted pod or
a second replica on the same cache. Concurrent runs into one DIR (two replicas' first start) take turns on a lock
(``fcntl.lockf`` on DIR/.fetch.lock: local disks and NFS); the second finds the marker the first wrote.

Credentials come from the environment (the pod sets them from the model's credentialsSecret): AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, optional AWS_ENDPOINT_URL and AWS_REGION for s3://; GOOGLE_APPLICATION_CREDENTIALS_JSON
(a service-account key) for gs://; HF_TOKEN for hf:// (sent as ``Authorization: Bearer``; HF_ENDPOINT selects a
mirror of the Hub).
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import os
import posixpath
import stat
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

CHUNK = 8 * 2**20
DEFAULT_WORKERS = 8
"""Objects downloaded at a time (S3/GCS prefixes, Hub repositories): ``--workers`` or env IB_FETCH_WORKERS."""
MAX_WORKERS = 64
MARKER = ".fetch-complete.json"
LOCK = ".fetch.lock"
FORMATS = ("safetensors", "pytorch", "onnx", "gguf")
# What an engine reads beside the weights: configs, tokenizers (BPE merges/vocab, sentencepiece, tiktoken), chat
# templates.
_SUPPORT_PATTERNS = ("*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.py")
_WEIGHT_PATTERNS: dict[str, tuple[str, ...]] = {
    "safetensors": ("*.safetensors",),
    "pytorch": ("*.bin", "*.pt", "*.pth"),
    "onnx": ("*.onnx", "*.onnx_data", "*.onnx.data", "*.data"),
    "gguf": ("*.gguf",),
}


class FetchError(RuntimeError):
    """The copy failed; the message says what and where."""


# ---- writing inside DIR only: no path leaves it, no symbolic link is followed ---------------------------------
# The cache volume is shared by the backend's pods, so what is in DIR may have been planted: every file is opened
# relative to a directory descriptor with O_NOFOLLOW (openat semantics), and a symbolic link found where fetch writes
# (a .partial, the lock, the marker, a directory on the way) is removed, never followed.

_NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def safe_parts(rel: str) -> list[str]:
    """The components of a relative path inside DIR; FetchError for an absolute path, ``..``, ``.`` or an empty
    component (a listing's key ``a/../../x`` must not leave DIR)."""
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") or "\x00" in p for p in parts):
        raise FetchError(f"{rel!r}: not a relative path inside the destination directory")
    return parts


def _unlink_link(dir_fd: int, name: str, out: TextIO | None) -> bool:
    """Remove ``name`` if it is a symbolic link (never following it); whether it was one."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISLNK(st.st_mode):
        return False
    os.unlink(name, dir_fd=dir_fd)
    if out is not None:
        print(
            f"fetch: removed the symbolic link {name} planted where fetch writes (never followed)", file=out, flush=True
        )
    return True


def open_dir(path: Path) -> int:
    """A descriptor of the destination directory itself (created if missing; never a symbolic link)."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError as exc:
        raise FetchError(f"{path}: cannot open the destination directory without following links ({exc})") from exc


def open_subdir(dir_fd: int, parts: Sequence[str], out: TextIO | None) -> int:
    """A descriptor of ``parts`` under ``dir_fd``, each created if missing, none a followed link."""
    fd = os.dup(dir_fd)
    try:
        for name in parts:
            _unlink_link(fd, name, out)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(dir_fd: int, name: str, flags: int, out: TextIO | None, mode: int = 0o644) -> int:
    """``os.open`` of ``name`` under ``dir_fd`` that never follows a link: one planted there is removed first."""
    _unlink_link(dir_fd, name, out)
    return os.open(name, flags | _NOFOLLOW, mode, dir_fd=dir_fd)


def regular_size(dir_fd: int, name: str) -> int | None:
    """The size of ``name`` when it is a regular file (not a link), else None."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def workers_from_env(value: int | None = None) -> int:
    """``value``, else env IB_FETCH_WORKERS, else DEFAULT_WORKERS; 1 to MAX_WORKERS."""
    if value is None:
        raw = os.environ.get("IB_FETCH_WORKERS", "")
        try:
            value = int(raw) if raw else DEFAULT_WORKERS
        except ValueError as exc:
            raise FetchError(f"IB_FETCH_WORKERS={raw!r} is not an integer") from exc
    if not 1 <= value <= MAX_WORKERS:
        raise FetchError(f"workers must be 1 to {MAX_WORKERS}, got {value}")
    return value


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
    protocol = {"https": "https", "http": "http"}.get(scheme, scheme)
    try:
        return fsspec.filesystem(protocol, **options)
    except (ImportError, ValueError) as exc:
        raise FetchError(f"no filesystem for {scheme}:// ({exc})") from exc


def _plan(fs: Any, uri: str, scheme: str, include: Sequence[str]) -> list[tuple[str, str, int]]:
    """(remote path, relative local path, size) of every file to copy."""
    path = uri if scheme in ("http", "https") else uri.split("://", 1)[1]
    path = path.rstrip("/")
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
        if include and not _matches(rel, include):
            continue
        out.append((remote, rel, int(meta.get("size") or 0)))
    if not out:
        raise FetchError(f"{uri}: no files under this prefix" + (f" match {list(include)}" if include else ""))
    return out


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(posixpath.basename(rel), p) for p in patterns)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


@contextlib.contextmanager
def _locked(dest: Path, dir_fd: int, out: TextIO) -> Iterator[None]:
    """Hold DIR/.fetch.lock (fcntl.lockf: POSIX record locks, which NFS honours) while fetching into DIR."""
    with os.fdopen(open_file(dir_fd, LOCK, os.O_RDWR | os.O_CREAT, out), "a+") as handle:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"fetch: {dest} is being filled by another pod; waiting for it", file=out, flush=True)
            fcntl.lockf(handle, fcntl.LOCK_EX)
        except OSError as exc:  # a filesystem without locks: the .partial protocol still never exposes half files
            print(f"fetch: no lock on {dest} ({exc}); continuing without", file=out, flush=True)
        yield


def _marker(uri: str, patterns: Sequence[str]) -> dict[str, Any]:
    return {"uri": uri, "patterns": list(patterns)}


def _read_marker(dir_fd: int) -> Any:
    """The marker's JSON, or None (missing, unreadable, or a link: a planted link is not trusted)."""
    try:
        with os.fdopen(os.open(MARKER, os.O_RDONLY | _NOFOLLOW, dir_fd=dir_fd), "rb") as f:
            return json.loads(f.read(2**20))
    except (OSError, ValueError):
        return None


def _is_complete(dir_fd: int, marker: dict[str, Any]) -> bool:
    found = _read_marker(dir_fd)
    return isinstance(found, dict) and {k: found.get(k) for k in marker} == marker


def _write_marker(dest: Path, dir_fd: int, marker: dict[str, Any], files: list[Path]) -> None:
    tmp = MARKER + ".tmp"
    body = marker | {"files": sorted(p.relative_to(dest).as_posix() for p in files), "completedAt": time.time()}
    with os.fdopen(open_file(dir_fd, tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, None), "w") as f:
        f.write(json.dumps(body, indent=1) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, MARKER, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def fetch(
    uri: str,
    dest: str | Path,
    out: TextIO | None = None,
    *,
    fmt: str | None = None,
    include: Sequence[str] = (),
    workers: int | None = None,
) -> list[Path]:
    """Copy ``uri`` (a file or a prefix) into ``dest``; returns the local files. Raises FetchError.

    ``fmt``: the weight format the engine reads (hf:// repositories; default safetensors). ``include``: glob
    patterns of the files to copy (relative paths or base names), instead of the defaults. ``workers``: objects
    at a time (default: env IB_FETCH_WORKERS or 8)."""
    out = out or sys.stdout
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme not in ("s3", "gs", "hf", "https", "http"):
        raise FetchError(f"{uri}: unsupported scheme (s3://, gs://, hf://, https://)")
    if fmt is not None and fmt not in FORMATS:
        raise FetchError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    n = workers_from_env(workers)
    dest = Path(dest)
    dir_fd = open_dir(dest)
    try:
        return _fetch_into(uri, scheme, dest, dir_fd, out, fmt, include, n)
    finally:
        os.close(dir_fd)


def _fetch_into(
    uri: str, scheme: str, dest: Path, dir_fd: int, out: TextIO, fmt: str | None, include: Sequence[str], n: int
) -> list[Path]:
    marker = _marker(uri, [*include, *([f"format={fmt}"] if fmt else [])])
    if _is_complete(dir_fd, marker):
        print(f"fetch {uri} -> {dest}: complete ({MARKER}), nothing to download", file=out, flush=True)
        return _listed(dest, dir_fd)
    with _locked(dest, dir_fd, out):
        if _is_complete(dir_fd, marker):  # another pod finished while this one waited for the lock
            print(f"fetch {uri} -> {dest}: completed by another pod, nothing to download", file=out, flush=True)
            return _listed(dest, dir_fd)
        if scheme == "hf":
            files = _fetch_hf(uri, dest, out, fmt, include, n)
        else:
            files = _fetch_fs(uri, scheme, dest, dir_fd, out, include, n)
        _write_marker(dest, dir_fd, marker, files)
    print(f"fetch done: {len(files)} file(s) in {dest}", file=out, flush=True)
    return files


def _listed(dest: Path, dir_fd: int) -> list[Path]:
    found = _read_marker(dir_fd)
    names = found.get("files") if isinstance(found, dict) else None
    return [dest.joinpath(*safe_parts(str(rel))) for rel in names or []]


# ---- object stores: s3://, gs://, https:// ---------------------------------------------------------------------


def _fetch_fs(
    uri: str, scheme: str, dest: Path, dir_fd: int, out: TextIO, include: Sequence[str], workers: int
) -> list[Path]:
    fs = _filesystem(scheme)
    try:
        plan = _plan(fs, uri, scheme, include)
    except FileNotFoundError as exc:
        raise FetchError(f"{uri}: not found") from exc
    except FetchError:
        raise
    except Exception as exc:  # botocore/gcsfs/http errors: report, never a traceback
        raise FetchError(f"{uri}: {type(exc).__name__}: {exc}") from exc
    total = sum(size for _, _, size in plan)
    n = min(workers, len(plan))
    print(f"fetch {uri} -> {dest}: {len(plan)} file(s), {_human(total)}, {n} at a time", file=out, flush=True)
    progress = _Progress(out, len(plan), total)
    targets: list[Path] = []
    for remote, rel, _ in plan:
        try:
            targets.append(dest.joinpath(*safe_parts(rel)))
        except FetchError as exc:
            raise FetchError(f"{remote}: refusing to write outside {dest} ({exc})") from exc
    lock = threading.Lock()  # directories are made one at a time (two workers may share a parent)

    def one(item: tuple[tuple[str, str, int], Path]) -> None:
        (remote, rel, size), _ = item
        *parents, name = safe_parts(rel)
        with lock:
            fd = open_subdir(dir_fd, parents, out)
        try:
            _copy(fs, remote, fd, name, size, rel, out, progress)
        finally:
            os.close(fd)

    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="fetch") as pool:
        # list() re-raises the first FetchError; the pool finishes (or fails) the downloads already started.
        list(pool.map(one, zip(plan, targets, strict=True)))
    return targets


def _copy(fs: Any, remote: str, dir_fd: int, name: str, size: int, rel: str, out: TextIO, progress: _Progress) -> None:
    """One object into ``name`` under ``dir_fd`` through ``name.partial`` (created anew, never through a link)."""
    if regular_size(dir_fd, name) == size:
        progress.done(rel, size, skipped=True)
        return
    partial = name + ".partial"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial, dir_fd=dir_fd)  # a link or a leftover: removed, not followed
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=dir_fd)
        with fs.open(remote, "rb") as src, os.fdopen(fd, "wb") as dst:
            while chunk := src.read(CHUNK):
                dst.write(chunk)
    except Exception as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial, dir_fd=dir_fd)
        raise FetchError(f"{remote}: {type(exc).__name__}: {exc}") from exc
    got = regular_size(dir_fd, partial)
    if got != size and size:
        os.unlink(partial, dir_fd=dir_fd)
        raise FetchError(f"{remote}: got {got} bytes, expected {size}")
    os.replace(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # replaces a link at name, never follows it
    progress.done(rel, size)


class _Progress:
    """Progress lines from the download threads: one per file, with the running total and rate."""

    def __init__(self, out: TextIO, files: int, total: int) -> None:
        self.out, self.files, self.total = out, files, total
        self.count = self.bytes = 0
        self.start = time.monotonic()
        self.lock = threading.Lock()

    def done(self, rel: str, size: int, skipped: bool = False) -> None:
        with self.lock:
            self.count += 1
            self.bytes += size
            if skipped:
                line = f"{rel}: complete ({_human(size)}), skipped"
            else:
                rate = self.bytes / max(time.monotonic() - self.start, 1e-6)
                line = f"{rel}: {_human(size)} ({_human(self.bytes)}/{_human(self.total)}, {_human(rate)}/s)"
            print(f"[{self.count}/{self.files}] {line}", file=self.out, flush=True)


# ---- the Hugging Face Hub: hf:// -------------------------------------------------------------------------------


def parse_hf(uri: str) -> tuple[str, str | None, str | None]:
    """(repository id, revision or None, file in the repository or None) of hf://org/repo[@revision][/file]."""
    rest = uri.split("://", 1)[1].strip("/")
    parts = rest.split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise FetchError(f"{uri}: expected hf://org/repo[@revision][/file]")
    name, _, revision = parts[1].partition("@")
    if not name or (revision == "" and "@" in parts[1]):
        raise FetchError(f"{uri}: expected hf://org/repo[@revision][/file]")
    return f"{parts[0]}/{name}", revision or None, "/".join(parts[2:]) or None


def hf_allow_patterns(files: Sequence[str], fmt: str | None) -> list[str]:
    """The files an engine reading ``fmt`` needs from a repository listing ``files``: configs and tokenizers, plus
    the weights of ``fmt`` (safetensors when None, then PyTorch files when the repository has no safetensors)."""
    wanted = fmt or "safetensors"
    weights = _WEIGHT_PATTERNS[wanted]
    if fmt is None and not any(_matches(f, weights) for f in files):
        weights = _WEIGHT_PATTERNS["pytorch"]
    if not any(_matches(f, weights) for f in files):
        raise FetchError(f"no {wanted} weights ({', '.join(weights)}) in the repository")
    return [*_SUPPORT_PATTERNS, *weights]


def _fetch_hf(uri: str, dest: Path, out: TextIO, fmt: str | None, include: Sequence[str], workers: int) -> list[Path]:
    try:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
        from huggingface_hub.utils.tqdm import disable_progress_bars
    except ImportError as exc:  # pragma: no cover - fetch extra missing
        raise FetchError("huggingface_hub is not installed (pip install 'inference-backend[fetch]')") from exc
    repo, revision, file = parse_hf(uri)
    token = os.environ.get("HF_TOKEN") or False  # False: never a token from ~/.cache or the keyring
    endpoint = os.environ.get("HF_ENDPOINT") or None  # read now, not when huggingface_hub was imported
    try:
        if file is not None:
            patterns = [file] if not include else list(include)
        elif include:
            patterns = list(include)
        else:
            listing = HfApi(endpoint=endpoint, token=token).list_repo_files(repo, revision=revision)
            patterns = hf_allow_patterns(listing, fmt)
        print(
            f"fetch {uri} -> {dest}: snapshot of {repo}@{revision or 'main'}, files {patterns}, {workers} at a time",
            file=out,
            flush=True,
        )
        remove_links(dest, out)  # huggingface_hub writes through paths: nothing in DIR may point elsewhere
        disable_progress_bars()  # one line per run in the pod's log, not a bar per file
        path = snapshot_download(
            repo,
            revision=revision,
            local_dir=dest,
            allow_patterns=patterns,
            token=token,
            endpoint=endpoint,
            max_workers=workers,
        )
    except GatedRepoError as exc:
        raise FetchError(f"{uri}: gated repository: the token in HF_TOKEN has no access ({_first_line(exc)})") from exc
    except RepositoryNotFoundError as exc:
        raise FetchError(
            f"{uri}: repository {repo} not found, or private and HF_TOKEN has no access ({_first_line(exc)})"
        ) from exc
    except RevisionNotFoundError as exc:
        raise FetchError(f"{uri}: revision {revision} not found in {repo}") from exc
    except EntryNotFoundError as exc:
        raise FetchError(f"{uri}: file not found in {repo} ({_first_line(exc)})") from exc
    except FetchError:
        raise
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise FetchError(f"{uri}: {type(exc).__name__}: {_first_line(exc)}") from exc
    root = Path(path)
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(root).parts and p.name not in (LOCK, MARKER)
    )
    if not files:
        raise FetchError(f"{uri}: no files in {repo} match {patterns}")
    total = sum(p.stat().st_size for p in files)
    print(f"fetch {uri}: {len(files)} file(s), {_human(total)}", file=out, flush=True)
    return files


def remove_links(dest: Path, out: TextIO) -> int:
    """Remove every symbolic link under ``dest`` (never following one), so that a writer that opens plain paths
    (huggingface_hub's snapshot_download) cannot be led outside it; the number removed."""
    removed = 0
    stack = [dest]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    os.unlink(entry.path)
                    removed += 1
                    print(f"fetch: removed the symbolic link {entry.path} (never followed)", file=out, flush=True)
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
    return removed


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
