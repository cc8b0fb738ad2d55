"""Run the real llama-server (built by hack/build-llama-server) with a renderer's args.

    with start_llama_server(["-m", "{model}", "--host", "0.0.0.0", "--port", "8080", "-c", "2048"],
                            env={}, model=target_gguf) as srv:
        status, body = srv.get("/health")

The args are passed through unchanged except for what only the test can know: the value after
``--port`` becomes a free local port, after ``--host`` 127.0.0.1, after ``-m/--model`` and
``-md/--model-draft/--spec-draft-model`` the given model paths; ``{port}``/``{host}``/``{model}``/
``{draft}`` placeholders anywhere are replaced too. ``--port``/``--host`` are appended if absent.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ib_testkit import ROOT, free_port

VERSION_FILE = ROOT / "hack" / "llama-cpp.version"

MODEL_FLAGS = ("-m", "--model")
DRAFT_FLAGS = ("-md", "--model-draft", "--spec-draft-model")


def llama_cpp_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in VERSION_FILE.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"^([A-Z_]+)=(\S+)$", line.strip()):
            pins[m.group(1)] = m.group(2)
    return pins


def llama_cache_dir() -> Path:
    cache = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
    return cache / "llama.cpp" / llama_cpp_pins()["LLAMA_CPP_PYTHON_VERSION"]


def llama_cpp_source() -> Path:
    """The llama.cpp tree vendored by the pinned llama-cpp-python sdist (hack/build-llama-server unpacks it);
    $IB_LLAMA_CPP_SRC overrides."""
    if env := os.environ.get("IB_LLAMA_CPP_SRC"):
        return Path(env)
    version = llama_cpp_pins()["LLAMA_CPP_PYTHON_VERSION"]
    return llama_cache_dir() / "src" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"


def llama_server_bin() -> Path:
    """The cached llama-server binary ($IB_LLAMA_SERVER overrides)."""
    override = os.environ.get("IB_LLAMA_SERVER")
    return Path(override) if override else llama_cache_dir() / "bin" / "llama-server"


def llama_bench_bin() -> Path:
    """The cached llama-bench binary, built next to llama-server."""
    return llama_server_bin().with_name("llama-bench")


def substitute_args(
    args: Sequence[str],
    *,
    port: int,
    host: str = "127.0.0.1",
    model: str | None = None,
    draft: str | None = None,
) -> list[str]:
    values = {"{port}": str(port), "{host}": host, "{model}": model or "", "{draft}": draft or ""}
    out: list[str] = []
    for i, arg in enumerate(args):
        prev = args[i - 1] if i else ""
        if prev == "--port":
            arg = str(port)
        elif prev == "--host":
            arg = host
        elif prev in MODEL_FLAGS and model is not None:
            arg = model
        elif prev in DRAFT_FLAGS and draft is not None:
            arg = draft
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    if "--port" not in out:
        out += ["--port", str(port)]
    if "--host" not in out:
        out += ["--host", host]
    return out


class LlamaServerExited(RuntimeError):
    def __init__(self, returncode: int | None, output: str) -> None:
        super().__init__(f"llama-server exited with {returncode} before it was healthy:\n{output[-4000:]}")
        self.returncode = returncode
        self.output = output


@dataclass
class LlamaServer:
    proc: subprocess.Popen[bytes]
    base_url: str
    port: int
    argv: list[str]
    log_path: Path
    _log: Any = field(repr=False, default=None)

    def request(self, method: str, path: str, payload: Any = None, timeout: float = 120) -> tuple[int, bytes]:
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read()

    def get(self, path: str, timeout: float = 30) -> tuple[int, bytes]:
        return self.request("GET", path, timeout=timeout)

    def get_json(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def post_json(self, path: str, payload: Any, timeout: float = 300) -> Any:
        status, body = self.request("POST", path, payload, timeout=timeout)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (llama-server shuts down cleanly on it), SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return int(self.proc.returncode)

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _env(env: Mapping[str, str] | None) -> dict[str, str]:
    # the renderer's env only: drop any LLAMA_ARG_* of the calling shell
    base = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    base.update(env or {})
    return base


def start_llama_server(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    model: str | Path | None = None,
    draft: str | Path | None = None,
    port: int | None = None,
    ready_timeout: float = 180,
    log_dir: str | Path | None = None,
) -> LlamaServer:
    """Start llama-server with ``args`` (see module doc) and wait until ``/health`` answers 200.

    Raises LlamaServerExited (with the exit code and output) if the process dies first, TimeoutError
    if it is not healthy within ``ready_timeout`` seconds.
    """
    binary = llama_server_bin()
    if not binary.exists():
        raise FileNotFoundError(f"{binary} is missing: run hack/build-llama-server")
    port = port or free_port()
    argv = [
        str(binary),
        *substitute_args(
            args,
            port=port,
            model=str(model) if model is not None else None,
            draft=str(draft) if draft is not None else None,
        ),
    ]
    log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="llama-server-"))
    log_path = log_dir / f"llama-server-{port}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(argv, env=_env(env), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    srv = LlamaServer(proc, f"http://127.0.0.1:{port}", port, argv, log_path, log)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            srv.stop()
            raise LlamaServerExited(proc.returncode, srv.output())
        try:
            status, _ = srv.get("/health", timeout=5)
            if status == 200:
                return srv
        except OSError:
            pass
        time.sleep(0.25)
    srv.stop()
    raise TimeoutError(f"llama-server not healthy after {ready_timeout}s:\n{srv.output()[-4000:]}")


def run_llama_server_to_exit(
    args: Sequence[str], env: Mapping[str, str] | None = None, *, timeout: float = 60, **kw: Any
) -> tuple[int, str]:
    """Run llama-server expecting it to exit by itself (bad args); returns (returncode, output)."""
    port = free_port()
    paths = {k: str(v) for k, v in kw.items() if v is not None}
    argv = [str(llama_server_bin()), *substitute_args(args, port=port, **paths)]
    try:
        res = subprocess.run(
            argv, env=_env(env), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"llama-server did not exit within {timeout}s: {argv}") from e
    return res.returncode, res.stdout + res.stderr
