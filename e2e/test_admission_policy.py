"""The chart's optional ValidatingAdmissionPolicy (admissionPolicy.enabled) on the real apiserver: rendered by `helm
template`, applied, and each of its rules refusing what it should (image overrides, extra flags, hostPath caches,
tolerations), naming the field, while an InferenceBackend within the allowed values is admitted. docs/security.md.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ib_testkit.cluster import CHART, kubectl, tool
from inference_backend.crdgen import render_all
from inference_backend.vocabulary import GROUP

VALUES = [
    "--set",
    "admissionPolicy.enabled=true",
    "--set",
    "admissionPolicy.allowedImagePrefixes={registry.example.com/engines/}",
    "--set",
    "admissionPolicy.allowedExtraArgs={--enforce-eager,--max-log-len}",
    "--set",
    "admissionPolicy.allowedHostPathPrefixes={/var/lib/inference-backend}",
    "--set",
    "admissionPolicy.allowedTolerationKeys={nvidia.com/gpu}",
    # only this test's namespace: the other e2e tests' backends (tolerations, image overrides) are not its business
    "--set-string",
    "admissionPolicy.namespaceSelector.matchLabels.ib-e2e-admission-policy=true",
]
RELEASE = "ib-vap"


def _policy_docs() -> list[dict[str, Any]]:
    res = subprocess.run(
        [
            tool("helm"),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            "ib-system",
            *VALUES,
            "--show-only",
            "templates/admission-policy.yaml",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    return docs


@pytest.fixture(scope="module")
def namespace(wait_until: Any) -> Iterator[str]:
    crds = [yaml.safe_load(text)["metadata"]["name"] for text in render_all().values()]
    absent = [c for c in crds if not kubectl("get", "crd", c, "--ignore-not-found", "-o", "name").strip()]
    for text in render_all().values():
        kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=text)
    kubectl("wait", "--for=condition=Established", f"crd/inferencebackends.{GROUP}", "--timeout=60s")
    docs = _policy_docs()
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    ns = f"vap-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    kubectl("label", "namespace", ns, "ib-e2e-admission-policy=true")
    name = docs[0]["metadata"]["name"]

    def type_checked() -> bool:  # the policy is compiled and its binding in force: a refused object proves it
        return _apply(ns, {"engine": {"image": "elsewhere/x:1"}}, f"probe-{uuid.uuid4().hex[:4]}")[0] != 0

    wait_until("the admission policy in force", type_checked, timeout=60)
    try:
        yield ns
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, check=False)
        # The CRDs this module installed go too: kubectl's field manager would own their fields, and the chart's
        # install in later modules (helm's server-side apply of crds/) would then conflict on .spec.versions.
        for crd in absent:
            kubectl("delete", "crd", crd, "--ignore-not-found", "--wait=true", check=False)


def _apply(ns: str, extra: dict[str, Any], name: str = "b") -> tuple[int, str]:
    spec: dict[str, Any] = {"model": {"uri": "hf://Qwen/Qwen2.5-0.5B-Instruct", "parameters": "0.5B"}}
    for key, value in extra.items():
        spec[key] = {**spec.get(key, {}), **value}
    doc = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }
    res = subprocess.run(
        [tool("kubectl"), "apply", "--dry-run=server", "-f", "-"],
        input=json.dumps(doc),
        capture_output=True,
        text=True,
        check=False,
    )
    return res.returncode, res.stderr


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"engine": {"image": "docker.io/attacker/vllm:latest"}}, "spec.engine.image"),
        ({"engine": {"extraArgs": ["--trust-remote-code"]}}, "spec.engine.extraArgs: --trust-remote-code"),
        ({"engine": {"extraArgs": ["--enforce-eager", "--load-format=dummy"]}}, "--load-format=dummy not allowed"),
        ({"model": {"cache": {"hostPath": "/proc"}}}, "spec.model.cache.hostPath: /proc"),
        ({"model": {"cache": {"hostPath": "/var/lib/inference-backend-evil"}}}, "spec.model.cache.hostPath"),
        ({"hardware": {"tolerations": [{"operator": "Exists"}]}}, "spec.hardware.tolerations"),
        (
            {"hardware": {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}},
            "spec.hardware.tolerations",
        ),
    ],
)
def test_the_policy_refuses_naming_the_field(namespace: str, extra: dict[str, Any], field: str) -> None:
    rc, err = _apply(namespace, extra)
    assert rc != 0, "admitted"
    assert "ValidatingAdmissionPolicy" in err and field in err, err


def test_what_the_policy_allows_is_admitted(namespace: str) -> None:
    rc, err = _apply(
        namespace,
        {
            "engine": {
                "image": "registry.example.com/engines/vllm:0.33.0",
                "extraArgs": ["--enforce-eager", "--max-log-len=100", "100"],
            },
            "model": {"cache": {"hostPath": "/var/lib/inference-backend/models"}},
            "hardware": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        },
    )
    assert rc == 0, err
    assert _apply(namespace, {})[0] == 0  # nothing asked for: nothing to refuse
