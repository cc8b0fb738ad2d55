"""The autoscaling chain of the local control plane as local processes: Prometheus, KEDA's operator and its external
metrics API server (the "adapter"), and the network namespace that gives the adapter an address the API server's
aggregator can reach (e2e/test_autoscaling.py).

Binaries and KEDA's CRDs are those of e2e/build-binaries (their paths come from e2e/lib.sh, the one place that
knows the versions). The aggregated API ``v1beta1.external.metrics.k8s.io`` goes APIService -> Service ->
Endpoints; the API server runs with ``--enable-aggregator-routing`` (e2e/up), so it dials the endpoint address
itself, and Endpoints refuse loopback addresses. So the test makes its own network namespace and a veth pair
(10.253.N.1/30 on this side, .2 inside; N from the API server's port so that two clusters differ, or
$E2E_KEDA_SUBNET=10.x.y.0), and the adapter listens on this side's address: the traffic stays on this machine.
Needs root (``ip netns``).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from ib_testkit import ROOT, free_port
from ib_testkit.cluster import wait_established

E2E = ROOT / "e2e"
KEDA_NS = "keda"
ADAPTER_SERVICE = "keda-metrics-apiserver"
APISERVICE = "v1beta1.external.metrics.k8s.io"


def lib_sh(expr: str) -> str:
    """Evaluate a shell expression after sourcing e2e/lib.sh (binpath NAME, keda_crds_dir, $KEDA_VERSION...)."""
    out = subprocess.run(
        ["bash", "-c", f'source "$1"; {expr}', "_", str(E2E / "lib.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def missing_pieces() -> list[str]:
    """What the chain needs and this machine lacks (binaries, CRDs, root, ip, openssl)."""
    out = []
    for name in ("keda-operator", "keda-adapter", "prometheus"):
        path = Path(lib_sh(f"binpath {name}"))
        if not os.access(path, os.X_OK):
            out.append(f"{path} (e2e/build-binaries {name})")
    crds = Path(lib_sh("keda_crds_dir"))
    if not (crds / "keda.sh_scaledobjects.yaml").is_file():
        out.append(f"{crds}/keda.sh_scaledobjects.yaml (e2e/build-binaries keda-operator)")
    for tool in ("ip", "openssl"):
        if not shutil.which(tool):
            out.append(f"the {tool} command")
    if os.geteuid() != 0:
        out.append("root (ip netns add)")
    return out


class Proc:
    """A local process with its output in a log file; stop() is TERM, then KILL after 15 s."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.log = name, log
        self.proc = subprocess.Popen(
            cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_http(proc: Proc, url: str, timeout: float = 120, ok: tuple[int, ...] = (200,)) -> None:
    """Poll url until it answers one of ok; fail early, with the log's tail, if the process died."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        proc.check_alive()
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                if r.status in ok:
                    return
                last = str(r.status)
        except urllib.error.HTTPError as e:
            if e.code in ok:
                return
            last = str(e.code)
        except (urllib.error.URLError, OSError) as e:
            last = repr(e)
        time.sleep(0.5)
    raise AssertionError(f"{proc.name}: {url} not ready in {timeout:.0f}s (last: {last}):\n{proc.tail()}")


# ---------------------------------------------------------------- network namespace


class NetNS:
    """``ip netns add NAME`` and a veth pair: HOST_IP/30 stays on this side (the adapter binds it), PEER_IP/30 in
    the namespace. Deleting the namespace deletes the pair."""

    def __init__(self, name: str, subnet: str) -> None:
        net = ipaddress.ip_network(subnet if "/" in subnet else subnet + "/30", strict=False)
        hosts = list(net.hosts())
        self.name, self.host_ip, self.peer_ip, self.prefix = name, str(hosts[0]), str(hosts[1]), net.prefixlen
        self.veth = name[:15]

    @classmethod
    def for_cluster(cls, apiserver_port: int) -> NetNS:
        subnet = os.environ.get("E2E_KEDA_SUBNET") or f"10.253.{apiserver_port % 250}.0/30"
        return cls(f"ibk{apiserver_port}", subnet)

    def _ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
        if check and res.returncode != 0:
            raise AssertionError(f"ip {' '.join(args)} failed: {res.stderr.strip()}")
        return res

    def create(self) -> None:
        self.delete()  # a namespace left by a killed run
        peer = f"{self.veth[:13]}p"
        self._ip("netns", "add", self.name)
        self._ip("link", "add", self.veth, "type", "veth", "peer", "name", peer)
        self._ip("link", "set", peer, "netns", self.name)
        self._ip("addr", "add", f"{self.host_ip}/{self.prefix}", "dev", self.veth)
        self._ip("link", "set", self.veth, "up")
        self._ip("-n", self.name, "addr", "add", f"{self.peer_ip}/{self.prefix}", "dev", peer)
        self._ip("-n", self.name, "link", "set", peer, "up")
        self._ip("-n", self.name, "link", "set", "lo", "up")

    def delete(self) -> None:
        self._ip("netns", "del", self.name, check=False)
        self._ip("link", "del", self.veth, check=False)


# ---------------------------------------------------------------- certificates


def make_certs(out: Path, ips: list[str], dns: list[str]) -> Path:
    """A CA and one serving+client certificate (EC P-256) in KEDA's layout: ca.crt, tls.crt, tls.key. KEDA's
    operator serves its gRPC metrics service with it and requires a client certificate of the same CA, which
    the adapter presents from the same directory (pkg/metricsservice/utils/tls.go)."""
    out.mkdir(parents=True, exist_ok=True)

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(out / "ca.key"))
    ssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(out / "ca.key"),
        "-subj",
        "/CN=ib-e2e-keda-ca",
        "-days",
        "2",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        str(out / "ca.crt"),
    )
    san = ",".join([*(f"IP:{ip}" for ip in ips), *(f"DNS:{d}" for d in dns)])
    (out / "tls.ext").write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName={san}\n"
    )
    ssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(out / "tls.key"))
    ssl("req", "-new", "-key", str(out / "tls.key"), "-subj", "/CN=keda", "-out", str(out / "tls.csr"))
    ca, ca_key = str(out / "ca.crt"), str(out / "ca.key")
    ssl(
        "x509",
        "-req",
        "-in",
        str(out / "tls.csr"),
        "-CA",
        ca,
        "-CAkey",
        ca_key,
        "-CAcreateserial",
        "-days",
        "2",
        "-sha256",
        "-extfile",
        str(out / "tls.ext"),
        "-out",
        str(out / "tls.crt"),
    )
    return out


# ---------------------------------------------------------------- Prometheus


def start_prometheus(
    workdir: Path,
    targets: dict[str, tuple[str, dict[str, str]]],
    scrape_interval: str = "1s",
    port: int | None = None,
    scrape_configs: list[dict[str, Any]] | None = None,
    rule_files: list[Path] | None = None,
) -> tuple[Proc, str]:
    """Prometheus on 127.0.0.1:port scraping each job's (host:port, extra target labels) every scrape_interval,
    plus any further scrape_configs as they are, evaluating rule_files every scrape_interval; returns it and its
    base URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
                "rule_files": [str(f) for f in rule_files or []],
                "scrape_configs": [
                    *(
                        {"job_name": job, "static_configs": [{"targets": [target], "labels": labels}]}
                        for job, (target, labels) in targets.items()
                    ),
                    *(scrape_configs or []),
                ],
            }
        )
    )
    proc = Proc(
        "prometheus",
        [
            lib_sh("binpath prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ],
        workdir / "prometheus.log",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(proc, url + "/-/ready")
    return proc, url


# ---------------------------------------------------------------- KEDA


class Keda:
    """KEDA's operator and adapter against the cluster of kubeconfig, with its CRDs applied, the namespace
    ``keda``, and the APIService -> Service -> Endpoints of the external metrics API at the adapter's address.

    Both run with the kubeconfig's credentials (the e2e admin): KEDA's RBAC manifests are not installed."""

    def __init__(self, workdir: Path, kubeconfig: str, netns: NetNS, kubectl: Any) -> None:
        self.workdir, self.kubeconfig, self.netns, self.kubectl = workdir, kubeconfig, netns, kubectl
        self.procs: list[Proc] = []
        self.adapter_port = free_port()
        self.installed_crds: list[str] = []
        self.created_namespace = False

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        crds = Path(lib_sh("keda_crds_dir"))
        present = set(self.kubectl("get", "crd", "-o", "name").split())
        for f in sorted(crds.glob("*.yaml")):
            name = yaml.safe_load(f.read_text())["metadata"]["name"]
            if f"customresourcedefinition.apiextensions.k8s.io/{name}" not in present:
                self.installed_crds.append(name)  # removed again by stop(): other modules test a cluster without
            self.kubectl("apply", "--server-side", "--field-manager=ib-e2e", "-f", str(f))
        wait_established("scaledobjects.keda.sh", kubeconfig=self.kubeconfig)
        self._wait_namespace_gone_if_terminating()
        if not self.kubectl("get", "namespace", KEDA_NS, "--ignore-not-found", "-o", "name").strip():
            self.kubectl("create", "namespace", KEDA_NS)
            self.created_namespace = True
        certs = make_certs(
            self.workdir / "certs",
            ips=["127.0.0.1", self.netns.host_ip],
            dns=["localhost", f"{ADAPTER_SERVICE}.{KEDA_NS}.svc", f"keda-operator.{KEDA_NS}.svc"],
        )
        self.netns.create()
        env = {
            "KUBECONFIG": self.kubeconfig,
            "WATCH_NAMESPACE": "",  # all namespaces
            "POD_NAMESPACE": KEDA_NS,
            "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NS,
            "KEDA_HTTP_DEFAULT_TIMEOUT": "3000",
        }
        grpc, health, metrics = free_port(), free_port(), free_port()
        # Flags: cmd/operator/main.go of KEDA v2.21.0 (no cert rotation: the certificates are ours).
        operator = Proc(
            "keda-operator",
            [
                lib_sh("binpath keda-operator"),
                "--leader-elect=false",
                "--zap-log-level=info",
                "--zap-encoder=console",
                f"--metrics-bind-address=127.0.0.1:{metrics}",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                f"--metrics-service-bind-address=127.0.0.1:{grpc}",
                f"--cert-dir={certs}",
                "--enable-cert-rotation=false",
                f"--ca-dir={certs}",
            ],
            self.workdir / "keda-operator.log",
            env,
        )
        self.procs.append(operator)
        wait_http(operator, f"http://127.0.0.1:{health}/readyz")
        # Flags: cmd/adapter/main.go of KEDA v2.21.0 and the apiserver options of sigs.k8s.io/custom-metrics-apiserver
        # (its own /metrics server takes --port and binds every address: a free port).
        adapter = Proc(
            "keda-adapter",
            [
                lib_sh("binpath keda-adapter"),
                f"--secure-port={self.adapter_port}",
                f"--bind-address={self.netns.host_ip}",
                f"--cert-dir={certs}",
                f"--tls-cert-file={certs}/tls.crt",
                f"--tls-private-key-file={certs}/tls.key",
                f"--lister-kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--metrics-service-address=127.0.0.1:{grpc}",
                f"--port={free_port()}",
                "--zap-log-level=info",
                "--zap-encoder=console",
            ],
            self.workdir / "keda-adapter.log",
            env,
        )
        self.procs.append(adapter)
        self._register_apiservice(certs / "ca.crt")

    def _register_apiservice(self, ca: Path) -> None:
        import base64

        docs: list[dict[str, Any]] = [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": ADAPTER_SERVICE, "namespace": KEDA_NS},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": self.adapter_port}]},
            },
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": ADAPTER_SERVICE, "namespace": KEDA_NS},
                "subsets": [
                    {
                        "addresses": [{"ip": self.netns.host_ip}],
                        "ports": [{"name": "https", "port": self.adapter_port}],
                    }
                ],
            },
            {  # KEDA's config/metrics-server/api_service.yaml, with our CA instead of skipping TLS verification
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": APISERVICE},
                "spec": {
                    "service": {"name": ADAPTER_SERVICE, "namespace": KEDA_NS, "port": 443},
                    "group": "external.metrics.k8s.io",
                    "version": "v1beta1",
                    "caBundle": base64.b64encode(ca.read_bytes()).decode(),
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
        ]
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=ib-e2e",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(docs),
        )

    def _wait_namespace_gone_if_terminating(self, timeout: float = 180) -> None:
        """A previous module's stop() deletes the namespace without waiting: while it terminates, the adapter's
        Service and Endpoints created in it would be deleted with it (the APIService then fails and no HPA reads the
        metric), so a terminating namespace is waited out and created again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            phase = self.kubectl("get", "namespace", KEDA_NS, "--ignore-not-found", "-o", "jsonpath={.status.phase}")
            if phase.strip() != "Terminating":
                return
            time.sleep(1)
        raise RuntimeError(f"namespace {KEDA_NS} still Terminating after {timeout:.0f}s")

    def check_alive(self) -> None:
        for p in self.procs:
            p.check_alive()

    def stop(self) -> None:
        """Leaves the cluster as it was: ScaledObjects deleted while KEDA's operator still runs to remove its
        finalizer (and its HPAs), then the processes stopped, the APIService, the CRDs and namespace it added."""
        if any(p.proc.poll() is None for p in self.procs):
            self.kubectl("delete", "scaledobjects.keda.sh", "--all", "-A", "--timeout=60s", check=False)
        for p in reversed(self.procs):
            p.stop()
        self.netns.delete()
        self.kubectl("delete", "apiservice", APISERVICE, "--ignore-not-found", check=False)
        for name in self.installed_crds:
            self.kubectl("delete", "crd", name, "--ignore-not-found", "--timeout=60s", check=False)
        if self.created_namespace:
            self.kubectl("delete", "namespace", KEDA_NS, "--ignore-not-found", "--wait=false", check=False)


@contextmanager
def running_keda(workdir: Path, kube_http: Any, kubectl: Any) -> Iterator[Keda]:
    """KEDA started against the e2e cluster ($KUBECONFIG; its network namespace for the API server's port), stopped
    again on the way out: the one fixture body of the KWOK and real-node autoscaling tests."""
    import urllib.parse

    port = int(urllib.parse.urlparse(str(kube_http.base_url)).port or 443)
    k = Keda(workdir, os.environ["KUBECONFIG"], NetNS.for_cluster(port), kubectl)
    try:
        k.start()
        yield k
    finally:
        k.stop()
