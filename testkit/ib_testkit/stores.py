"""Model stores for the fetch tests, on 127.0.0.1.

- ``S3Server``: moto's real S3 server application (the same WSGI app ``moto.server.ThreadedMotoServer`` serves)
  behind a WSGI layer that records every request, counts the object GETs in flight, and can hold the first GETs
  at a barrier: a client that downloads one object at a time never gets two GETs to the barrier together, so the
  barrier breaks and ``max_concurrent_gets`` stays 1 (no timing is measured).
- ``HubServer``: the subset of the Hugging Face Hub's HTTP API that ``huggingface_hub.snapshot_download`` and
  ``HfApi.list_repo_files`` use (repo info, the recursive tree, HEAD and GET of /resolve/ with Range), serving
  in-memory repositories. The Hub itself cannot be reached from here: this is the real client against a local server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class S3Server:
    """moto's S3 server with request accounting (see the module docstring). ``host``: the address it listens on
    (127.0.0.1; the real nodes' pods reach this host at their bridge's address)."""

    def __init__(self, barrier_parties: int = 0, host: str = "127.0.0.1") -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        self.requests: list[Seen] = []
        self.in_flight = 0
        self.max_concurrent_gets = 0
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(barrier_parties, timeout=5) if barrier_parties > 1 else None
        self._waiting = barrier_parties  # only the first object GETs meet at the barrier
        app = DomainDispatcherApplication(create_backend_app)
        self.port = free_port(host)
        self.endpoint = f"http://{host}:{self.port}"
        self._server = make_server(host, self.port, self._wrap(app), True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _wrap(self, app: Callable[..., Any]) -> Callable[..., Any]:
        def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
            headers = {k[5:].replace("_", "-").lower(): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
            is_object_get = method == "GET" and path.count("/") >= 2 and not environ.get("QUERY_STRING")
            wait = False
            with self._lock:
                self.requests.append(Seen(method, path, headers))
                if is_object_get:
                    self.in_flight += 1
                    self.max_concurrent_gets = max(self.max_concurrent_gets, self.in_flight)
                    if self._barrier is not None and self._waiting > 0:
                        self._waiting, wait = self._waiting - 1, True
            try:
                if wait and self._barrier is not None:
                    with contextlib.suppress(threading.BrokenBarrierError):  # a sequential client: broken
                        self._barrier.wait()
                return app(environ, start_response)
            finally:
                if is_object_get:
                    with self._lock:
                        self.in_flight -= 1

        return wsgi

    def object_gets(self, key_part: str = "") -> list[Seen]:
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and r.path.count("/") >= 2 and key_part in r.path]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.max_concurrent_gets = 0

    def start(self) -> S3Server:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()


@dataclass
class HubRepo:
    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    private: bool = False
    """Answer 401 without the right Bearer token (the Hub's answer for a private repository)."""


@dataclass
class HubServer:
    """A local Hub (see the module docstring). ``token``: the Bearer token private repositories want.
    ``drop_once``: files whose first GET sends half the body and closes the connection (the client resumes with
    Range). ``fail``: files whose every GET answers 500 (until removed). ``host``: the address it listens on."""

    repos: dict[str, HubRepo]
    token: str = ""
    drop_once: set[str] = field(default_factory=set)
    fail: set[str] = field(default_factory=set)
    requests: list[Seen] = field(default_factory=list)
    host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        self.port = free_port(self.host)
        self.endpoint = f"http://{self.host}:{self.port}"
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                hub._handle(self, body=True)

            def do_HEAD(self) -> None:
                hub._handle(self, body=False)

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def file_gets(self, name: str | None = None) -> list[Seen]:
        with self._lock:
            return [
                r
                for r in self.requests
                if r.method == "GET" and "/resolve/" in r.path and (name is None or r.path.endswith("/" + name))
            ]

    # ---- the API ----

    def _handle(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        url = urlparse(h.path)
        path = unquote(url.path)
        with self._lock:
            self.requests.append(Seen(h.command, path, {k.lower(): v for k, v in h.headers.items()}))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path)
        if m:
            return self._repo_info(h, m.group(1), m.group(2), body)
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path)
        if m:
            return self._tree(h, m.group(1), m.group(2), body)
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._resolve(h, m.group(1), m.group(2), m.group(3), body)
        self._send(h, 404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}, body)

    def _repo(self, h: BaseHTTPRequestHandler, name: str, revision: str, body: bool) -> HubRepo | None:
        repo = self.repos.get(name)
        authorized = h.headers.get("Authorization") == f"Bearer {self.token}" if self.token else True
        if repo is None or (repo.private and not authorized):
            msg = json.dumps({"error": "Repository not found"}).encode()
            self._send(
                h,
                401 if repo is not None else 404,
                msg,
                {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
                body,
            )
            return None
        if revision not in ("main", repo.sha):
            msg = json.dumps({"error": f"Invalid rev id: {revision}"}).encode()
            self._send(h, 404, msg, {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "Invalid rev id"}, body)
            return None
        return repo

    def _repo_info(self, h: BaseHTTPRequestHandler, name: str, revision: str, body: bool) -> None:
        repo = self._repo(h, name, revision, body)
        if repo is None:
            return
        info = {
            "id": name,
            "modelId": name,
            "sha": repo.sha,
            "private": repo.private,
            "siblings": [{"rfilename": f} for f in sorted(repo.files)],
        }
        self._send(h, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)

    def _tree(self, h: BaseHTTPRequestHandler, name: str, revision: str, body: bool) -> None:
        repo = self._repo(h, name, revision, body)
        if repo is None:
            return
        entries: list[dict[str, Any]] = []
        dirs: set[str] = set()
        for f in sorted(repo.files):
            parts = f.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
            entries.append({"type": "file", "oid": _oid(repo.files[f]), "size": len(repo.files[f]), "path": f})
        entries += [{"type": "directory", "oid": _oid(d.encode()), "size": 0, "path": d} for d in sorted(dirs)]
        self._send(h, 200, json.dumps(entries).encode(), {"Content-Type": "application/json"}, body)

    def _resolve(self, h: BaseHTTPRequestHandler, name: str, revision: str, file: str, body: bool) -> None:
        repo = self._repo(h, name, revision, body)
        if repo is None:
            return
        if file not in repo.files:
            self._send(
                h,
                404,
                b"Entry not found",
                {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"},
                body,
            )
            return
        if body and file in self.fail:
            self._send(h, 500, b"internal error", {}, body)
            return
        data = repo.files[file]
        headers = {
            "X-Repo-Commit": repo.sha,
            "ETag": f'"{_oid(data)}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        status, start = 200, 0
        rng = h.headers.get("Range")
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if m:
                start = int(m.group(1))
                end = int(m.group(2)) if m.group(2) else len(data) - 1
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                status, data = 206, data[start : end + 1]
        if body and file in self.drop_once:
            self.drop_once.discard(file)
            h.send_response(status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        self._send(h, status, data, headers, body)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)


def _oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def put_objects(endpoint: str, bucket: str, files: Iterable[tuple[str, bytes]]) -> None:
    import boto3

    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )
    client.create_bucket(Bucket=bucket)
    for key, body in files:
        client.put_object(Bucket=bucket, Key=key, Body=body)
