"""Prometheus metrics of the operator itself (served by `inference-backend operator --metrics-port`)."""

from __future__ import annotations

import threading

from prometheus_client import Counter, Gauge, Histogram

from inference_backend.names import label_value

RECONCILES = Counter("inference_backend_reconciles_total", "Reconciles by trigger and result", ["trigger", "result"])
RECONCILE_SECONDS = Histogram(
    "inference_backend_reconcile_duration_seconds",
    "Time of one reconcile",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
DECISIONS = Counter("inference_backend_decisions_total", "Selections that chose an engine", ["engine"])
UNSATISFIABLE = Counter("inference_backend_unsatisfiable_total", "Selections that found no engine")
ERRORS = Counter("inference_backend_errors_total", "Reconcile errors by kind", ["kind"])
API_WRITES = Counter("inference_backend_api_writes_total", "Writes to the Kubernetes API by kind", ["kind"])
NODE_CLASSES = Gauge("inference_backend_node_classes", "Hardware classes seen, by accelerator", ["accelerator"])

# Per backend, for the chart's PrometheusRule (docs/observability.md). One series per InferenceBackend each, set
# from the status the operator computes (no extra API reads) and removed when the backend is deleted. The labels
# are backend_namespace and backend (the InferenceBackend's name), never `namespace`: a scrape sets that target
# label to the operator's own namespace. backend_instance is the app.kubernetes.io/instance label value of the
# backend's pods (names.label_value of the name), which the engine series carry as app_kubernetes_io_instance.
BACKEND_LABELS = ("backend_namespace", "backend", "backend_instance")
BACKEND_PHASE = Gauge(
    "inference_backend_backend_phase",
    "1 for the phase each InferenceBackend is in (status.phase: Pending, Deploying, Ready, Degraded, Failed)",
    [*BACKEND_LABELS, "phase"],
)
TTFT_OBJECTIVE = Gauge(
    "inference_backend_ttft_objective_seconds",
    "spec.objectives.ttftMillis of each InferenceBackend that sets it, in seconds (a target p95)",
    list(BACKEND_LABELS),
)
PHASES = ("Pending", "Deploying", "Ready", "Degraded", "Failed")


class BackendGauges:
    """The per-backend series above: what was last set, so that a phase change or a deletion removes the old one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phase: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (instance, phase)
        self._ttft: dict[tuple[str, str], str] = {}  # key -> instance

    def observe(self, namespace: str, name: str, phase: str | None, ttft_millis: int | None) -> None:
        instance = label_value(name)
        with self._lock:
            old = self._phase.get((namespace, name))
            if phase is not None and old != (instance, phase):
                if old is not None:
                    BACKEND_PHASE.remove(namespace, name, old[0], old[1])
                BACKEND_PHASE.labels(namespace, name, instance, phase).set(1)
                self._phase[(namespace, name)] = (instance, phase)
            if ttft_millis is not None:
                TTFT_OBJECTIVE.labels(namespace, name, instance).set(ttft_millis / 1000)
                self._ttft[(namespace, name)] = instance
            elif (namespace, name) in self._ttft:
                TTFT_OBJECTIVE.remove(namespace, name, self._ttft.pop((namespace, name)))

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            if (old := self._phase.pop((namespace, name), None)) is not None:
                BACKEND_PHASE.remove(namespace, name, old[0], old[1])
            if (instance := self._ttft.pop((namespace, name), None)) is not None:
                TTFT_OBJECTIVE.remove(namespace, name, instance)


BACKENDS = BackendGauges()
