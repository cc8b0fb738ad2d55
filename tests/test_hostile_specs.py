"""Careless and hostile specs the CRD used to admit whose pods never ran or misbehaved (issue 31): each is now
refused at admission naming the field, or rendered so the pod runs as the user meant."""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import MODELS, cluster, node
from inference_backend.api import InferenceBackend
from inference_backend.quantity import decimal_text
from inference_backend.render import render
from inference_backend.selection import select

GPU = [node("h100", "h100", 8), node("cpu-a", cpu="32", memory="128Gi")]
CPU = [node("cpu-a", cpu="32", memory="128Gi")]


def ib(spec: dict[str, Any], name: str = "t") -> InferenceBackend:
    return InferenceBackend.model_validate({
        "apiVersion": "serving.inferencebackend.io/v1alpha1", "kind": "InferenceBackend",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec,
    })  # fmt: skip


def container(spec: dict[str, Any], nodes: list[dict[str, Any]] = GPU) -> dict[str, Any]:
    b = ib(spec)
    d = select(b.spec, cluster(*nodes), MODELS)
    assert d.backend is not None, d.reasons[-1]
    c: dict[str, Any] = render(b, d)[0]["spec"]["template"]["spec"]["containers"][0]
    return c


@pytest.mark.parametrize(("value", "text"), [
    (1048576.0, "1048576"), (0.9, "0.9"), (1e-05, "0.00001"), (123456.7, "123456.7"),
    (0.1 + 0.2, "0.30000000000000004"), (2.0**70, "1180591620717411300000"), (-0.0, "0"),
])  # fmt: skip
def test_numbers_are_written_exactly(value: float, text: str) -> None:
    assert decimal_text(value) == text
    assert float(text) == value


def test_cpu_offload_reaches_vllm_exactly() -> None:
    """cpuOffloadGiB 1048576 reached vLLM as 1.04858e+06 (six significant digits)."""
    spec = {"model": {"modelRef": "llama-3-1-8b"}, "backend": "vllm", "kvCache": {"cpuOffloadGiB": 1048576}}
    args = container(spec, [node("h100", "h100", 8, memory="2Pi")])["args"]
    assert args[args.index("--kv-offloading-size") + 1] == "1048576"
    spec["kvCache"] = {"cpuOffloadGiB": 1.25, "memoryFraction": 0.123456789}
    args = container(spec)["args"]
    assert args[args.index("--kv-offloading-size") + 1] == "1.25"
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.123456789"
