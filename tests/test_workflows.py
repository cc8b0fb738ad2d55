"""The GitHub workflows (.github/workflows/): actionlint over all of them (built by e2e/build-binaries from its Go
module, github.com/rhysd/actionlint; it runs shellcheck on the `run:` scripts when shellcheck is on PATH), the
release's version check (hack/check-release-version), and what the kind workflow relies on that can be checked
without Docker: its manifests select and render what it waits for.

What cannot run here (no Docker, no GitHub): building and pushing the images, `helm push`, the kind cluster itself.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github/workflows").glob("*.yaml"))
CACHE = os.environ.get("IB_CACHE", os.path.expanduser("~/.cache/inference-backend"))
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _actionlint() -> str | None:
    found = sorted(glob.glob(f"{CACHE}/bin/actionlint-*"))
    return found[-1] if found else None


ACTIONLINT = _actionlint()


def _workflow(name: str) -> dict[Any, Any]:
    return yaml.safe_load((ROOT / ".github/workflows" / name).read_text())  # type: ignore[no-any-return]


def _steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


@pytest.mark.skipif(ACTIONLINT is None and not os.environ.get("CI"), reason="no actionlint: e2e/build-binaries")
def test_actionlint() -> None:
    assert ACTIONLINT is not None, "actionlint is required in CI: run e2e/build-binaries actionlint"
    assert WORKFLOWS, "no workflows under .github/workflows"
    # -shellcheck= (empty) turns the shellcheck integration off explicitly when shellcheck is not installed; with it,
    # actionlint checks every run: script too.
    shellcheck = [] if shutil.which("shellcheck") else ["-shellcheck="]
    res = subprocess.run(
        [ACTIONLINT, "-no-color", *shellcheck, *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_release_version_check_accepts_the_declared_version() -> None:
    res = subprocess.run(
        [sys.executable, "hack/check-release-version", f"v{VERSION}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == VERSION


@pytest.mark.parametrize("tag", ["v99.0.0", "99.0.0", "v1.2", "release-1"])
def test_release_version_check_refuses_another_tag(tag: str) -> None:
    res = subprocess.run(
        [sys.executable, "hack/check-release-version", tag], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert res.returncode == 1
    if tag == "v99.0.0":
        assert "pyproject.toml [project].version is" in res.stderr
        assert "Chart.yaml version is" in res.stderr and "Chart.yaml appVersion is" in res.stderr


def test_release_builds_every_image_and_checks_the_version_first() -> None:
    release = _workflow("release.yaml")
    assert list(release[True]["push"]["tags"]) == ["v*"]  # `on:` is YAML 1.1's true
    images = {entry["image"] for entry in release["jobs"]["images"]["strategy"]["matrix"]["include"]}
    assert images == {p.parent.name for p in (ROOT / "images").glob("*/Dockerfile")}
    assert release["jobs"]["images"]["needs"] == "version"
    assert "hack/check-release-version" in _steps({"jobs": {"v": release["jobs"]["version"]}})[1]["run"]
    chart = " ".join(s.get("run", "") for s in release["jobs"]["chart"]["steps"])
    assert re.search(r"helm package charts/inference-backend --version \"\$VERSION\" --app-version", chart)
    assert 'helm push "dist/inference-backend-$VERSION.tgz" "oci://$REGISTRY/charts"' in chart


def test_kind_workflow_exports_kubeconfig_and_runs_the_operator_in_cluster() -> None:
    steps = _steps(_workflow("e2e.yaml"))
    runs = "\n".join(s.get("run", "") for s in steps)
    assert 'echo "KUBECONFIG=$RUNNER_TEMP/kubeconfig" >> "$GITHUB_ENV"' in runs
    install = next(s["run"] for s in steps if s.get("name", "").startswith("Install the chart"))
    assert "replicas=0" not in install and "image.pullPolicy=Never" in install
    built = set(re.search(r"for image in ([^;]+);", runs).group(1).split())  # type: ignore[union-attr]
    assert built == {p.parent.name for p in (ROOT / "images").glob("*/Dockerfile")}
    assert "kind load docker-image" in runs
    assert "/v1/completions" in runs


def test_kind_manifests_select_llamacpp_on_the_cpu_worker_with_the_model_from_the_pvc(tmp_path: Path) -> None:
    """The InferenceBackend of e2e/kind/tiny-llamacpp.yaml, against nodes shaped like the kind cluster's (a tainted
    control plane, ib-worker with the GPU labels the workflow adds, ib-worker2 for CPU): llama.cpp, kept off the GPU
    node, reading /models/tiny.gguf from the claim the manifest binds."""
    docs = list(yaml.safe_load_all((ROOT / "e2e/kind/tiny-llamacpp.yaml").read_text()))
    backend = next(d for d in docs if d["kind"] == "InferenceBackend")
    claim = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    (tmp_path / "ib.yaml").write_text(yaml.safe_dump(backend))
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": _kind_nodes()}))
    cli = Path(sys.executable).parent / "inference-backend"
    res = subprocess.run(
        [str(cli), "render", "-f", str(tmp_path / "ib.yaml"), "--nodes", str(tmp_path / "nodes.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    deployment = next(d for d in yaml.safe_load_all(res.stdout) if d and d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"].startswith("ghcr.io/ggml-org/llama.cpp:server-")
    assert container["args"][:2] == ["-m", "/models/tiny.gguf"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [claim["metadata"]["name"]]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.product", "operator": "DoesNotExist"} in terms[0]["matchExpressions"]


def _kind_nodes() -> list[dict[str, Any]]:
    def node(name: str, labels: dict[str, str], gpus: int = 0, taints: list[Any] | None = None) -> dict[str, Any]:
        resources = {"cpu": "4", "memory": "16Gi", "pods": "110", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", **labels},
            },
            "spec": {"taints": taints or []},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    workflow = "\n".join(s.get("run", "") for s in _steps(_workflow("e2e.yaml")))
    gpu_labels = dict(kv.split("=") for kv in re.findall(r"(nvidia\.com/[a-z.]+=[\w-]+)", workflow))
    assert gpu_labels["nvidia.com/gpu.product"] == "NVIDIA-L4"
    return [
        node(
            "ib-control-plane",
            {"node-role.kubernetes.io/control-plane": ""},
            taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        ),
        node("ib-worker", gpu_labels, gpus=1),
        node("ib-worker2", {}),
    ]


def test_the_kind_workflows_model_step_writes_a_gguf_model(tmp_path: Path) -> None:
    """The workflow's own step (its python -c line, with the path moved here) writes a GGUF file that `model inspect`
    reads as a llama model; tests/contracts boot the real llama-server on the same function's models."""
    steps = _steps(_workflow("e2e.yaml"))
    script = next(s["run"] for s in steps if s.get("name", "").startswith("Make a tiny GGUF model"))
    (line,) = [x for x in script.splitlines() if x.strip().startswith("python -c")]
    code = shlex.split(line)[2].replace("/tmp/ib-models", str(tmp_path))
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    cli = Path(sys.executable).parent / "inference-backend"
    res = subprocess.run(
        [
            str(cli),
            "model",
            "inspect",
            str(tmp_path / "tiny.gguf"),
            "--uri",
            "pvc://tiny-models/tiny.gguf",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    spec = json.loads(res.stdout)["spec"]
    assert spec["format"] == "gguf" and spec["layers"] == 2 and spec["uri"] == "pvc://tiny-models/tiny.gguf"


def test_release_builds_each_runner_image_for_the_architectures_its_card_declares() -> None:
    from inference_backend.engines import onnxruntime, pytorch

    include = _workflow("release.yaml")["jobs"]["images"]["strategy"]["matrix"]["include"]
    built = {(e["image"], e["suffix"]): {p.removeprefix("linux/") for p in e["platforms"].split(",")} for e in include}
    from inference_backend.engines.artifacts import OPERATOR_ARCHS

    assert built[("operator", "")] == OPERATOR_ARCHS  # the fetch init container's image
    runners = (
        ("pytorch-runner", "", pytorch.IMAGE),
        ("onnxruntime-server", "", onnxruntime.IMAGE),
        ("onnxruntime-server", "-cuda", onnxruntime.IMAGE_CUDA),
    )
    for image, suffix, card_image in runners:
        card = pytorch.CARD if image == "pytorch-runner" else onnxruntime.CARD
        assert card_image.endswith(suffix) and built[(image, suffix)] == set(card.platforms[card_image].archs)
    assert built[("pytorch-runner", "")] == {"amd64", "arm64"} and built[("onnxruntime-server", "-cuda")] == {"amd64"}
