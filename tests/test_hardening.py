"""Hardened pods: Pod Security "restricted" wherever the engine's image runs as non-root (its card says which uid,
or why not), no privilege escalation and no capabilities in every container, disk emptyDirs bounded by what they
hold and requested as ephemeral storage."""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import MODELS, cluster, node
from inference_backend.api import InferenceBackend
from inference_backend.engines import NAMES, card
from inference_backend.render import INIT_USER, render
from inference_backend.selection import select

GPU = [node("h100", "h100", 8), node("cpu-a", cpu="32", memory="128Gi")]
CPU = [node("cpu-a", cpu="32", memory="128Gi")]

# One spec per engine that the selection sends to that engine (spec.backend pins it).
SPECS: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "vllm": ({"model": {"modelRef": "llama-3-1-8b"}}, GPU),
    "tgi": ({"model": {"modelRef": "llama-3-1-8b"}}, GPU),
    "sglang": ({"model": {"modelRef": "llama-3-1-8b"}}, GPU),
    "llamacpp": (
        {
            "model": {"uri": "hf://x/Llama-3.1-8B-GGUF/llama-3.1-8b.Q4_K_M.gguf", "parameters": "8B"},
            "hardware": {"accelerator": "cpu"},
        },
        CPU,
    ),
    "onnxruntime": (
        {
            "model": {"uri": "s3://b/phi-3-onnx", "format": "onnx", "parameters": "3.8B"},
            "hardware": {"accelerator": "cpu"},
        },
        CPU,
    ),
    "pytorch": (
        {
            "model": {"uri": "pvc://research-models/gpt-350m", "format": "pytorch", "parameters": "350M"},
            "hardware": {"accelerator": "cpu"},
        },
        CPU,
    ),
}


def pod(engine: str) -> dict[str, Any]:
    body, nodes = SPECS[engine]
    ib = InferenceBackend.model_validate(
        {
            "apiVersion": "serving.inferencebackend.io/v1alpha1",
            "kind": "InferenceBackend",
            "metadata": {"name": "t", "namespace": "default"},
            "spec": {**body, "backend": engine},
        }
    )
    d = select(ib.spec, cluster(*nodes), MODELS)
    assert d.backend == engine, d.reasons[-1]
    spec: dict[str, Any] = render(ib, d)[0]["spec"]["template"]["spec"]
    return spec


def test_every_engine_is_covered() -> None:
    assert set(SPECS) == set(NAMES)


@pytest.mark.parametrize("engine", NAMES)
def test_pod_security_follows_the_card(engine: str) -> None:
    p = pod(engine)
    uid = card(engine).run_as_user
    sc = p["securityContext"]
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    if uid is None:
        assert "runAsNonRoot" not in sc, "a root image is not told to run as non-root (it would not start)"
        assert "root" in card(engine).run_as, "the card says why the image keeps its user"
    else:
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == sc["fsGroup"] == uid
    for c in [*p.get("initContainers", []), *p["containers"]]:
        csc = c["securityContext"]
        assert csc["allowPrivilegeEscalation"] is False and csc["capabilities"] == {"drop": ["ALL"]}
    assert p["automountServiceAccountToken"] is False


def test_fetch_init_containers_run_as_the_operator_images_user() -> None:
    init = pod("onnxruntime")["initContainers"]
    assert [i["name"] for i in init] == ["fetch-model"]
    assert init[0]["securityContext"]["runAsUser"] == INIT_USER and init[0]["securityContext"]["runAsNonRoot"]


def test_weights_on_disk_are_bounded_and_requested_a_pvc_is_not() -> None:
    # hf:// fetched by llama-server itself into the model cache: 4.5 GiB of Q4_K_M weights -> ceil(4.9) + 1 = 6 Gi.
    llama = pod("llamacpp")
    (cache,) = [v for v in llama["volumes"] if v["name"] == "model-cache"]
    size = cache["emptyDir"]["sizeLimit"]
    assert size == llama["containers"][0]["resources"]["requests"]["ephemeral-storage"]
    assert int(size.removesuffix("Gi")) >= 5
    # s3:// fetched by the init container into model-weights: bounded by the weights; nothing else on disk.
    onnx = pod("onnxruntime")
    sizes = {v["name"]: v["emptyDir"]["sizeLimit"] for v in onnx["volumes"] if "emptyDir" in v}
    assert sizes["model-weights"] == onnx["containers"][0]["resources"]["requests"]["ephemeral-storage"]
    # pvc:// weights: the claim is not an emptyDir; the pod asks only for a little disk.
    research = pod("pytorch")
    assert not any(v.get("emptyDir") and v["name"].endswith("-weights") for v in research.get("volumes", []))
    requests = research["containers"][0]["resources"]["requests"]
    assert requests.get("ephemeral-storage", "1Gi") == "1Gi"
