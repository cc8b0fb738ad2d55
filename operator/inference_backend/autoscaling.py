"""spec.autoscaling rendered as a KEDA ScaledObject on the chosen engine's own metric. Pure: no I/O.

Why KEDA rather than an HPA v2 with External metrics: an HPA reads External metrics from whatever serves
``external.metrics.k8s.io``, and only one adapter may serve it per cluster; the HPA alone cannot scale to zero.
KEDA serves that API itself, turns a PromQL query into an HPA it owns, and adds the zero-to-one step (activation),
so the operator renders one object and no adapter configuration. The HPA KEDA creates still does the scaling (the
kube-controller-manager's HPA controller), so an HPA-only cluster can run the same queries through an adapter.

The ScaledObject targets the Deployment (apps/v1, which has a scale subresource); while spec.autoscaling is set
the operator leaves the Deployment's replicas to that HPA (render.py omits them; reconcile.py hands the field
over). Each engine card names its metrics (card.autoscaling); docs/autoscaling.md has the table.

Queries select the backend's series by labels the scrape gives them. The default, ``namespace`` and
``app_kubernetes_io_instance``, is what the Prometheus project's example Kubernetes scrape config
(documentation/examples/prometheus-kubernetes.yml, job kubernetes-pods: the pod's namespace as ``namespace``, its
labels through ``labelmap __meta_kubernetes_pod_label_(.+)``) gives the pods the operator annotates with
prometheus.io/scrape; the operator's --autoscaling-label-matchers sets another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inference_backend.api import InferenceBackend
from inference_backend.decision import InvalidSpec
from inference_backend.engines import card
from inference_backend.engines.card import ScalingSignal
from inference_backend.names import label_value
from inference_backend.quantity import decimal_text
from inference_backend.vocabulary import KEDA_API_VERSION

Json = dict[str, Any]
SCALED_OBJECT = "ScaledObject"
DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
"""The Service the Prometheus Operator creates for every Prometheus (prometheus-operated), in the namespace
kube-prometheus installs into; the operator's --prometheus-address (Helm autoscaling.prometheusAddress) sets
another."""
DEFAULT_MATCHERS = 'namespace="{namespace}",app_kubernetes_io_instance="{instance}"'
TTFT_QUANTILE = 0.95
"""spec.objectives.ttftMillis is a p95; so is the ttft signal."""
TTFT_WINDOW = "2m"
"""The rate window of the ttft histogram: at least four scrapes at Prometheus' common 30-second interval."""
WAKE_THRESHOLD = "1000000000"
"""The wake trigger's threshold per replica: so large that it never asks for more than one replica (the HPA takes
the highest replica count any trigger asks for), while any value above 0 activates the backend from zero."""


@dataclass(frozen=True)
class Settings:
    """The operator's autoscaling settings (flags and Helm values)."""

    prometheus_address: str = DEFAULT_PROMETHEUS
    """serverAddress of the Prometheus triggers."""
    label_matchers: str = DEFAULT_MATCHERS
    """PromQL label matchers selecting one backend's series; {namespace}, {name} and {instance} (the
    app.kubernetes.io/instance label value) are filled in."""
    polling_seconds: int = 15
    """How often KEDA queries (its pollingInterval; KEDA's default is 30)."""
    scrape_annotations: bool = True
    """prometheus.io/* annotations on the engine pods, for annotation discovery (the example `kubernetes-pods` job).
    Off where a PodMonitor scrapes them (the chart's monitoring.podMonitor.enabled), so no pod is scraped twice."""


DEFAULT = Settings()


def signal(ib: InferenceBackend, engine: str) -> ScalingSignal:
    """The chosen engine's metric for spec.autoscaling.metric; InvalidSpec naming the field when it has none."""
    a = ib.spec.autoscaling
    assert a is not None
    caps = card(engine).autoscaling
    found = caps.signals.get(a.metric)
    if found is None:
        raise InvalidSpec(
            "spec.autoscaling.metric",
            f"{a.metric}: {card(engine).title} exposes no such metric "
            f"({caps.lacks}); it has {', '.join(sorted(caps.signals))}",
        )
    return found


def matchers(ib: InferenceBackend, settings: Settings) -> str:
    namespace = ib.metadata.namespace or "default"
    return settings.label_matchers.format(
        namespace=namespace, name=ib.metadata.name, instance=label_value(ib.metadata.name)
    )


def _scaled(expr: str, factor: float) -> str:
    return expr if factor == 1 else f"{expr} * {decimal_text(factor)}"


def query(sig: ScalingSignal, labels: str) -> str:
    """The PromQL of one signal: a gauge summed over the backend's pods (the HPA divides by the replicas: the
    target is per replica), a histogram's p95 over them (the target is the value itself)."""
    if sig.kind == "histogram":
        expr = (
            f"histogram_quantile({TTFT_QUANTILE:g}, sum by (le) (rate({sig.metric}_bucket{{{labels}}}[{TTFT_WINDOW}])))"
        )
    else:
        expr = f"sum({sig.metric}{{{labels}}})"
    return _scaled(expr, sig.scale)


def _number(value: float) -> str:
    """A KEDA threshold (its prometheus scaler parses it with strconv.ParseFloat)."""
    return decimal_text(value)


def scaled_object(
    ib: InferenceBackend, engine: str, target: Json, meta_labels: dict[str, str], settings: Settings = DEFAULT
) -> Json:
    """The ScaledObject for ``ib`` (which has spec.autoscaling) on ``engine``'s metric, scaling ``target`` (an
    apiVersion/kind/name reference with a scale subresource)."""
    a = ib.spec.autoscaling
    assert a is not None
    sig = signal(ib, engine)
    labels = matchers(ib, settings)
    trigger_meta = {
        "serverAddress": settings.prometheus_address,
        "query": query(sig, labels),
        "threshold": _number(a.target),
    }
    triggers: list[Json] = [
        {
            "type": "prometheus",
            "name": a.metric.lower(),
            # AverageValue: desired = ceil(query / threshold), the query summing every pod; Value: desired =
            # ceil(current x query / threshold), for a latency that does not add up over pods.
            "metricType": "Value" if sig.kind == "histogram" else "AverageValue",
            "metadata": trigger_meta,
        }
    ]
    spec: Json = {
        "scaleTargetRef": target,
        "pollingInterval": settings.polling_seconds,
        "minReplicaCount": a.min_replicas,
        "maxReplicaCount": a.max_replicas,
    }
    if a.scale_to_zero is not None:
        spec["cooldownPeriod"] = a.scale_to_zero.cooldown_seconds
        triggers.append(
            {
                "type": "prometheus",
                "name": "wake",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": settings.prometheus_address,
                    "query": a.scale_to_zero.wake_query,
                    "threshold": WAKE_THRESHOLD,
                    "activationThreshold": "0",
                },
            }
        )
    behavior: Json = {}
    b = a.behavior
    if b.scale_up_stabilization_seconds is not None:
        behavior["scaleUp"] = {"stabilizationWindowSeconds": b.scale_up_stabilization_seconds}
    if b.scale_down_stabilization_seconds is not None:
        behavior["scaleDown"] = {"stabilizationWindowSeconds": b.scale_down_stabilization_seconds}
    if behavior:
        spec["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": behavior}}
    spec["triggers"] = triggers
    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": SCALED_OBJECT,
        "metadata": {
            "name": ib.metadata.name,
            "namespace": ib.metadata.namespace or "default",
            "labels": dict(meta_labels),
        },
        "spec": spec,
    }


def describe(ib: InferenceBackend, engine: str, settings: Settings = DEFAULT) -> tuple[str, str]:
    """(the metric and its source, the query) for status.autoscaling."""
    sig = signal(ib, engine)
    return f"{sig.metric} ({sig.kind}; {sig.source})", query(sig, matchers(ib, settings))


_UNITS = {
    "queueDepth": "requests waiting",
    "runningRequests": "requests running",
    "kvCacheUsage": "KV cache in use, %",
    "ttft": "p95 TTFT, ms",
}


def markdown_table() -> str:
    """The per-engine table of docs/autoscaling.md, made from the cards (tests/test_autoscaling.py compares)."""
    from inference_backend.engines import REGISTRY
    from inference_backend.engines.card import SIGNALS

    head = "| engine | " + " | ".join(f"{s} ({_UNITS[s]})" for s in SIGNALS) + " | scale to zero | source |"
    rows = [head, "|" + "---|" * (len(SIGNALS) + 3)]
    for c in REGISTRY:
        cells = [f"{c.title} {c.version}"]
        for s in SIGNALS:
            sig = c.autoscaling.signals.get(s)
            cells.append("—" if sig is None else f"`{sig.metric}`" + (f" x {sig.scale:g}" if sig.scale != 1 else ""))
        cells.append("yes" if c.autoscaling.scale_to_zero else "no")
        cells.append("; ".join(sorted({sig.source for sig in c.autoscaling.signals.values()})))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
