"""Child names and label values: valid for every name the CRD admits, deterministic, unchanged when already valid.

The validity rules are the apiserver's (k8s.io/apimachinery/pkg/util/validation: IsDNS1035Label,
IsDNS1123Subdomain, IsValidLabelValue), written out here independently of inference_backend.names.
"""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ib_testkit.golden import INPUTS, decide
from inference_backend.api import InferenceBackend
from inference_backend.names import MAX_NAME, dns1035_label, endpoint, label_value, service_name
from inference_backend.render import object_names, render, service_endpoint
from pydantic import ValidationError


def is_dns1035_label(s: str) -> bool:
    return len(s) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", s) is not None


def is_dns1123_subdomain(s: str) -> bool:
    label = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    return len(s) <= 253 and re.fullmatch(rf"{label}(\.{label})*", s) is not None


def is_label_value(s: str) -> bool:
    return len(s) <= 63 and re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", s) is not None


# Names the apiserver admits for an InferenceBackend: DNS-1123 subdomains of at most MAX_NAME characters.
_label = st.text(string.ascii_lowercase + string.digits + "-", min_size=1, max_size=63).filter(
    lambda s: s[0] != "-" and s[-1] != "-"
)
subdomains = st.lists(_label, min_size=1, max_size=8).map(".".join).filter(lambda s: len(s) <= MAX_NAME)

AWKWARD = [
    "llama.chat",
    "1abc",
    "qwen2.5-7b-instruct",
    "a" * 63,
    "a" * 64,
    "b" * MAX_NAME,
    "9",
    "0.0",
    "x." * 100 + "y",
    "llama-chat",
]


@pytest.mark.parametrize("name", AWKWARD)
def test_awkward_names(name: str) -> None:
    assert is_dns1123_subdomain(name)
    svc = service_name(name)
    assert is_dns1035_label(svc), svc
    assert is_label_value(label_value(name)), label_value(name)
    assert endpoint(name, "ns") == f"http://{svc}.ns.svc:8000"


def test_valid_names_are_kept() -> None:
    assert service_name("llama-chat") == "llama-chat"
    assert label_value("llama.chat") == "llama.chat"
    assert service_name("a" * 63) == "a" * 63


def test_derived_names_are_readable_and_hashed() -> None:
    assert re.fullmatch(r"llama-chat-[0-9a-f]{8}", service_name("llama.chat"))
    assert re.fullmatch(r"ib-1abc-[0-9a-f]{8}", service_name("1abc"))
    assert re.fullmatch(r"qwen2-5-7b-instruct-[0-9a-f]{8}", service_name("qwen2.5-7b-instruct"))
    long = label_value("a" * 64)
    assert len(long) == 63 and long.startswith("a" * 54 + "-")
    # Names that differ only where they are truncated or sanitised still map to different children.
    assert service_name("llama.chat") != service_name("llama-chat") != service_name("llama--chat")
    assert label_value("a" * 64) != label_value("a" * 65)


@given(subdomains)
def test_every_admitted_name_gives_valid_children(name: str) -> None:
    svc, value = service_name(name), label_value(name)
    assert is_dns1035_label(svc) and is_label_value(value)
    assert service_name(name) == svc and label_value(name) == value  # deterministic
    if is_dns1035_label(name):
        assert svc == name
    if len(name) <= 63:
        assert value == name


@given(st.text(max_size=300))
def test_any_text_gives_a_valid_label_and_label_value(text: str) -> None:
    assert is_dns1035_label(dns1035_label(text))
    assert is_label_value(label_value(text))


def _ib(name: str) -> InferenceBackend:
    ib, _ = decide(INPUTS / "vllm-replicas-noprefix.yaml")
    assert isinstance(ib, InferenceBackend)
    return ib.model_copy(update={"metadata": ib.metadata.model_copy(update={"name": name})})


@pytest.mark.parametrize("name", AWKWARD)
def test_rendered_children_carry_valid_names_and_labels(name: str) -> None:
    _, decision = decide(INPUTS / "vllm-replicas-noprefix.yaml")
    ib = _ib(name)
    objects = render(ib, decision)
    assert {o["kind"] for o in objects} == {"Deployment", "Service", "PodDisruptionBudget"}
    names = object_names(ib)
    for obj in objects:
        assert obj["metadata"]["name"] == names[obj["kind"]]
        assert is_dns1123_subdomain(obj["metadata"]["name"])
        for value in obj["metadata"]["labels"].values():
            assert is_label_value(value), (obj["kind"], value)
        selector = obj["spec"]["selector"]
        for value in selector.get("matchLabels", selector).values():
            assert is_label_value(value)
    service = next(o for o in objects if o["kind"] == "Service")
    assert is_dns1035_label(service["metadata"]["name"])
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["metadata"]["name"] == name  # the Deployment keeps the InferenceBackend's name
    assert len(deployment["metadata"]["name"]) + 11 <= 253  # its ReplicaSets' names stay subdomains
    assert service_endpoint(ib) == f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:8000"


@pytest.mark.parametrize("name", ["a" * (MAX_NAME + 1), "Llama", "llama_chat", "-a", "a-", "a..b", ""])
def test_names_the_apiserver_refuses_are_refused(name: str) -> None:
    ib, _ = decide(INPUTS / "vllm-replicas-noprefix.yaml")
    assert isinstance(ib, InferenceBackend)
    body = ib.wire() | {"metadata": {"name": name}}
    with pytest.raises(ValidationError, match=r"metadata\.name|name"):
        InferenceBackend.model_validate(body)
