"""The operator's per-backend series (the chart's alerts read them): one phase series per backend, replaced on a
phase change and removed with the backend; the TTFT objective in seconds while the spec sets it."""

from __future__ import annotations

from inference_backend.controller import metrics
from inference_backend.controller.state import _ttft_millis
from inference_backend.names import label_value
from prometheus_client import REGISTRY


def _series(name: str, namespace: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in REGISTRY.collect():
        for s in family.samples:
            if s.name == name and s.labels.get("backend_namespace") == namespace:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_one_phase_series_per_backend_follows_its_phase_and_goes_with_it() -> None:
    g = metrics.BackendGauges()
    g.observe("obs-a", "llm", "Deploying", None)
    g.observe("obs-a", "llm", "Deploying", None)
    assert list(_series("inference_backend_backend_phase", "obs-a").items()) == [
        ((("backend", "llm"), ("backend_instance", "llm"), ("backend_namespace", "obs-a"), ("phase", "Deploying")), 1)
    ]
    g.observe("obs-a", "llm", "Ready", None)
    g.observe("obs-a", "other", "Failed", None)
    phases = {dict(k)["backend"]: dict(k)["phase"] for k in _series("inference_backend_backend_phase", "obs-a")}
    assert phases == {"llm": "Ready", "other": "Failed"}
    g.observe("obs-a", "llm", None, None)  # no phase known: the last one stays
    g.forget("obs-a", "llm")
    g.forget("obs-a", "other")
    g.forget("obs-a", "never-seen")
    assert _series("inference_backend_backend_phase", "obs-a") == {}


def test_ttft_objective_is_exported_in_seconds_while_the_spec_sets_it() -> None:
    g = metrics.BackendGauges()
    long_name = "x" * 100  # a valid InferenceBackend name, longer than a label value may be
    g.observe("obs-b", long_name, "Ready", 250)
    ((labels, value),) = _series("inference_backend_ttft_objective_seconds", "obs-b").items()
    assert value == 0.25
    assert dict(labels)["backend_instance"] == label_value(long_name) != long_name
    g.observe("obs-b", long_name, "Ready", None)  # the objective was removed from the spec
    assert _series("inference_backend_ttft_objective_seconds", "obs-b") == {}
    g.observe("obs-b", long_name, "Ready", 1000)
    g.forget("obs-b", long_name)
    assert _series("inference_backend_ttft_objective_seconds", "obs-b") == {}
    assert _series("inference_backend_backend_phase", "obs-b") == {}


def test_ttft_millis_is_read_from_the_stored_spec() -> None:
    assert _ttft_millis({"spec": {"objectives": {"ttftMillis": 300}}}) == 300
    assert _ttft_millis({"spec": {"objectives": {}}}) is None
    assert _ttft_millis({"spec": {}}) is None
    assert _ttft_millis({}) is None
    assert _ttft_millis({"spec": {"objectives": {"ttftMillis": True}}}) is None
