"""Prometheus metrics of the operator itself (served by `inference-backend operator --metrics-port`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
