"""spec.autoscaling: the API's rules (pydantic, both directions), the per-engine metric table and its sources, the
rendered KEDA ScaledObject, and the replicas the operator leaves to the autoscaler (reconcile with a recorder).

The real apiserver (CEL, the scale subresource, field ownership) is e2e/test_autoscaling_api.py."""

from __future__ import annotations

import asyncio
import glob
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit import ROOT
from ib_testkit.factories import MODELS, backend, node
from ib_testkit.writer import FakeWriter
from inference_backend import autoscaling
from inference_backend.api import InferenceBackend, InferenceBackendSpec
from inference_backend.capacity import GpuLedger
from inference_backend.controller.reconcile import reconcile
from inference_backend.controller.world import Child, Recent, World
from inference_backend.decision import InvalidSpec
from inference_backend.engines import CARDS, REGISTRY, check_spec
from inference_backend.facts import group_nodes
from inference_backend.manifests import load, registry
from inference_backend.render import render, selector_string
from inference_backend.selection import select
from inference_backend.vocabulary import APPLIED_HASH, REPLICAS_OWNER
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

CACHE = Path(os.environ.get("IB_CACHE", Path.home() / ".cache" / "inference-backend"))
AUTO = {"minReplicas": 1, "maxReplicas": 4, "metric": "queueDepth", "target": 4}

# The table docs/autoscaling.md states, pinned here: engine -> signal -> metric.
TABLE = {
    "vllm": {
        "queueDepth": "vllm:num_requests_waiting",
        "runningRequests": "vllm:num_requests_running",
        "kvCacheUsage": "vllm:kv_cache_usage_perc",
        "ttft": "vllm:time_to_first_token_seconds",
    },
    "tgi": {"queueDepth": "tgi_queue_size", "runningRequests": "tgi_batch_current_size"},
    "sglang": {
        "queueDepth": "sglang:num_queue_reqs",
        "runningRequests": "sglang:num_running_reqs",
        "kvCacheUsage": "sglang:token_usage",
        "ttft": "sglang:time_to_first_token_seconds",
    },
    "llamacpp": {"queueDepth": "llamacpp:requests_deferred", "runningRequests": "llamacpp:requests_processing"},
    "onnxruntime": {
        "queueDepth": "vllm:num_requests_waiting",
        "runningRequests": "vllm:num_requests_running",
        "kvCacheUsage": "vllm:kv_cache_usage_perc",
        "ttft": "vllm:time_to_first_token_seconds",
    },
    "pytorch": {
        "queueDepth": "vllm:num_requests_waiting",
        "runningRequests": "vllm:num_requests_running",
        "kvCacheUsage": "vllm:kv_cache_usage_perc",
        "ttft": "vllm:time_to_first_token_seconds",
    },
}


def spec(**autoscaling_: Any) -> dict[str, Any]:
    return {"model": {"uri": "hf://a/b"}, "autoscaling": {**AUTO, **autoscaling_}}


# -- API ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"minReplicas": 4},
        {"metric": "kvCacheUsage", "target": 80},
        {"metric": "ttft", "target": 750.5},
        {"minReplicas": 0, "scaleToZero": {"cooldownSeconds": 300, "wakeQuery": "sum(rate(x[1m]))"}},
        {"behavior": {"scaleUpStabilizationSeconds": 0, "scaleDownStabilizationSeconds": 3600}},
    ],
)
def test_valid_autoscaling_is_admitted(extra: dict[str, Any]) -> None:
    s = InferenceBackendSpec.model_validate(spec(**extra))
    assert s.autoscaling is not None and s.autoscaling.max_replicas == 4


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"minReplicas": 5}, "autoscaling.minReplicas must be at most autoscaling.maxReplicas"),
        ({"minReplicas": 0}, "autoscaling.minReplicas 0 scales to zero: set autoscaling.scaleToZero"),
        ({"scaleToZero": {"cooldownSeconds": 300, "wakeQuery": "up"}}, "autoscaling.minReplicas must be 0"),
        ({"metric": "kvCacheUsage", "target": 101}, "autoscaling.target is a percentage"),
        ({"target": 0}, "target"),
        ({"maxReplicas": 0}, "maxReplicas"),
        ({"maxReplicas": 1001}, "maxReplicas"),
        ({"metric": "gpuUtilization"}, "metric"),
        ({"minReplicas": 0, "scaleToZero": {"cooldownSeconds": 5, "wakeQuery": "up"}}, "cooldownSeconds"),
        ({"minReplicas": 0, "scaleToZero": {"cooldownSeconds": 60}}, "wakeQuery"),
        ({"behavior": {"scaleDownStabilizationSeconds": 3601}}, "scaleDownStabilizationSeconds"),
        ({"replicas": 3}, "replicas"),  # unknown field inside autoscaling
    ],
)
def test_invalid_autoscaling_is_refused_naming_the_field(extra: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as e:
        InferenceBackendSpec.model_validate(spec(**extra))
    assert says in str(e.value)


def test_maxreplicas_and_metric_are_required() -> None:
    for missing in ("maxReplicas", "metric", "target"):
        auto = {k: v for k, v in AUTO.items() if k != missing}
        with pytest.raises(ValidationError) as e:
            InferenceBackendSpec.model_validate({"model": {"uri": "hf://a/b"}, "autoscaling": auto})
        assert missing in str(e.value)


@pytest.mark.parametrize(
    ("backend", "extra", "field"),
    [
        ("tgi", {"metric": "kvCacheUsage", "target": 50}, "spec.autoscaling.metric"),
        ("llamacpp", {"metric": "ttft", "target": 500}, "spec.autoscaling.metric"),
        (
            "vllm",
            {"minReplicas": 0, "scaleToZero": {"cooldownSeconds": 60, "wakeQuery": "up"}},
            "spec.autoscaling.minReplicas",
        ),
    ],
)
def test_engine_rules_name_the_field(backend: str, extra: dict[str, Any], field: str) -> None:
    s = InferenceBackendSpec.model_validate({**spec(**extra), "backend": backend})
    with pytest.raises(InvalidSpec) as e:
        check_spec(s)
    assert e.value.field == field and backend in str(e.value)


def test_engine_rules_admit_what_the_engine_has() -> None:
    for c in REGISTRY:
        for signal in c.autoscaling.signals:
            target = 50 if signal == "kvCacheUsage" else 4
            check_spec(InferenceBackendSpec.model_validate({**spec(metric=signal, target=target), "backend": c.name}))


# -- the metric table and its sources ------------------------------------------------------------------------------


def test_every_card_declares_its_signals_as_the_table_says() -> None:
    assert {c.name: {s: m.metric for s, m in c.autoscaling.signals.items()} for c in REGISTRY} == TABLE
    for c in REGISTRY:
        assert c.autoscaling.cold_start and all(m.source for m in c.autoscaling.signals.values())
        assert c.version in " ".join(m.source for m in c.autoscaling.signals.values()), c.name
    zero = {c.name for c in REGISTRY if c.autoscaling.scale_to_zero}
    assert zero == {"llamacpp", "onnxruntime", "pytorch"}


def test_the_docs_table_is_the_cards() -> None:
    doc = (ROOT / "docs" / "autoscaling.md").read_text()
    assert autoscaling_table() in doc, (
        "docs/autoscaling.md's table differs from the cards: python -m inference_backend.autoscaling"
    )


def autoscaling_table() -> str:
    from inference_backend.autoscaling import markdown_table

    return markdown_table()


def test_runner_metrics_are_served_under_the_declared_names() -> None:
    """Our runners' real metrics module, exposed and parsed as Prometheus would."""
    from inference_backend.runners.common.metrics import Metrics

    text = generate_latest(Metrics("m").registry).decode()
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    for sig in CARDS["pytorch"].autoscaling.signals.values():
        assert families.get(sig.metric) == sig.kind, sig.metric


def _site(venv: str) -> Path | None:
    found = glob.glob(str(CACHE / venv / "lib" / "python3*" / "site-packages"))
    return Path(found[0]) if found else None


def _defined(source: str, kind: str, name: str) -> bool:
    """Whether ``source`` (Python) defines metric ``name`` of ``kind`` (a Gauge/Histogram call naming it)."""
    calls = {"gauge": r"(Gauge|_gauge_cls)", "histogram": r"(Histogram|_histogram_cls)"}[kind]
    return re.search(calls + r"\(\s*name=\"" + re.escape(name) + '"', source) is not None


def test_vllm_defines_the_declared_metrics() -> None:
    site = _site("venv-vllm-0.33.0")
    if site is None:
        pytest.skip("no vLLM 0.33.0 venv (hack/vllm-venv)")
    source = (site / "vllm" / "v1" / "metrics" / "loggers.py").read_text()
    for sig in CARDS["vllm"].autoscaling.signals.values():
        assert _defined(source, sig.kind, sig.metric), sig.metric


def test_sglang_defines_the_declared_metrics() -> None:
    site = _site("venv-sglang-0.5.23")
    if site is None:
        pytest.skip("no SGLang 0.5.23 venv (hack/sglang-venv)")
    source = (site / "sglang" / "srt" / "observability" / "metrics_collector.py").read_text()
    for sig in CARDS["sglang"].autoscaling.signals.values():
        assert _defined(source, sig.kind, sig.metric), sig.metric


def test_llama_server_defines_the_declared_gauges_and_no_kv_usage() -> None:
    found = glob.glob(
        str(CACHE / "llama.cpp" / "*" / "src" / "*" / "vendor" / "llama.cpp" / "tools" / "server" / "server-task.cpp")
    )
    if not found:
        pytest.skip("no llama.cpp source in the cache (hack/build-llama-server)")
    source = Path(found[0]).read_text()
    gauges = source[source.index("std::vector<metric_item> gauges") :]
    for sig in CARDS["llamacpp"].autoscaling.signals.values():
        assert f'"{sig.metric.removeprefix("llamacpp:")}"' in gauges[: gauges.index("};")], sig.metric
    assert "kv_cache_usage_ratio" not in source, "the pinned llama-server has a KV usage gauge after all"


# -- rendering ------------------------------------------------------------------------------------------------------


def _ib(sp: dict[str, Any], name: str = "chat", namespace: str = "ns") -> InferenceBackend:
    meta = {"name": name, "namespace": namespace}
    return InferenceBackend.model_validate(
        {"apiVersion": "serving.inferencebackend.io/v1alpha1", "kind": "InferenceBackend", "metadata": meta, "spec": sp}
    )


CLUSTER = group_nodes([node("l4-a", "l4", 4), node("cpu-a")])


def _render(sp: dict[str, Any], **kw: Any) -> dict[str, dict[str, Any]]:
    ib = _ib(sp)
    decision = select(ib.spec, CLUSTER, {"llama-3-1-8b": MODELS["llama-3-1-8b"]})
    return {o["kind"]: o for o in render(ib, decision, **kw)}


def test_autoscaled_deployment_has_no_replicas_and_a_scaled_object() -> None:
    sp = {"model": {"modelRef": "llama-3-1-8b"}, "replicas": 3, "autoscaling": AUTO}
    out = _render(sp)
    assert "replicas" not in out["Deployment"]["spec"]
    assert set(out) == {"Deployment", "Service", "PodDisruptionBudget", "ScaledObject"}
    so = out["ScaledObject"]["spec"]
    assert so["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"}
    assert (so["minReplicaCount"], so["maxReplicaCount"]) == (1, 4)
    (trigger,) = so["triggers"]
    assert trigger["metricType"] == "AverageValue"
    assert trigger["metadata"] == {
        "serverAddress": autoscaling.DEFAULT_PROMETHEUS,
        "query": 'sum(vllm:num_requests_waiting{namespace="ns",app_kubernetes_io_instance="chat"})',
        "threshold": "4",
    }
    assert "cooldownPeriod" not in so and "advanced" not in so


def test_fixed_replicas_render_no_scaler() -> None:
    out = _render({"model": {"modelRef": "llama-3-1-8b"}, "replicas": 3})
    assert out["Deployment"]["spec"]["replicas"] == 3 and "ScaledObject" not in out


def test_one_replica_at_most_has_no_pdb() -> None:
    out = _render({"model": {"modelRef": "llama-3-1-8b"}, "autoscaling": {**AUTO, "maxReplicas": 1}})
    assert "PodDisruptionBudget" not in out


def test_settings_set_the_address_and_the_matchers() -> None:
    settings = autoscaling.Settings("http://prom.example:9090", 'kubernetes_namespace="{namespace}",ib="{name}"')
    sp = {"model": {"modelRef": "llama-3-1-8b"}, "autoscaling": {**AUTO, "metric": "kvCacheUsage", "target": 70}}
    (trigger,) = _render(sp, scaling=settings)["ScaledObject"]["spec"]["triggers"]
    assert trigger["metadata"]["serverAddress"] == "http://prom.example:9090"
    assert trigger["metadata"]["query"] == 'sum(vllm:kv_cache_usage_perc{kubernetes_namespace="ns",ib="chat"}) * 100'
    assert trigger["metadata"]["threshold"] == "70"


def test_an_engine_without_the_signal_is_not_selected() -> None:
    """backend auto: TGI and llama.cpp have no TTFT histogram, so they are rejected with the reason."""
    gguf = {
        "model": {"uri": "hf://x/y/m.gguf", "parameters": "1B", "format": "gguf", "quantization": "q4_k_m"},
        "hardware": {"accelerator": "cpu"},
        "autoscaling": {**AUTO, "metric": "ttft", "target": 500},
    }
    ib = _ib(gguf)
    decision = select(ib.spec, CLUSTER, {})
    assert not decision.satisfiable
    assert "no ttft metric to autoscale on (spec.autoscaling.metric" in dict(decision.rejected)["llamacpp"]


def test_the_docs_examples_render_their_scalers() -> None:
    nodes = group_nodes(load(ROOT / "docs/examples/nodes/mixed.yaml")[2])
    models = load(ROOT / "docs/examples/models.yaml")[1]
    for name, metric in (
        ("vllm-autoscaled.yaml", "vllm:num_requests_waiting"),
        ("llamacpp-scale-to-zero.yaml", "llamacpp:requests_processing"),
    ):
        (ib,) = load(ROOT / "docs/examples" / name)[0]
        decision = select(ib.spec, nodes, registry(models, "default"))
        so = next(o for o in render(ib, decision) if o["kind"] == "ScaledObject")
        assert metric in so["spec"]["triggers"][0]["metadata"]["query"]
    assert so["spec"]["minReplicaCount"] == 0 and so["spec"]["cooldownPeriod"] == 900
    wake = so["spec"]["triggers"][1]
    assert wake["name"] == "wake" and wake["metadata"]["activationThreshold"] == "0"


# -- reconcile: replicas ownership -----------------------------------------------------------------------------------


def _NotFound() -> Exception:
    """What lightkube raises when the API server does not serve the resource type: its plain 404 page has no Status
    body, so the HTTP library's error comes through (seen on the e2e cluster without the KEDA CRD)."""
    import httpx2

    url = "https://127.0.0.1/apis/keda.sh/v1alpha1/namespaces/ns/scaledobjects/chat"
    request = httpx2.Request("PATCH", url)
    response = httpx2.Response(404, text="404 page not found", request=request)
    return httpx2.HTTPStatusError("Client error '404 Not Found'", request=request, response=response)


def _body(sp: dict[str, Any], status: dict[str, Any] | None = None, generation: int = 1) -> dict[str, Any]:
    return backend("chat", sp, status, generation=generation, uid="u-1")


def _world(children: dict[tuple[str, str, str], Child] | None = None, ledger: GpuLedger | None = None) -> World:
    return World(CLUSTER, {"ns": list(MODELS.items())}, children or {}, ledger=ledger)


def _run(b: dict[str, Any], w: World, rec: FakeWriter, recent: Recent | None = None) -> Any:
    return asyncio.run(reconcile(b, w, rec, "test", recent))


def _children(rec: FakeWriter, replicas: int, owner: str | None = "autoscaler") -> dict[tuple[str, str, str], Child]:
    """The children as the index sees them after ``rec``'s applies, the Deployment at ``replicas`` (as the
    autoscaler set them)."""
    out = {}
    for call, obj in rec.calls:
        if call != "apply" or obj["kind"] == "ScaledObject":
            continue
        body: dict[str, Any] = {}
        if obj["kind"] == "Deployment":
            body = {"spec": {**obj["spec"], "replicas": replicas}, "status": {"replicas": replicas}}
        out[("ns", obj["metadata"]["name"], obj["kind"])] = Child(
            obj["metadata"]["annotations"][APPLIED_HASH], body, owner
        )
    return out


AUTOSCALED = {"model": {"modelRef": "llama-3-1-8b"}, "autoscaling": AUTO}


def test_autoscaled_backend_leaves_replicas_and_never_reverts_them() -> None:
    rec = FakeWriter()
    first = _run(_body(AUTOSCALED), _world(), rec)
    kinds = [o["kind"] for c, o in rec.calls if c == "apply"]
    assert kinds == ["Deployment", "Service", "PodDisruptionBudget", "ScaledObject"]
    deployment = rec.calls[0][1]
    assert "replicas" not in deployment["spec"] and deployment["metadata"]["annotations"][REPLICAS_OWNER]
    st = first.status
    assert st["selector"] == selector_string("chat") and st["autoscaling"]["scaledObject"] == "chat"
    cond = {c["type"]: c for c in st["conditions"]}["Autoscaling"]
    assert cond["status"] == "True" and "vllm:num_requests_waiting" in cond["message"]
    # The HPA moves the Deployment to 3, then 4 replicas: reconciles write no child, only the status follows.
    status = st
    for replicas in (3, 4, 4):
        again = FakeWriter()
        out = _run(_body(AUTOSCALED, status), _world(_children(rec, replicas)), again)
        assert again.calls == [], f"a reconcile at {replicas} replicas wrote {again.calls}"
        assert out.status["replicas"] == replicas
        status = out.status
    assert len(again.statuses) == 0, "an unchanged world writes no status either"


def test_turning_autoscaling_on_hands_the_replicas_over_first() -> None:
    rec = FakeWriter()
    fixed = {"model": {"modelRef": "llama-3-1-8b"}, "replicas": 2}
    first = _run(_body(fixed), _world(), rec)
    on = FakeWriter()
    _run(_body(AUTOSCALED, first.status, generation=2), _world(_children(rec, 2, owner=None)), on)
    assert on.calls[0] == ("handoff", ("Deployment", 2))
    assert on.calls[1][0] == "apply" and on.calls[1][1]["kind"] == "Deployment"
    assert "replicas" not in on.calls[1][1]["spec"]


def test_turning_autoscaling_off_deletes_the_scaler_then_takes_replicas_back() -> None:
    rec = FakeWriter()
    first = _run(_body(AUTOSCALED), _world(), rec)
    off = FakeWriter()
    fixed = {"model": {"modelRef": "llama-3-1-8b"}, "replicas": 2}
    out = _run(_body(fixed, first.status, generation=2), _world(_children(rec, 3)), off)
    assert off.calls[0] == ("delete", ("ScaledObject", "ns", "chat"))
    deployment = next(o for c, o in off.calls if c == "apply" and o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert "autoscaling" not in out.status
    assert "Autoscaling" not in {c["type"] for c in out.status["conditions"]}


def test_missing_keda_crd_is_a_condition_not_a_failure_nor_a_hot_loop() -> None:
    rec = FakeWriter().fail(_NotFound(), kind="ScaledObject")
    recent = Recent()
    out = _run(_body(AUTOSCALED), _world(), rec, recent)
    cond = {c["type"]: c for c in out.status["conditions"]}["Autoscaling"]
    assert cond["status"] == "False" and cond["reason"] == "ScalerMissing"
    assert "scaledobjects.keda.sh" in cond["message"]
    assert out.recheck_after == 60.0 and "autoscaling" not in out.status
    again = FakeWriter().fail(_NotFound(), kind="ScaledObject")
    _run(_body(AUTOSCALED, out.status), _world(_children(rec, 1)), again, recent)
    assert again.calls == [], "within the retry interval nothing is tried again"


def test_gpu_reservation_follows_the_autoscaler_and_reports_overcommit() -> None:
    """4 L4s; another backend holds 2. minReplicas 1 fits; the HPA asks for 4 replicas: reserved as they are, and
    the Autoscaling condition says the replicas beyond the free GPUs stay Pending."""
    ledger = GpuLedger()
    rec = FakeWriter()
    first = _run(_body(AUTOSCALED), _world(ledger=ledger), rec)
    pool = ledger.held(("ns", "chat"))
    assert pool is not None and pool[1] == 1
    ledger.set(("ns", "other"), (pool[0], 2))
    again = FakeWriter()
    out = _run(_body(AUTOSCALED, first.status), _world(_children(rec, 4), ledger), again)
    assert ledger.held(("ns", "chat")) == (pool[0], 4)
    cond = {c["type"]: c for c in out.status["conditions"]}["Autoscaling"]
    assert cond["reason"] == "CapacityExceeded" and "asked for 4 replica(s)" in cond["message"]
    assert "2 of 4 are free" in cond["message"]


def test_cli_render_takes_the_operators_prometheus_settings(capsys: pytest.CaptureFixture[str]) -> None:
    from inference_backend.cli import main

    examples = ROOT / "docs/examples"
    args = [
        "-f",
        str(examples / "vllm-autoscaled.yaml"),
        "--nodes",
        str(examples / "nodes/mixed.yaml"),
        "--models",
        str(examples / "models.yaml"),
    ]
    code = main(
        [
            "render",
            *args,
            "--prometheus-address",
            "http://prom:9090",
            "--autoscaling-label-matchers",
            'ns="{namespace}"',
        ]
    )
    assert code == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    (so,) = [d for d in docs if d["kind"] == "ScaledObject"]
    assert so["spec"]["triggers"][0]["metadata"]["serverAddress"] == "http://prom:9090"
    assert so["spec"]["triggers"][0]["metadata"]["query"] == 'sum(vllm:num_requests_waiting{ns="default"})'
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    assert "replicas" not in dep["spec"]
