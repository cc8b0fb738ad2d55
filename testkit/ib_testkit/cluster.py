"""What the end-to-end tests share: kubectl and the cached binaries, the operator as a local process, the examples
made schedulable on KWOK nodes, and waiting for a backend's phase. The fixtures built on these live in
e2e/conftest.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from inference_backend.routing import PICKER_VERSION
from inference_backend.vocabulary import GROUP as GROUP  # the e2e tests import the API group from here

from ib_testkit import ROOT

EXAMPLES = ROOT / "docs/examples"
NODE_SETS = ROOT / "e2e/nodes"
SA = "inference-backend"
SYSTEM_NS = "ib-system"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
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


def wait_established(crd: str, kubeconfig: str | None = None, timeout: float = 60) -> None:
    """Wait for a CRD's Established condition by polling: `kubectl wait --for=condition=Established` (1.36) fails at
    once with "accessor error: <nil>" when it reads the CRD before the apiserver has written any condition."""
    deadline = time.monotonic() + timeout
    path = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
    while kubectl("get", f"crd/{crd}", "-o", path, check=False, kubeconfig=kubeconfig).strip() != "True":
        if time.monotonic() > deadline:
            raise AssertionError(f"CRD {crd} not Established after {timeout:.0f} s")
        time.sleep(0.5)


CHART = ROOT / "charts/inference-backend"
_CACHE = Path(os.environ.get("IB_CACHE") or Path.home() / ".cache" / "inference-backend")
PICKER = _CACHE / "bin" / f"epp-{PICKER_VERSION}"
"""The endpoint picker binary e2e/build-picker builds."""
PICKER_CRDS = _CACHE / "bin" / f"gie-crds-{PICKER_VERSION}"
"""The Inference Extension's CRDs of the picker's module version (e2e/build-picker copies them)."""
RELEASE = "ib"
PORT_FLAGS = ("--metrics-port", "--liveness-port")
"""The only arguments of the chart's command replaced for a local process: its ports (8080, 8081 in a pod, one per
pod IP) would collide between the operators a test runs side by side on this host, so each gets 0 (off) unless the
test asks for one."""


def chart_helm_args() -> tuple[str, ...]:
    """Extra `helm` arguments for the chart e2e installs and renders, from $E2E_HELM_ARGS (shell words; empty: the
    chart's defaults). The kind workflow sets `--set replicas=0` there once its in-cluster checks are done, so that
    the operator the suite starts is the only one."""
    return tuple(shlex.split(os.environ.get("E2E_HELM_ARGS", "")))


def install_chart(*helm_args: str, timeout: float | None = None) -> None:
    """`helm upgrade --install` of the chart into SYSTEM_NS (created when absent), not waiting for its pods."""
    res = subprocess.run(
        [tool("helm"), "upgrade", "--install", RELEASE, str(CHART), "--namespace", SYSTEM_NS, "--create-namespace"]
        + ["--wait=false", *helm_args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stderr


def chart_operator_container(*helm_args: str, namespace: str = SYSTEM_NS) -> dict[str, Any]:
    """The operator container of the chart's Deployment exactly as `helm template` renders it (default values unless
    helm_args set some): its command, args and env are what a cluster runs."""
    res = subprocess.run(
        [tool("helm"), "template", RELEASE, str(CHART), "--namespace", namespace, *helm_args],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise AssertionError(f"helm template {CHART} failed: {res.stderr}")
    deployments = [d for d in yaml.safe_load_all(res.stdout) if d and d.get("kind") == "Deployment"]
    if len(deployments) != 1:
        raise AssertionError(f"the chart renders {len(deployments)} Deployments, expected the operator's alone")
    containers = deployments[0]["spec"]["template"]["spec"]["containers"]
    named = [c for c in containers if c["name"] == "operator"]
    if len(named) != 1:
        names = [c["name"] for c in containers]
        raise AssertionError(f"no container named operator in the chart's Deployment: {names}")
    return named[0]  # type: ignore[no-any-return]


def chart_operator_process(
    container: dict[str, Any], *, metrics_port: int = 0, liveness_port: int = 0, namespace: str = SYSTEM_NS
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a local process equivalent to the chart's operator container.

    The command's first word is resolved in this interpreter's bin/ (the console script the wheel installs, the same
    entry point as the image's); the args are the chart's, with PORT_FLAGS alone replaced; the env is the chart's,
    where a valueFrom may only be the pod's namespace or name (anything else fails: a chart change the local process
    cannot honour must break e2e, not be dropped)."""
    command = list(container.get("command") or [])
    if not command:
        raise AssertionError("the chart's operator container has no command (the image's ENTRYPOINT would run)")
    script = Path(sys.executable).parent / command[0]
    if not script.is_file():
        raise AssertionError(f"{command[0]} (the chart's command) is not installed beside {sys.executable}")
    ports = {"--metrics-port": str(metrics_port), "--liveness-port": str(liveness_port)}
    args: list[str] = []
    for arg in container.get("args") or []:
        flag = arg.split("=", 1)[0]
        args.append(f"{flag}={ports[flag]}" if flag in ports and "=" in arg else arg)
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        field = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field == "metadata.namespace":
            env[var["name"]] = namespace
        elif field == "metadata.name":
            env[var["name"]] = f"{RELEASE}-local-operator"
        else:
            raise AssertionError(f"env {var['name']} of the chart's operator: {var} has no local equivalent")
    return [str(script), *command[1:], *args], env


FROM_CHART = "<from the chart>"


class Operator:
    """The operator as a local process started with exactly the command, args and environment that `helm template`
    renders for the chart's Deployment (chart_operator_process: only the ports differ), authenticated with the chart's
    ServiceAccount token. It cannot run in-cluster here: KWOK's nodes run no containers, and this machine has no
    container runtime to build the image; the kind workflow (.github/workflows/e2e.yaml) runs the chart's Deployment
    itself, in-cluster, from the image it builds."""

    def __init__(self, kubeconfig: str, log: Path, helm_args: tuple[str, ...] | None = None) -> None:
        self.kubeconfig, self.log = kubeconfig, log
        self.helm_args = chart_helm_args() if helm_args is None else helm_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.argv: list[str] = []

    def start(
        self,
        priority: int | None = None,
        env: dict[str, str] | None = None,
        peering: str | None = FROM_CHART,
        metrics_port: int = 0,
    ) -> None:
        """peering: the chart's --peering as rendered (FROM_CHART), another name, or None for standalone mode (the
        chart's --peering dropped); env: set over the chart's; metrics_port: 0 (off) unless a test scrapes it."""
        argv, chart_env = chart_operator_process(chart_operator_container(*self.helm_args), metrics_port=metrics_port)
        if peering != FROM_CHART:
            argv = [a for a in argv if a != "--peering" and not a.startswith("--peering=")]
            if peering is not None:
                argv.append(f"--peering={peering}")
        if priority is not None:
            argv.append(f"--priority={priority}")
        self.argv = argv
        env = {**os.environ, **chart_env, "KUBECONFIG": self.kubeconfig, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)

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
            proc = subprocess.Popen(
                cmdline, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
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
