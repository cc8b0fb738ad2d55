"""Fixtures for the end-to-end tests, which run against the cluster of $KUBECONFIG.

Start one with `e2e/up` (or run everything with `e2e/run-tests`, which builds, starts, tests and
stops). Without a reachable cluster every test here is skipped, with the reason, on a developer's machine; in CI
(CI=true or GITHUB_ACTIONS=true) it is an error instead, so that a workflow that lost its cluster (a KUBECONFIG not
exported) fails rather than passing with everything skipped. The cluster must be
local (API server on 127.0.0.1/localhost/::1) because these tests create nodes and workloads;
E2E_ALLOW_REMOTE=1 lifts that guard for a disposable remote cluster.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import pytest
import yaml
from ib_testkit.audit import audit_event
from ib_testkit.cluster import (
    EXAMPLES,
    NODE_SETS,
    PICKER,
    PICKER_CRDS,
    SYSTEM_NS,
    Operator,
    chart_helm_args,
    install_chart,
    kubectl,
    tool,
)
from ib_testkit.real_nodes import (
    TinyModels,
    files_under,
    gateway,
    real_node_or_skip,
    restricted_namespace,
    tiny_models,
)
from ib_testkit.stores import S3Server, put_objects
from inference_backend.vocabulary import GROUP

E2E_SRC = Path(__file__).resolve().parent
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}

T = TypeVar("T")


def pinned_kube_version() -> str:
    """The Kubernetes version e2e/build-binaries builds: the wrapper module's require."""
    text = (E2E_SRC / "gomod" / "kubernetes" / "go.mod").read_text()
    m = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", text, re.M)
    assert m, "no k8s.io/kubernetes require in e2e/gomod/kubernetes/go.mod"
    return m.group(1)


def _cluster_problem() -> str | None:
    """Why the tests can't run against $KUBECONFIG, or None when they can."""
    path = os.environ.get("KUBECONFIG")
    if not path:
        return "KUBECONFIG is not set: run e2e/run-tests, or e2e/up and export KUBECONFIG=$E2E_DIR/kubeconfig"
    if not Path(path).is_file():
        return f"KUBECONFIG={path} does not exist: start the local cluster with e2e/up"
    try:
        from lightkube.config.client_adapter import Client as HttpxClient
        from lightkube.config.client_adapter import ConnectionParams
        from lightkube.config.kubeconfig import KubeConfig
    except ImportError as e:
        return f"lightkube is not installed ({e}): pip install -e '.[dev,operator]'"
    try:
        config = KubeConfig.from_file(path).get()
    except Exception as e:  # a broken kubeconfig is a reason to skip, whatever its error
        return f"KUBECONFIG={path} is not usable: {e}"
    host = urlparse(config.cluster.server).hostname or ""
    if host not in LOCAL_HOSTS and os.environ.get("E2E_ALLOW_REMOTE") != "1":
        return (
            f"the cluster of KUBECONFIG ({config.cluster.server}) is not local; these tests create nodes "
            "and workloads, so they only run against e2e/up's cluster (E2E_ALLOW_REMOTE=1 to override)"
        )
    try:
        with HttpxClient(config, ConnectionParams()) as http:
            r = http.get("/readyz", timeout=5)
        if r.status_code != 200:
            return f"cluster at {config.cluster.server} is not ready: /readyz answered {r.status_code}"
    except Exception as e:  # lightkube's HTTP library (httpx or httpx2) and ssl errors alike
        return f"no cluster reachable at {config.cluster.server} ({e!r}): start it with e2e/up"
    return None


def in_ci() -> bool:
    """CI=true (.ci/run, GitHub Actions, most CI systems) or GITHUB_ACTIONS=true."""
    return any(os.environ.get(v, "").lower() in ("true", "1") for v in ("CI", "GITHUB_ACTIONS"))


@pytest.fixture(scope="session", autouse=True)
def _require_cluster() -> None:
    problem = _cluster_problem()
    if problem and in_ci():
        pytest.fail(f"no cluster for the e2e tests in CI (a skip would pass with nothing tested): {problem}")
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def kube() -> Iterator[Any]:
    """A lightkube Client for the cluster of $KUBECONFIG."""
    from lightkube import Client
    from lightkube.config.kubeconfig import KubeConfig

    client = Client(config=KubeConfig.from_env(), field_manager="ib-e2e")
    yield client
    client.close()


@pytest.fixture(scope="session")
def kube_http() -> Iterator[Any]:
    """lightkube's HTTP client (httpx API) with $KUBECONFIG's credentials, for paths like /version."""
    from lightkube.config.client_adapter import Client as HttpxClient
    from lightkube.config.client_adapter import ConnectionParams
    from lightkube.config.kubeconfig import KubeConfig

    with HttpxClient(KubeConfig.from_env().get(), ConnectionParams()) as http:
        yield http


@pytest.fixture
def namespace(kube: Any) -> Iterator[str]:
    """A fresh namespace, deleted after the test. Its InferenceBackends go first, waited for (30 s at most), so the
    operator releases their GPU reservations before the next test: the namespace controller's own sweep comes
    seconds later, and a cluster-wide operator would count them against the next test's capacity meanwhile."""
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace

    name = f"ib-e2e-{uuid.uuid4().hex[:8]}"
    kube.create(Namespace(metadata=ObjectMeta(name=name, labels={"inference-backend.dev/e2e": "true"})))
    yield name
    subprocess.run(
        [
            str(tool("kubectl")),
            "delete",
            f"inferencebackends.{GROUP}",
            "--all",
            "-n",
            name,
            "--wait=true",
            "--timeout=30s",
            "--ignore-not-found",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    kube.delete(Namespace, name)


@pytest.fixture(scope="session")
def e2e_dir() -> Path:
    """The state directory of e2e/up (audit log, logs), as $E2E_DIR or its default."""
    return Path(os.environ.get("E2E_DIR", "/tmp/ib-e2e"))


def _wait_until(what: str, check: Callable[[], T | None], timeout: float = 120, interval: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="session")
def wait_until() -> Callable[..., Any]:
    """wait_until(what, check, timeout=120): polls check() until it returns something truthy and
    returns that; fails the test after timeout seconds, naming what it waited for."""
    return _wait_until


@pytest.fixture(scope="session")
def kube_version() -> str:
    """The Kubernetes version e2e/build-binaries builds (e2e/gomod/kubernetes/go.mod)."""
    return pinned_kube_version()


class AuditLog:
    """Reads the API server's audit log (e2e/up logs every write at Metadata level, JSON lines).

    mark = audit.mark(); ...do things...; audit.writes(since=mark, user="system:serviceaccount:x:y")
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """A position in the log: writes() after it only returns events logged later."""
        return self.path.stat().st_size if self.path.exists() else 0

    def writes(
        self,
        since: int = 0,
        *,
        user: str | None = None,
        resource: str | None = None,
        namespace: str | None = None,
        verbs: tuple[str, ...] = ("create", "update", "patch", "delete", "deletecollection"),
    ) -> list[dict[str, Any]]:
        events = []
        with self.path.open("rb") as f:
            f.seek(since)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # an event still being written
                ev = audit_event(line)
                if ev is None:
                    continue
                ref = ev.get("objectRef", {})
                if ev.get("verb") not in verbs or ev.get("stage") != "ResponseComplete":
                    continue
                if user is not None and ev.get("user", {}).get("username") != user:
                    continue
                if resource is not None and ref.get("resource") != resource:
                    continue
                if namespace is not None and ref.get("namespace") != namespace:
                    continue
                events.append(ev)
        return events


@pytest.fixture(scope="session")
def audit_log(e2e_dir: Path) -> AuditLog:
    """The audit log of e2e/up's cluster; skips the test when there is none."""
    path = e2e_dir / "audit.log"
    if not path.is_file():
        pytest.skip(f"no audit log at {path} (cluster not started by e2e/up, or another E2E_DIR)")
    return AuditLog(path)


# The operator and its chart, shared by the test modules that run it (ib_testkit.cluster has the helpers).
@pytest.fixture(scope="module")
def chart() -> Iterator[None]:
    kubectl("apply", "-f", str(NODE_SETS))
    install_chart(*chart_helm_args())
    yield


@pytest.fixture(scope="module")
def sa_kubeconfig(chart: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    admin = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    token = kubectl("create", "token", "ib-inference-backend", "-n", SYSTEM_NS, "--duration=2h").strip()
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": cluster["name"], "user": "operator"}}],
        "current-context": "operator",
    }
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture(scope="module")
def operator(sa_kubeconfig: str, e2e_dir: Path) -> Iterator[Operator]:
    """The chart's operator: the command, args and env `helm template` renders for its Deployment, run as a local
    process with its ServiceAccount's token (ib_testkit.cluster.Operator says why not in-cluster here)."""
    kubectl("apply", "-f", str(EXAMPLES / "models.yaml"), "-n", "default")
    op = Operator(sa_kubeconfig, e2e_dir / "logs" / "operator.log")
    op.start()
    yield op
    op.stop()


@pytest.fixture
def ns(namespace: str) -> str:
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "models.yaml"))
    kubectl("create", "secret", "generic", "hf-token", "-n", namespace, "--from-literal=HF_TOKEN=x")
    kubectl(
        "create",
        "secret",
        "generic",
        "s3-models",
        "-n",
        namespace,
        "--from-literal=AWS_ACCESS_KEY_ID=x",
        "--from-literal=AWS_SECRET_ACCESS_KEY=y",
    )
    # The pvc:// example needs its claim bound: a static PersistentVolume reserved for it.
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-models"},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "hostPath": {"path": "/tmp"},
            "claimRef": {"namespace": namespace, "name": "research-models"},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "research-models", "namespace": namespace},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "volumeName": f"{namespace}-models",
            "resources": {"requests": {"storage": "10Gi"}},
        },
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([volume, claim]))
    return namespace


@pytest.fixture(scope="module")
def picker_built() -> None:
    """The endpoint picker and its CRDs are built (e2e/run-tests runs e2e/build-picker): skipped if not, failed in CI"""
    if not PICKER.is_file() or not (PICKER_CRDS / ".complete").is_file():
        msg = f"{PICKER} or {PICKER_CRDS} missing: run e2e/build-picker"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


# The real nodes' fixtures (e2e/test_real_*.py): skipped, saying why, without a real node; failed when one was asked.
@pytest.fixture(scope="module")
def node() -> dict[str, Any]:
    return real_node_or_skip()


@pytest.fixture(scope="module")
def models() -> TinyModels:
    return tiny_models()


@pytest.fixture(scope="module")
def store(node: dict[str, Any], models: TinyModels) -> Iterator[S3Server]:
    """The local S3 on the bridge address, with the GGUF file, the ONNX directory and the safetensors checkpoint."""
    s3 = S3Server(host=gateway(node)).start()
    put_objects(
        s3.endpoint,
        "models",
        [
            ("tiny/model-f32.gguf", models.gguf.read_bytes()),
            *((f"tiny-onnx/{k}", v) for k, v in files_under(models.onnx)),
            *((f"tiny-hf/{k}", v) for k, v in files_under(models.hf)),
        ],
    )
    yield s3
    s3.stop()


@pytest.fixture
def rns(store: S3Server) -> Iterator[str]:
    """A namespace enforcing Pod Security restricted, with the store's credentials as a Secret."""
    name = restricted_namespace(f"ib-real-{uuid.uuid4().hex[:8]}")
    kubectl(
        "create",
        "secret",
        "generic",
        "s3",
        "-n",
        name,
        "--from-literal=AWS_ACCESS_KEY_ID=test",
        "--from-literal=AWS_SECRET_ACCESS_KEY=test",
        f"--from-literal=AWS_ENDPOINT_URL={store.endpoint}",
        "--from-literal=AWS_REGION=us-east-1",
    )
    yield name
    kubectl("delete", "ib", "--all", "-n", name, "--wait=true", "--timeout=60s", check=False)
    kubectl("delete", "namespace", name, "--wait=false", check=False)
