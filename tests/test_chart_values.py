"""The chart over every values branch, with the real helm: `helm template` asserting the objects each branch renders,
`helm lint --strict`, the schema refusing typos and wrong types naming the field, kube-score on each branch's render
(no critical security finding), use as a subchart with `global`, the `helm test` hook's command against a real
operator metrics server, the image values reaching the operator's image policy, and docs/chart.md's image list
generated from the code.

Needs the cached helm and kube-score (e2e/build-binaries); skipped without them except in CI, where they must be.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit.chart import BRANCHES, DIGEST, OPERATOR_REF
from ib_testkit.kubescore import KUBE_SCORE, NOT_RENDERED, binary, critical, score
from inference_backend import __version__, images

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts/inference-backend"
HELM = binary("helm")
CI = bool(os.environ.get("CI") or os.environ.get("IB_REQUIRE_HELM"))
needs_helm = pytest.mark.skipif(HELM is None and not CI, reason="no helm: e2e/build-binaries")
needs_score = pytest.mark.skipif((HELM is None or KUBE_SCORE is None) and not CI, reason="no helm/kube-score")
NS = "ib-system"
OTHERS = {"metrics", "monitoring"}
"""Top-level values another part of the chart owns (the operator's metrics Service, the monitoring objects): their
schema is theirs; only their presence is checked here."""


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None, "helm is required in CI: run e2e/build-binaries helm"
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=False, timeout=120)


def _values_file(values: dict[str, Any], tmp: Path) -> Path:
    path = tmp / f"values-{abs(hash(json.dumps(values, sort_keys=True)))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def render(values: dict[str, Any], tmp: Path, release: str = "ib") -> list[dict[str, Any]]:
    res = helm("template", release, str(CHART), "--namespace", NS, "-f", str(_values_file(values, tmp)))
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


def pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(one(docs, "Deployment")["spec"]["template"]["spec"])


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(pod(docs)["containers"][0])


def env(docs: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in operator_container(docs)["env"]}


def test_pod(docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    hooks = [d for d in docs if d["kind"] == "Pod"]
    return hooks[0] if hooks else None


test_pod.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@needs_helm
@pytest.mark.parametrize("branch", BRANCHES, ids=list(BRANCHES))
def test_every_branch_lints_strictly(branch: str, tmp_path: Path) -> None:
    res = helm("lint", "--strict", str(CHART), "--namespace", NS, "-f", str(_values_file(BRANCHES[branch], tmp_path)))
    assert res.returncode == 0, res.stdout + res.stderr


@needs_score
@pytest.mark.parametrize("branch", BRANCHES, ids=list(BRANCHES))
def test_every_branch_has_no_critical_kube_score_finding(branch: str, tmp_path: Path) -> None:
    res = helm("template", "ib", str(CHART), "--namespace", NS, "-f", str(_values_file(BRANCHES[branch], tmp_path)))
    assert res.returncode == 0, res.stderr
    out = tmp_path / "chart.yaml"
    out.write_text(res.stdout)
    objects = score([out])
    assert "Deployment" in {o["type_meta"]["kind"] for o in objects}
    assert [f for f in critical(objects) if f[1] not in NOT_RENDERED] == []


@needs_helm
def test_defaults(tmp_path: Path) -> None:
    docs = render({}, tmp_path)
    dep = one(docs, "Deployment")
    assert dep["metadata"]["name"] == "ib-inference-backend"
    labels = dep["metadata"]["labels"]
    assert labels == {
        "helm.sh/chart": "inference-backend-0.1.0",
        "app.kubernetes.io/name": "inference-backend",
        "app.kubernetes.io/instance": "ib",
        "app.kubernetes.io/version": "0.1.0",
        "app.kubernetes.io/managed-by": "Helm",
        "app.kubernetes.io/component": "operator",
        "app.kubernetes.io/part-of": "inference-backend",
    }
    for d in docs:
        if d["kind"] in ("ConfigMap", "CustomResourceDefinition"):
            continue
        assert d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", d["kind"]
        assert d["metadata"]["labels"]["app.kubernetes.io/instance"] == "ib", d["kind"]
    assert dep["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "inference-backend",
        "app.kubernetes.io/instance": "ib",
    }
    spec = pod(docs)
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    c = operator_container(docs)
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["image"] == f"ghcr.io/inference-backend/operator:{__version__}"
    for absent in (
        "imagePullSecrets",
        "priorityClassName",
        "volumes",
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
    ):
        assert absent not in spec, absent
    assert "volumeMounts" not in c
    assert env(docs)["IB_IMAGE_REGISTRY"] == env(docs)["IB_IMAGE_OVERRIDES"] == env(docs)["IB_IMAGE_PULL_SECRETS"] == ""
    assert images.from_env(env(docs)) == images.EMPTY, "no policy by default: the pinned images as rendered"
    hook = test_pod(docs)
    assert hook is not None and hook["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert one(docs, "Service")["metadata"]["name"] == "ib-inference-backend-metrics"


def test_the_chart_version_is_the_operators() -> None:
    """The operator image the chart runs by default is the one whose version the operator renders for the fetch
    init container (engines/artifacts.py OPERATOR_IMAGE)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert images.CATALOG["fetch"] == f"ghcr.io/inference-backend/operator:{chart['appVersion']}"


@needs_helm
@pytest.mark.parametrize(
    ("values", "release", "base"),
    [
        ({"nameOverride": "llm"}, "ib", "ib-llm"),
        ({"nameOverride": "llm"}, "llm-prod", "llm-prod"),
        ({}, "inference-backend", "inference-backend"),
        ({"fullnameOverride": "llm-operator"}, "ib", "llm-operator"),
        ({"fullnameOverride": "x" * 63}, "ib", "x" * 63),
    ],
)
def test_name_overrides(values: dict[str, Any], release: str, base: str, tmp_path: Path) -> None:
    docs = render(values, tmp_path, release)
    assert one(docs, "Deployment")["metadata"]["name"] == base
    assert one(docs, "ServiceAccount")["metadata"]["name"] == base
    assert pod(docs)["serviceAccountName"] == base
    assert one(docs, "Service")["metadata"]["name"] == f"{base}-metrics"
    names = {d["metadata"]["name"] for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")}
    assert names == {base, f"{base}-cluster"}
    for d in docs:
        if d["kind"] == "ClusterRoleBinding":
            assert d["roleRef"]["name"] == d["metadata"]["name"] and d["subjects"][0]["name"] == base
    name = values.get("nameOverride", "inference-backend")
    assert one(docs, "Deployment")["metadata"]["labels"]["app.kubernetes.io/name"] == name
    assert one(docs, "Service")["spec"]["selector"] == {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": release,
    }
    hook = test_pod(docs)
    assert hook is not None
    assert f"{base}-metrics.{NS}.svc" in hook["spec"]["containers"][0]["env"][0]["value"]


@needs_helm
def test_namespaced_rbac_and_peering(tmp_path: Path) -> None:
    docs = render(BRANCHES["namespaced"], tmp_path)
    assert sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == "Role") == ["team-a", "team-b"]
    assert sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == "KopfPeering") == ["team-a", "team-b"]
    assert not [d for d in docs if d["kind"] == "ClusterKopfPeering"]
    assert len([d for d in docs if d["kind"] == "ClusterRole"]) == 1, "only the cluster-scoped facts"
    args = operator_container(docs)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args and "--all-namespaces" not in args
    docs = render(BRANCHES["namespaced-no-peering"], tmp_path)
    assert not [d for d in docs if d["kind"] in ("KopfPeering", "ClusterKopfPeering")]
    assert not [a for a in operator_container(docs)["args"] if a.startswith("--peering")]
    roles = [d for d in docs if d["kind"] == "Role"]
    assert [r["metadata"]["namespace"] for r in roles] == ["team-a"]


@needs_helm
def test_replicas_and_peering(tmp_path: Path) -> None:
    docs = render(BRANCHES["replicas-peering"], tmp_path)
    assert one(docs, "Deployment")["spec"]["replicas"] == 3
    assert "--peering=ib-leader" in operator_container(docs)["args"]
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == "ib-leader"
    docs = render(BRANCHES["no-peering"], tmp_path)
    assert not [d for d in docs if "Peering" in d["kind"]]
    assert not [a for a in operator_container(docs)["args"] if a.startswith("--peering")]


@needs_helm
def test_service_account_branches(tmp_path: Path) -> None:
    docs = render(BRANCHES["external-serviceaccount"], tmp_path)
    assert not [d for d in docs if d["kind"] == "ServiceAccount"]
    assert pod(docs)["serviceAccountName"] == "platform-ib"
    assert {d["subjects"][0]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"} == {"platform-ib"}
    docs = render(BRANCHES["serviceaccount-annotations"], tmp_path)
    assert one(docs, "ServiceAccount")["metadata"]["annotations"] == {"iam.example.com/role": "ib"}


@needs_helm
def test_metrics_service_and_test_hook_toggles(tmp_path: Path) -> None:
    docs = render(BRANCHES["no-metrics-service"], tmp_path)
    assert not [d for d in docs if d["kind"] == "Service"]
    assert test_pod(docs) is None, "the hook reads the metrics Service: none without it"
    docs = render(BRANCHES["no-tests"], tmp_path)
    assert test_pod(docs) is None and one(docs, "Service")


@needs_helm
@pytest.mark.parametrize(
    ("values", "image"),
    [
        ({"image": {"digest": DIGEST}}, f"ghcr.io/inference-backend/operator@{DIGEST}"),
        ({"image": {"tag": "0.2.0-rc1"}}, "ghcr.io/inference-backend/operator:0.2.0-rc1"),
        ({"image": {"registry": "r.example.com:5000"}}, f"r.example.com:5000/inference-backend/operator:{__version__}"),
        ({"image": {"repository": "localhost:5001/ib-operator", "tag": "dev"}}, "localhost:5001/ib-operator:dev"),
        (
            {"image": {"repository": "ib/operator", "registry": "r.example.com"}},
            f"r.example.com/ib/operator:{__version__}",
        ),
        (BRANCHES["mirror"], f"mirror.example.com/proxy/inference-backend/operator:{__version__}"),
        (
            {"global": {"imageRegistry": "m.example.com"}, "image": {"digest": DIGEST}},
            f"m.example.com/inference-backend/operator@{DIGEST}",
        ),
    ],
)
def test_operator_image(values: dict[str, Any], image: str, tmp_path: Path) -> None:
    docs = render(values, tmp_path)
    assert operator_container(docs)["image"] == image
    hook = test_pod(docs)
    assert hook is not None and hook["spec"]["containers"][0]["image"] == image, "the test runs the operator image"


@needs_helm
def test_mirror_reaches_the_operators_image_policy(tmp_path: Path) -> None:
    docs = render(BRANCHES["mirror"], tmp_path)
    policy = images.from_env(env(docs))
    assert policy.registry == "mirror.example.com/proxy"
    tag = images.CATALOG["sglang"].rsplit(":", 1)[1]
    assert policy.image(images.CATALOG["sglang"]) == f"mirror.example.com/proxy/lmsysorg/sglang:{tag}"


@needs_helm
def test_pull_secrets_merged_each_once(tmp_path: Path) -> None:
    docs = render(BRANCHES["pull-secrets"], tmp_path)
    assert pod(docs)["imagePullSecrets"] == [{"name": "op-cred"}, {"name": "shared"}]
    hook = test_pod(docs)
    assert hook is not None and hook["spec"]["imagePullSecrets"] == [{"name": "op-cred"}, {"name": "shared"}]
    assert env(docs)["IB_IMAGE_PULL_SECRETS"] == "engine-cred,shared,op-cred", "engine ones, then global's"
    assert images.from_env(env(docs)).pull_secrets == ("engine-cred", "shared", "op-cred")


@needs_helm
def test_engine_images_reach_the_operators_image_policy(tmp_path: Path) -> None:
    docs = render(BRANCHES["engine-images"], tmp_path)
    assert json.loads(env(docs)["IB_IMAGE_OVERRIDES"]) == {
        "vllm": {"digest": DIGEST},
        "fetch": {"repository": OPERATOR_REF, "tag": "0.1.0-patched"},
        "llamacppCpu": {"repository": "mirror.example.com/llama.cpp"},
    }, "only the fields set"
    rendered = images.rendered_images(images.from_env(env(docs)))
    assert rendered["vllm"] == images.CATALOG["vllm"].rsplit(":", 1)[0] + "@" + DIGEST
    assert rendered["fetch"] == f"{OPERATOR_REF}:0.1.0-patched"
    assert rendered["llamacppCpu"].startswith("mirror.example.com/llama.cpp:server-")
    assert rendered["tgi"] == images.CATALOG["tgi"]


@needs_helm
def test_extras_and_scheduling(tmp_path: Path) -> None:
    v = BRANCHES["extras"]
    docs = render(v, tmp_path)
    spec, c = pod(docs), operator_container(docs)
    assert c["args"][-1] == "--unschedulable-grace-seconds=120", "after the chart's flags"
    assert c["env"][-1] == {"name": "IB_WORKERS", "value": "4"}
    assert spec["volumes"] == v["extraVolumes"] and c["volumeMounts"] == v["extraVolumeMounts"]
    template = one(docs, "Deployment")["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "platform"
    assert template["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert template["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    for key in ("priorityClassName", "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints"):
        assert spec[key] == v[key], key
    assert c["resources"] == v["resources"]
    docs = render(BRANCHES["security-contexts"], tmp_path)
    assert pod(docs)["securityContext"]["fsGroup"] == 10001
    assert operator_container(docs)["securityContext"]["runAsUser"] == 10001


@needs_helm
def test_operator_settings_reach_its_flags_and_env(tmp_path: Path) -> None:
    docs = render(BRANCHES["operator-settings"], tmp_path)
    assert "--log-level=debug" in operator_container(docs)["args"]
    e = env(docs)
    assert (e["IB_DEBOUNCE_SECONDS"], e["IB_PROMETHEUS_ADDRESS"], e["IB_AUTOSCALING_LABEL_MATCHERS"]) == (
        "5",
        "https://prom.example.com",
        'ns="{namespace}"',
    )


@needs_helm
def test_argocd_snippet_toggle(tmp_path: Path) -> None:
    assert not [d for d in render({}, tmp_path) if d["kind"] == "ConfigMap"]
    cm = one(render(BRANCHES["argocd"], tmp_path), "ConfigMap")
    assert cm["metadata"] == {"name": "argocd-cm", "namespace": "gitops"}


@needs_helm
@pytest.mark.parametrize(
    ("sets", "where", "says"),
    [
        (["imagee.tag=x"], "", "'imagee'"),
        (["image.tga=x"], "/image", "'tga'"),
        (["image.digest=md5:abc"], "/image/digest", ""),
        (["image.pullPolicy=Sometimes"], "/image/pullPolicy", ""),
        (["global.imageRegistry=https://mirror.example.com"], "/global/imageRegistry", ""),
        (["global.imagePullSecrets[0]=Bad_Name"], "/global/imagePullSecrets/0", ""),
        (["engineImages.vlm.tag=x"], "/engineImages", "'vlm'"),
        (["engineImages.vllm.tga=x"], "/engineImages/vllm", "'tga'"),
        (["engineImages.vllm.digest=sha256:abc"], "/engineImages/vllm/digest", ""),
        (["engineImages.tgi.repository=Ghcr.io/x:1"], "/engineImages/tgi/repository", ""),
        (["engineImagePullSecrets[0].nam=x"], "/engineImagePullSecrets/0", ""),
        (["nameOverride=Bad_Name"], "/nameOverride", ""),
        (["fullnameOverride=" + "x" * 64], "/fullnameOverride", "maxLength"),
        (["extraArgs=--x"], "/extraArgs", ""),
        (["extraEnv[0].value=x"], "/extraEnv/0", "name"),
        (["podLabels.team=1"], "/podLabels/team", ""),
        (["tests.enable=true"], "/tests", "'enable'"),
        (["resources.request.cpu=1"], "/resources", "'request'"),
        (["watchNamespaces[0]=Team_A"], "/watchNamespaces/0", ""),
    ],
)
def test_the_schema_refuses_typos_and_wrong_types_naming_the_field(sets: list[str], where: str, says: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    res = helm("template", "ib", str(CHART), *args)
    assert res.returncode != 0, f"{sets} accepted"
    assert f"at '{where}'" in res.stderr and says in res.stderr, res.stderr


@needs_helm
@pytest.mark.parametrize("sets", [["replicas=three"], ["clusterWide=yes"], ["debounceSeconds=soon"]])
def test_the_schema_refuses_strings_for_numbers_and_booleans(sets: list[str]) -> None:
    res = helm("template", "ib", str(CHART), *[a for s in sets for a in ("--set-string", s)])
    assert res.returncode != 0 and f"at '/{sets[0].split('=')[0]}'" in res.stderr, res.stderr


def _schema() -> dict[str, Any]:
    return dict(json.loads((CHART / "values.schema.json").read_text()))


def test_every_property_of_the_schema_has_a_description() -> None:
    missing: list[str] = []

    def walk(node: dict[str, Any], where: str) -> None:
        for key, sub in (node.get("properties") or {}).items():
            if where == "" and key in OTHERS:
                continue
            if "description" not in sub:
                missing.append(f"{where}/{key}")
            walk(sub, f"{where}/{key}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{where}[]")

    schema = _schema()
    walk(schema, "")
    for name, definition in schema.get("definitions", {}).items():
        walk(definition, f"#/definitions/{name}")
    assert missing == []


def test_the_schema_is_subchart_friendly_and_strict_elsewhere() -> None:
    schema = _schema()
    assert schema["additionalProperties"] is False, "a typo at the top level is refused"
    assert schema["properties"]["global"]["additionalProperties"] is True, "a parent passes any global value"
    assert schema["properties"]["enabled"]["type"] == "boolean", "a parent's dependency condition"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"]), "every value is in the schema"


def test_engine_image_keys_and_patterns_are_the_operators() -> None:
    """The schema's keys and patterns are images.py's: what the chart admits, the operator accepts."""
    schema = _schema()
    assert set(schema["properties"]["engineImages"]["properties"]) == set(images.CATALOG)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values["engineImages"]) == set(images.CATALOG), "values.yaml lists every key"
    image = schema["definitions"]["engineImage"]["properties"]
    for field, rx in (("repository", images.REPOSITORY_RE), ("tag", images.TAG_RE), ("digest", images.DIGEST_RE)):
        assert image[field]["pattern"] == f"^(?:{rx.pattern[1:-1]})?$", field
    registry = schema["properties"]["global"]["properties"]["imageRegistry"]["pattern"]
    assert registry == f"^(?:{images.REGISTRY_RE.pattern[1:-1]})?$"


@needs_helm
def test_as_a_subchart_with_global_values(tmp_path: Path) -> None:
    parent = tmp_path / "platform"
    (parent / "charts").mkdir(parents=True)
    shutil.copytree(CHART, parent / "charts/inference-backend")
    (parent / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [
                    {"name": "inference-backend", "version": "0.1.0", "condition": "inference-backend.enabled"}
                ],
            }
        )
    )
    (parent / "values.yaml").write_text(
        yaml.safe_dump(
            {
                "global": {"imageRegistry": "mirror.example.com", "imagePullSecrets": [{"name": "corp"}], "team": "ml"},
                "inference-backend": {"enabled": True, "engineImagePullSecrets": ["engines"]},
            }
        )
    )
    res = helm("template", "platform", str(parent), "--namespace", NS)
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert operator_container(docs)["image"] == f"mirror.example.com/inference-backend/operator:{__version__}"
    assert pod(docs)["imagePullSecrets"] == [{"name": "corp"}]
    assert images.from_env(env(docs)) == images.Policy("mirror.example.com", {}, ("engines", "corp"))
    res = helm("template", "platform", str(parent), "--namespace", NS, "--set", "inference-backend.enabled=false")
    assert res.returncode == 0 and "kind: Deployment" not in res.stdout, res.stderr
    res = helm("template", "platform", str(parent), "--namespace", NS, "--set", "inference-backend.replica=2")
    assert res.returncode != 0 and "'replica'" in res.stderr, "typos are still refused inside a parent"


@needs_helm
def test_the_packaged_chart_carries_the_crds(tmp_path: Path) -> None:
    """docs/chart.md's CRD upgrade from the OCI chart (`helm pull --untar`, then `kubectl apply --server-side -f
    inference-backend/crds/`): the package holds crds/ as the repository has it."""
    res = helm("package", str(CHART), "--destination", str(tmp_path))
    assert res.returncode == 0, res.stderr
    (pkg,) = tmp_path.glob("inference-backend-*.tgz")
    with tarfile.open(pkg) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    crds = tmp_path / "x/inference-backend/crds"
    top = sorted(p.name for p in (ROOT / "crds").iterdir())
    assert sorted(p.name for p in crds.iterdir()) == sorted([*top, "kopf-peering.yaml"]), "and kopf's peering CRDs"
    for p in crds.iterdir():
        assert p.read_text() == (CHART / "crds" / p.name).read_text(), p.name
    for name in top:
        assert (crds / name).read_text() == (ROOT / "crds" / name).read_text(), name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(code: str, port: int, cwd: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code, str(port)], cwd=cwd)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"nothing listens on {port}")


OPERATOR_METRICS = """
import sys, time
from prometheus_client import start_http_server
import inference_backend.controller.metrics  # the operator's metrics, registered as run.py's handlers import does
start_http_server(int(sys.argv[1]))  # what run.py does for --metrics-port
time.sleep(120)
"""
OTHER_SERVER = """
import sys, http.server
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


@needs_helm
def test_the_helm_test_hook_checks_the_operators_metrics(tmp_path: Path) -> None:
    """The hook's command as rendered, run against a real operator metrics server (the Service's address swapped for
    the local one): it passes there, and fails on a server that is not the operator, or answers 404."""
    hook = test_pod(render({}, tmp_path))
    assert hook is not None
    c = hook["spec"]["containers"][0]
    assert c["command"][:2] == ["python", "-c"] and c["env"][0]["name"] == "IB_TEST_URL"
    assert c["env"][0]["value"] == f"http://ib-inference-backend-metrics.{NS}.svc:8080/metrics"
    (tmp_path / "other").mkdir()
    (tmp_path / "other/metrics").write_text("up 1\n")
    cases = (
        (OPERATOR_METRICS, tmp_path, True),
        (OTHER_SERVER, tmp_path / "other", False),
        (OTHER_SERVER, tmp_path, False),
    )
    for code, cwd, ok in cases:
        port = _free_port()
        server = _serve(code, port, cwd)
        try:
            res = subprocess.run(
                [sys.executable, *c["command"][1:]],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "IB_TEST_URL": f"http://127.0.0.1:{port}/metrics"},
                cwd=tmp_path,
                check=False,
            )
        finally:
            server.kill()
            server.wait()
        assert (res.returncode == 0) == ok, res.stdout + res.stderr
        assert ("the operator's metrics are served" in res.stdout) == ok


DOC = ROOT / "docs/chart.md"
BEGIN = "<!-- BEGIN images: generated by tests/test_chart_values.py from inference_backend.images -->"
END = "<!-- END images -->"


def images_table() -> str:
    rows = ["| `engineImages.` key | What | Image the operator renders (this version) |", "|---|---|---|"]
    rows += [f"| `{k}` | {images.DESCRIPTIONS[k]} | `{ref}` |" for k, ref in images.CATALOG.items()]
    return "\n".join(rows)


def test_the_air_gapped_image_list_is_the_codes() -> None:
    text = DOC.read_text()
    block = f"{BEGIN}\n{images_table()}\n{END}"
    assert block in text, f"docs/chart.md's image list is stale; it must read:\n{block}"
    assert f"ghcr.io/inference-backend/operator:{__version__}" in text, "the operator's own image is listed too"


def test_the_values_reference_lists_every_value() -> None:
    text = DOC.read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [k for k in values if k not in OTHERS and f"`{k}" not in text]
    for group in ("image", "serviceAccount", "peering", "autoscaling", "argocd", "tests", "global"):
        missing += [f"{group}.{k}" for k in values[group] if f"{group}.{k}" not in text and f".{k}`" not in text]
    assert missing == [], "docs/chart.md's values table misses these"
