"""What the end-to-end tests share: kubectl and the cached binaries, the operator as a local process, the examples
made schedulable on KWOK nodes, and waiting for a backend's phase. The fixtures built on these live in
e2e/conftest.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from ib_testkit import ROOT

EXAMPLES = ROOT / "docs/examples"
NODE_SETS = ROOT / "e2e/nodes"
SA = "inference-backend"
SYSTEM_NS = "ib-system"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
GROUP = "serving.inferencebackend.io"
BAD_IMAGE = "registry.invalid/ib-e2e/no-such-image:0"
"""The one image KWOK reports as not pullable (e2e/kwok/stages.yaml, stage pod-image-pull-backoff)."""


def tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    cache = Path(os.environ.get("IB_CACHE", Path.home() / ".cache/inference-backend")) / "bin"
    candidates = sorted(cache.glob(f"{name}-v*"))
    assert candidates, f"{name} not found on PATH or in {cache}: run e2e/build-binaries"
    return str(candidates[-1])


def kubectl(*args: str, check: bool = True, stdin: str | None = None, kubeconfig: str | None = None) -> str:
    env = {**os.environ, **({"KUBECONFIG": kubeconfig} if kubeconfig else {})}
    res = subprocess.run([tool("kubectl"), *args], capture_output=True, text=True, input=stdin, env=env, check=False)
    if check and res.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {res.stderr}")
    return res.stdout + (res.stderr if not check else "")


def get_json(*args: str) -> Any:
    return json.loads(kubectl("get", *args, "-o", "json"))


class Operator:
    def __init__(self, kubeconfig: str, log: Path) -> None:
        self.kubeconfig, self.log = kubeconfig, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, priority: int | None = None, env: dict[str, str] | None = None,
              peering: str | None = "inference-backend", metrics_port: int = 0) -> None:  # fmt: skip
        """metrics_port: serve the operator's Prometheus metrics there (0: off)."""
        env = {**os.environ, "KUBECONFIG": self.kubeconfig, "PYTHONUNBUFFERED": "1", **(env or {})}
        cmd = [sys.executable, "-m", "inference_backend.cli", "operator", "--all-namespaces",
               "--metrics-port", str(metrics_port), "--liveness-port", "0"]  # fmt: skip
        if peering is not None:
            cmd += ["--peering", peering]
        if priority is not None:
            cmd.append(f"--priority={priority}")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None

    def kill(self) -> None:
        """kill -9: no cleanup, no goodbye to the peering."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def example(name: str, namespace: str, **overrides: Any) -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    doc["metadata"]["namespace"] = namespace
    hardware = doc["spec"].setdefault("hardware", {})
    hardware.setdefault("tolerations", []).append(KWOK_TOLERATION)
    for key, value in overrides.items():
        doc["spec"][key] = value
    return doc  # type: ignore[no-any-return]


def apply(doc: dict[str, Any], check: bool = True) -> str:
    return kubectl("apply", "--server-side", "--field-manager=e2e", "-f", "-", stdin=yaml.safe_dump(doc), check=check)


def ib(namespace: str, name: str) -> dict[str, Any]:
    return get_json("ib", name, "-n", namespace)  # type: ignore[no-any-return]


def wait_phase(wait_until: Any, namespace: str, name: str, phase: str, timeout: float = 90) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = ib(namespace, name)
        st = obj.get("status") or {}
        if st.get("phase") == phase and st.get("observedGeneration") == obj["metadata"]["generation"]:
            return obj
        return None

    return wait_until(f"{namespace}/{name} phase {phase}", check, timeout=timeout)  # type: ignore[no-any-return]


def restart_component(e2e_dir: Path, name: str, sig: int = signal.SIGTERM) -> None:
    """Stops one process of e2e/up's control plane (etcd, kube-apiserver, ...) and starts it again with the same
    command line, log and pid file, as e2e/up does."""
    pidfile = e2e_dir / "pids" / f"{name}.pid"
    pid = int(pidfile.read_text().strip())
    cmdline = [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0") if a]
    os.kill(pid, sig)
    deadline = time.monotonic() + 60
    while not _gone(pid):  # every thread gone: its listening sockets are closed
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} (pid {pid}) did not stop")
        time.sleep(0.1)
    for _ in range(10):
        with (e2e_dir / "logs" / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(cmdline, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        try:
            proc.wait(timeout=3)  # died at once: its port is not free yet (the kernel still closing the old one)
        except subprocess.TimeoutExpired:
            pidfile.write_text(f"{proc.pid}\n")
            return
        time.sleep(1)
    raise AssertionError(f"{name} did not start again; see {e2e_dir / 'logs' / (name + '.log')}")


def _gone(pid: int) -> bool:
    """The process has exited: no /proc entry, or only a zombie leader left with no other thread."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return "zombie" in state.lower() and tasks in ([], [str(pid)])
