"""No user text expands: the kubelet expands ``$(VAR)`` in a container's command, args and env values from the
container's environment (and turns ``$$`` into ``$``), so a servedName ``$(HF_TOKEN)`` would serve the Hub token in
``GET /v1/models`` and a uri holding ``$(AWS_SECRET_ACCESS_KEY)`` would send the key in the S3 path. render.py
escapes every such string in one place (``no_expansion``: ``$`` -> ``$$``) but the operator's own references (the
LeaderWorkerSet's ``$(LWS_LEADER_ADDRESS)``).

Checked over every string field of the CRD, for every engine and for a LeaderWorkerSet, with a port of the kubelet's
expansion (ib_testkit.expansion), itself held equal to the real Go code (the ``kube-expansion`` command
e2e/build-binaries builds from k8s.io/kubernetes third_party/forked/golang/expansion at the pinned release)."""

from __future__ import annotations

import copy
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ib_testkit.expansion import (
    LWS_VARIABLES,
    container_env,
    expand,
    expand_container,
    kubelet,
    kubelet_binary,
    mapping_for,
    marker,
)
from ib_testkit.factories import MODELS, cluster, node
from ib_testkit.fuzz import set_path, string_fields
from inference_backend.api import InferenceBackend
from inference_backend.api.model import ModelSpec
from inference_backend.crdgen import inference_backend_crd
from inference_backend.decision import InvalidSpec
from inference_backend.engines import check_spec
from inference_backend.render import literal, render
from inference_backend.selection import select
from pydantic import ValidationError

GPU = [node("h100", "h100", 8), node("cpu-a", cpu="32", memory="128Gi")]
CPU = [node("cpu-a", cpu="32", memory="128Gi")]
H100X8 = [node(f"h{i}", "h100", 8) for i in range(4)]
REGISTRY = dict(MODELS) | {
    "llama-3-1-405b": ModelSpec.model_validate(
        {
            "uri": "hf://meta-llama/Llama-3.1-405B-Instruct",
            "parameters": "405B",
            "dtype": "bfloat16",
            "contextLength": 8192,
        }
    ),
}

_FULL: dict[str, Any] = {
    "engine": {
        "extraArgs": ["--hostile-extra"],
        "env": [
            {"name": "USER_VALUE", "value": "v"},
            {"name": "USER_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
    },
    "hardware": {
        "tolerations": [{"key": "example.com/k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}],
        "nodeSelector": {},
    },
    "resources": {"requests": {"cpu": "1"}},
}
# (spec, nodes): one per engine (spec.backend pins it) and a LeaderWorkerSet; every optional object present, so a
# string anywhere in the schema has a place to go.
BASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "vllm": (
        {
            "model": {
                "uri": "hf://meta-llama/Llama-3.1-8B-Instruct",
                "parameters": "8B",
                "servedName": "chat",
                "credentialsSecret": "hf",
            },
            # the volume (pvc://) keeps the adapters in the pod template, so the fetch init container's command carries
            # adapters[0].uri; fetched adapters alone would go to the sidecar through the ConfigMap (data the
            # kubelet never expands)
            "adapters": [
                {"name": "sql", "uri": "hf://org/llama-3.1-8b-sql-lora"},
                {"name": "legal", "uri": "pvc://claims/legal"},
            ],
        },
        GPU,
    ),
    "tgi": (
        {
            "model": {
                "uri": "s3://bucket/llama-3.1-8b",
                "format": "safetensors",
                "parameters": "8B",
                "credentialsSecret": "aws",
            }
        },
        GPU,
    ),
    "sglang": (
        {
            "model": {
                "uri": "gs://bucket/llama-3.1-8b",
                "format": "safetensors",
                "parameters": "8B",
                "servedName": "chat",
                "credentialsSecret": "gcs",
            }
        },
        GPU,
    ),
    "llamacpp": (
        {
            "model": {
                "uri": "hf://x/Llama-3.1-8B-GGUF/llama-3.1-8b.Q4_K_M.gguf",
                "parameters": "8B",
                "servedName": "chat",
                "credentialsSecret": "hf",
                "cache": {"pvc": "weights"},
            },
            "hardware": {"accelerator": "cpu"},
            "autoscaling": {
                "minReplicas": 0,
                "maxReplicas": 2,
                "metric": "queueDepth",
                "target": 4,
                "scaleToZero": {"cooldownSeconds": 300, "wakeQuery": "sum(up)"},
            },
        },
        CPU,
    ),
    "onnxruntime": (
        {
            "model": {
                "uri": "https://example.com/phi-3.onnx",
                "format": "onnx",
                "parameters": "3.8B",
                "servedName": "chat",
            },
            "hardware": {"accelerator": "cpu"},
        },
        CPU,
    ),
    "pytorch": (
        {
            "model": {
                "uri": "pvc://research-models/gpt-350m",
                "format": "pytorch",
                "parameters": "350M",
                "servedName": "chat",
            },
            "hardware": {"accelerator": "cpu"},
        },
        CPU,
    ),
    "lws": (
        {"model": {"modelRef": "llama-3-1-405b", "servedName": "chat", "credentialsSecret": "hf"}, "backend": "vllm"},
        H100X8,
    ),
}
HOSTILE = (
    "$(HF_TOKEN)",
    "$$(AWS_SECRET_ACCESS_KEY)",
    "x$$$(GOOGLE_APPLICATION_CREDENTIALS_JSON)$",
    "$(USER_SECRET",
    "$(LWS_LEADER_ADDRESS)",
    "$(USER_SECRET)$",
)
_PREFIXES = {"uri": ("hf://org/", "s3://bucket/", "pvc://claim/", "https://example.com/"), "": ("",)}
CARRIED = {
    "spec.model.uri",
    "spec.model.servedName",
    "spec.engine.extraArgs[]",
    "spec.engine.env[].value",
    "spec.adapters[].uri",
}
"""String fields that reach a command, args or env value: each must be rendered at least once with hostile text."""


def _ib(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": body,
    }


def _containers(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for obj in objects:
        spec = obj.get("spec", {})
        templates = [spec.get("template")]
        lwt = spec.get("leaderWorkerTemplate")
        if lwt:
            templates = [lwt["leaderTemplate"], lwt["workerTemplate"]]
        for tpl in templates:
            if tpl:
                yield from tpl["spec"].get("initContainers", [])
                yield from tpl["spec"]["containers"]


def _render(body: dict[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The rendered objects, or None where the spec is refused or unsatisfiable (then nothing runs)."""
    try:
        ib = InferenceBackend.model_validate(_ib(body))
        check_spec(ib.spec)
        decision = select(ib.spec, cluster(*nodes), REGISTRY)
        return render(ib, decision) if decision.backend is not None else None
    except (ValidationError, InvalidSpec, ValueError):
        return None


_SECRETS = (
    "HF_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "USER_SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS_JSON",
)
LEAKS = {marker(n) for n in (*_SECRETS, "KUBERNETES_SERVICE_HOST", *LWS_VARIABLES)}


def _expanded(container: dict[str, Any]) -> list[str]:
    """What the kubelet runs of ``container``: its command and args, and the values of its env entries that are
    literal (an entry from a Secret holds the secret itself: that is where it belongs)."""
    texts, values = expand_container(container)
    pairs = container_env(container)
    literal_env = {e["name"] for e in container.get("env") or [] if "value" in e}
    return [*texts, *(v for (name, _), v in zip(pairs, values, strict=True) if name in literal_env)]


def _markers(objects: list[dict[str, Any]]) -> Counter[str]:
    """The variables' values found in what the kubelet runs, counted."""
    return Counter(m for c in _containers(objects) for t in _expanded(c) for m in LEAKS if m in t)


def _cases() -> Iterator[tuple[str, str, str, list[dict[str, Any]] | None]]:
    crd = inference_backend_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fields = sorted(set(string_fields(crd)))
    for base, (body, nodes) in BASES.items():
        body = {**copy.deepcopy(_FULL), **copy.deepcopy(body)}
        body.setdefault("backend", base)
        for field in fields:
            for prefix in _PREFIXES["uri" if field.endswith(".uri") else ""]:
                for hostile in HOSTILE:
                    yield base, field, prefix + hostile, _render(set_path(body, field, prefix + hostile), nodes)


CASES = list(_cases())
BASELINE = {
    base: _render({**copy.deepcopy(_FULL), **copy.deepcopy(b), "backend": b.get("backend", base)}, n)
    for base, (b, n) in BASES.items()
}


def test_every_base_renders_and_the_leaderworkerset_keeps_its_references() -> None:
    for base, objects in BASELINE.items():
        assert objects is not None, base
        if base != "lws":
            assert not _markers(objects), base
    lws = BASELINE["lws"]
    assert lws is not None and lws[0]["kind"] == "LeaderWorkerSet"
    # --master-addr $(LWS_LEADER_ADDRESS) in both templates, --node-rank $(LWS_WORKER_INDEX) in the worker's
    assert _markers(lws) == {marker("LWS_LEADER_ADDRESS"): 2, marker("LWS_WORKER_INDEX"): 1}


def test_no_string_field_of_the_crd_expands() -> None:
    """Every string field, every engine, every hostile text: either the spec is refused (nothing runs) or no
    variable's value reaches a command, an argument or a literal env value beyond the operator's own references,
    and the text arrives as written."""
    counts: Counter[str] = Counter()
    carried: set[str] = set()
    for base, field, value, objects in CASES:
        counts["cases"] += 1
        if objects is None:
            counts["refused or unsatisfiable"] += 1
            continue
        counts["rendered"] += 1
        baseline = BASELINE[base]
        assert baseline is not None
        got, expected = _markers(objects), _markers(baseline)
        assert got == expected, f"{base} {field}={value!r}: {got - expected} expanded"
        if any(value in t for c in _containers(objects) for t in _expanded(c)):
            carried.add(field)
    assert carried >= CARRIED, f"never rendered with hostile text: {CARRIED - carried}"
    print(f"expansion: {len({f for _, f, _, _ in CASES})} string fields, {dict(counts)}")


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="$()ab{}\u00e9\u4e2d", max_size=24),
    st.dictionaries(st.sampled_from(["a", "b", "HF_TOKEN"]), st.text(alphabet="$()x", max_size=6)),
)
def test_literal_is_exact_under_any_environment(text: str, env: dict[str, str]) -> None:
    assert expand(literal(text), mapping_for(env)) == text


def _kubelet() -> Any:
    binary = kubelet_binary()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("no kube-expansion in $IB_CACHE/bin: e2e/build-binaries builds it")
        pytest.skip("no kube-expansion in $IB_CACHE/bin (e2e/build-binaries builds it)")
    return binary


def test_the_port_is_the_kubelets_expansion() -> None:
    """The Python port against the real Go code: on tricky texts and on every container rendered above."""
    binary = _kubelet()
    tricky = [
        "$(A)",
        "$$(A)",
        "$$$(A)",
        "$",
        "a$",
        "$$",
        "$(",
        "$(A",
        "$()",
        "$)",
        "$a",
        "$\u00e9(A)",
        "$(A)$(B)",
        "$((A))",
        "$(A))",
        "$(A$(B))",
        "\u4e2d$(A)\u4e2d",
        literal("$(A)$$(B)$"),
    ]
    cases: list[tuple[list[tuple[str, str]], list[str]]] = [([("A", "x"), ("B", "$(A)y")], tricky)]
    containers = [c for _, _, _, objs in CASES if objs for c in _containers(objs)]
    for c in containers:
        cases.append((container_env(c), [*(c.get("command") or []), *(c.get("args") or [])]))
    real = kubelet(cases, binary)
    env = {"A": "x", "B": expand("$(A)y", mapping_for({"A": "x"}))}
    assert real[0][0] == [expand(t, mapping_for(env)) for t in tricky]
    for c, (texts, values) in zip(containers, real[1:], strict=True):
        assert (texts, values) == expand_container(c)
    print(f"kube-expansion agrees on {len(tricky)} texts and {len(containers)} containers")
