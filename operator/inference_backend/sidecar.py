"""The adapters sidecar (`inference-backend adapter sync`): a native sidecar of the engine pods that load LoRA
adapters while they serve (engines/lora.py ``runtime_served``; docs/adapters.md).

Every few seconds it reads the wanted adapters from the ConfigMap the operator writes (mounted; the kubelet
refreshes the file), fetches each one it has not yet into its directory with the fetch step's code and checks
(``inference-backend fetch --adapter``), then brings the engine, on localhost, to that list with the calls
controller.adapters plans (unloads first; vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter bodies). What the
engine serves is read from its ``GET /v1/models`` each time, so a restarted engine or sidecar converges again.

It answers ``GET /ready`` (200 once every wanted adapter was tried: the pod is Ready only then, so a new pod is not
sent requests for adapters it has not loaded yet) and ``GET /adapters`` (the wanted list, what the engine serves and
the error of each adapter it could not fetch, check or load), which the operator reads for its status.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from inference_backend import status
from inference_backend.controller.adapters import adapter_calls

Json = dict[str, Any]
INTERVAL = 5.0
"""Seconds between two passes."""
CALL_TIMEOUT = 120.0
"""Seconds for one engine call: an unload waits for the requests using the adapter."""
log = logging.getLogger("inference_backend.sidecar")


@dataclass(frozen=True)
class Wanted:
    name: str
    uri: str
    path: str
    rank: int | None = None


def read_config(path: str | Path) -> list[Wanted]:
    """The ConfigMap's adapters.json: ``{"adapters": [{"name", "uri", "path", "rank"?}, ...]}``."""
    doc = json.loads(Path(path).read_text())
    return [Wanted(str(a["name"]), str(a["uri"]), str(a["path"]), a.get("rank")) for a in doc.get("adapters") or []]


Fetch = Callable[[Wanted], None]
"""Fetch one adapter into its path and check it (raises with the reason)."""


@dataclass
class Sync:
    """One pod's adapters: what it wants, what it fetched, what failed, and whether every wanted one was tried."""

    config: Path
    engine: str
    served_name: str
    fetch: Fetch
    fetched: dict[str, str] = field(default_factory=dict)
    """name -> path of the adapters fetched and checked (by this process)."""
    errors: dict[str, str] = field(default_factory=dict)
    wanted: list[Wanted] = field(default_factory=list)
    served: dict[str, str] = field(default_factory=dict)
    ready: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def step(self) -> None:
        """One pass: read the list, read the engine, fetch what is missing, load and unload."""
        try:
            wanted = read_config(self.config)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: %s", self.config, exc)
            return
        try:
            served = status.served_adapters(_get_json(self.engine + "/v1/models"), self.served_name)
        except (OSError, ValueError) as exc:  # the engine is not up yet
            log.info("engine not answering yet: %s", exc)
            return
        errors: dict[str, str] = {}
        target: dict[str, str] = {}
        for w in wanted:
            if served.get(w.name) == w.path or self.fetched.get(w.name) == w.path:
                target[w.name] = w.path
                continue
            try:
                self.fetch(w)
            except Exception as exc:  # any failure of one adapter is its error, never the others'
                errors[w.name] = f"fetching {w.uri}: {exc}"
                if w.name in served:
                    target[w.name] = served[w.name]  # what it serves stays until a good copy is there
                continue
            self.fetched[w.name] = w.path
            target[w.name] = w.path
        for call in adapter_calls(target, [status.Replica("self", self.engine, served)]):
            code, text = _post(call.url + call.path, call.body)
            name = str(call.body["lora_name"])
            log.info("%s %s: %s %s", call.path, name, code, text[:200])
            if code != 200:
                errors[name] = f"{call.path}: {code} {text[:300]}"
        try:
            served = status.served_adapters(_get_json(self.engine + "/v1/models"), self.served_name)
        except (OSError, ValueError) as exc:
            log.warning("engine: %s", exc)
        with self.lock:
            self.wanted, self.served, self.errors, self.ready = wanted, served, errors, True

    def report(self) -> Json:
        with self.lock:
            return {
                "wanted": {w.name: w.path for w in self.wanted},
                "served": dict(self.served),
                "errors": dict(self.errors),
                "ready": self.ready,
            }


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def _post(url: str, body: Mapping[str, Any]) -> tuple[int, str]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=CALL_TIMEOUT) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


def serve(sync: Sync, port: int) -> ThreadingHTTPServer:
    """GET /ready and GET /adapters on ``port``, in a thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            report = sync.report()
            if self.path == "/ready":
                code, body = (200, b"ok\n") if report["ready"] else (503, b"not synced yet\n")
            elif self.path == "/adapters":
                code, body = 200, json.dumps(report).encode()
            else:
                code, body = 404, b"not found\n"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="sidecar http", daemon=True).start()
    return server


def run(sync: Sync, port: int, interval: float = INTERVAL, passes: int | None = None) -> None:
    """Serve the probe and sync every ``interval`` seconds (for ever, or ``passes`` times)."""
    server = serve(sync, port)
    try:
        done = 0
        while passes is None or done < passes:
            sync.step()
            done += 1
            time.sleep(interval)
    finally:
        server.shutdown()
