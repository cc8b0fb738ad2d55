"""The README's commands against the real API server, as a reader types them (read from README.md, not copied here).

- "## Install", from a checkout: the CRDs with `kubectl apply --server-side`, then `helm install` of the chart. The
  release's objects must exist afterwards: the operator Deployment with the chart's command, its ServiceAccount, the
  RBAC, the CRDs established. The Deployment's pod cannot run here: KWOK's nodes run no containers and this machine
  has no container runtime to build the image (the kind workflow, .github/workflows/e2e.yaml, runs it in-cluster).
- "## Install", from the OCI registry: the reference `oci://ghcr.io/...` is replaced by the package that the release
  workflow's own `helm package` command makes (the artifact it pushes there); pulling from ghcr.io cannot run here.
- "## Model facts from the artifact": `model inspect` on a Mixtral-shaped directory of that name (tiny zero weights,
  real config.json and safetensors headers), and `kubectl apply -f` of what it printed.

The cluster is made fresh first: the release uninstalled and the CRDs deleted (an earlier module's chart fixture
installed both, the CRDs with Helm as their field manager; `kubectl apply --server-side` of the same files then
conflicts on `.spec.versions`, which is why the README installs with `--skip-crds`). The release is left installed:
later modules' `chart` fixtures upgrade it in place, and `helm upgrade` never touches the CRDs.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from ib_testkit import ROOT
from ib_testkit import artifacts as art
from ib_testkit.cluster import SYSTEM_NS, chart_operator_container, kubectl, tool
from ib_testkit.readme import commands, section

OCI = "oci://ghcr.io/inference-backend/charts/inference-backend"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def run(command: str, cwd: Path = ROOT) -> str:
    """One README command, its program resolved to the pinned binary (kubectl, helm) or the venv's CLI."""
    words = shlex.split(command)
    out_file = None
    if ">" in words:
        words, out_file = words[: words.index(">")], words[words.index(">") + 1]
    if words[0] in ("kubectl", "helm"):
        words[0] = tool(words[0])
    res = subprocess.run(words, capture_output=True, text=True, cwd=cwd, check=False)
    assert res.returncode == 0, f"README command failed: {command}\n{res.stdout}{res.stderr}"
    if out_file:
        (cwd / out_file).write_text(res.stdout)
    return res.stdout


def uninstall() -> None:
    subprocess.run(
        [tool("helm"), "uninstall", "ib", "--namespace", SYSTEM_NS, "--wait", "--ignore-not-found"],
        capture_output=True,
        text=True,
        check=False,
    )


def installed_release() -> dict[str, str]:
    out = subprocess.run(
        [tool("helm"), "list", "--namespace", SYSTEM_NS, "-o", "json"], capture_output=True, text=True, check=True
    ).stdout
    (release,) = [r for r in json.loads(out) if r["name"] == "ib"]
    return release  # type: ignore[no-any-return]


def check_the_release_objects() -> None:
    for crd in ("inferencebackends.serving.inferencebackend.io", "models.serving.inferencebackend.io"):
        conditions = json.loads(kubectl("get", "crd", crd, "-o", "json"))["status"]["conditions"]
        assert any(c["type"] == "Established" and c["status"] == "True" for c in conditions), crd
    deployment = json.loads(kubectl("get", "deployment", "ib-inference-backend", "-n", SYSTEM_NS, "-o", "json"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    rendered = chart_operator_container()
    assert (container["command"], container["args"]) == (rendered["command"], rendered["args"])
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "ib-inference-backend"
    kubectl("get", "serviceaccount", "ib-inference-backend", "-n", SYSTEM_NS)
    roles = json.loads(kubectl("get", "clusterroles", "-l", "app.kubernetes.io/instance=ib", "-o", "json"))["items"]
    assert roles, "the chart's ClusterRole is missing"
    bindings = kubectl("get", "clusterrolebindings", "-l", "app.kubernetes.io/instance=ib", "-o", "name")
    assert bindings.strip(), "the chart's ClusterRoleBinding is missing"


def test_install_from_a_checkout() -> None:
    install = [c for c in commands(section("Install")) if OCI not in c]
    assert [c.split()[:2] for c in install] == [["kubectl", "apply"], ["helm", "install"]], install
    uninstall()
    kubectl("delete", "-f", str(ROOT / "charts/inference-backend/crds"), "--ignore-not-found", "--wait=true")
    for command in install:
        run(command)
    check_the_release_objects()
    assert installed_release()["chart"] == f"inference-backend-{VERSION}"


def test_install_from_the_oci_package(tmp_path: Path) -> None:
    (oci,) = [c for c in commands(section("Install")) if OCI in c]
    assert f"--version {VERSION}" in oci, "the README's OCI install names another version than pyproject.toml's"
    # The release workflow's command (.github/workflows/release.yaml), which makes the package it pushes to OCI.
    run(f"helm package charts/inference-backend --version {VERSION} --app-version {VERSION} --destination {tmp_path}")
    package = tmp_path / f"inference-backend-{VERSION}.tgz"
    assert package.is_file()
    uninstall()
    run(oci.replace(OCI, str(package)))
    check_the_release_objects()
    assert installed_release()["chart"] == f"inference-backend-{VERSION}"


def test_model_inspect_then_apply(tmp_path: Path) -> None:
    inspect, apply = [c for c in commands(section("Model facts from the artifact")) if not c.startswith("pip ")]
    config = {  # Mixtral-8x7B's config.json keys, at a tiny size
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 96,
        "vocab_size": 256,
        "max_position_embeddings": 32768,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "dtype": "bfloat16",
    }
    shapes = art.moe_shapes(hidden=64, layers=2, heads=8, kv_heads=2, inter=96, vocab=256, experts=8)
    art.hf_dir(tmp_path / "Mixtral-8x7B-v0.1", config, shapes)
    inspect = inspect.replace("inference-backend ", f"{Path(sys.executable).parent / 'inference-backend'} ", 1)
    run(inspect, cwd=tmp_path)
    model = yaml.safe_load((tmp_path / "mixtral.yaml").read_text())
    assert model["kind"] == "Model" and model["spec"]["uri"] == "hf://mistralai/Mixtral-8x7B-v0.1"
    assert apply == "kubectl apply -f mixtral.yaml"
    name = model["metadata"]["name"]
    try:
        run(apply, cwd=tmp_path)  # into the kubeconfig's namespace, as for the reader
        stored = json.loads(kubectl("get", "models.serving.inferencebackend.io", name, "-o", "json"))
        assert stored["spec"] == model["spec"]  # nothing pruned or refused by the CRD's schema
    finally:
        kubectl("delete", "models.serving.inferencebackend.io", name, "--ignore-not-found")
