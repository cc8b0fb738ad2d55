#!/usr/bin/env python3
"""Generate the chart's Grafana dashboards, charts/inference-backend/files/dashboards/*.json:

- inference-backend-operator.json: the operator's own metrics (operator/inference_backend/controller/metrics.py);
- inference-backend-engines.json: the engines the operator runs, each meaning read under every engine's own metric
  name (docs/metrics.md), per backend (namespace, app_kubernetes_io_instance: the labels the chart's PodMonitor and
  annotation discovery give the engine pods).

    python hack/grafana_dashboards.py            # rewrite the JSON files
    python hack/grafana_dashboards.py --check    # exit 1 if they are stale

tests/test_monitoring.py runs --check; e2e/test_observability.py sends every panel's query to a real Prometheus.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "charts" / "inference-backend" / "files" / "dashboards"

# One meaning, each engine's name (docs/metrics.md); the chart's PrometheusRule uses the same alternations.
ENGINE = {
    "running": [
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "tgi_batch_current_size",
        "llamacpp:requests_processing",
    ],
    "waiting": ["vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size", "llamacpp:requests_deferred"],
    "kv": ["vllm:kv_cache_usage_perc", "sglang:token_usage"],
    "ttft": ["vllm:time_to_first_token_seconds_bucket", "sglang:time_to_first_token_seconds_bucket"],
    "itl": ["vllm:inter_token_latency_seconds_bucket", "sglang:inter_token_latency_seconds_bucket"],
    "e2e": [
        "vllm:e2e_request_latency_seconds_bucket",
        "sglang:e2e_request_latency_seconds_bucket",
        "tgi_request_duration_bucket",
    ],
    "queue_time": [
        "vllm:request_queue_time_seconds_bucket",
        "sglang:queue_time_seconds_bucket",
        "tgi_request_queue_duration_bucket",
    ],
    "prompt_tokens": [
        "vllm:prompt_tokens_total",
        "sglang:prompt_tokens_total",
        "llamacpp:prompt_tokens_total",
        "tgi_request_input_length_sum",
    ],
    "generation_tokens": [
        "vllm:generation_tokens_total",
        "sglang:generation_tokens_total",
        "llamacpp:tokens_predicted_total",
        "tgi_request_generated_tokens_sum",
    ],
}
SEL = 'namespace=~"$namespace", app_kubernetes_io_instance=~"$backend"'
BY = "namespace, app_kubernetes_io_instance"
LEGEND = "{{namespace}}/{{app_kubernetes_io_instance}}"
DS = {"type": "prometheus", "uid": "${datasource}"}


def names(meaning: str) -> str:
    """The selector of one meaning across the engines, with the dashboard's backend filter."""
    return '{__name__=~"' + "|".join(ENGINE[meaning]) + '", ' + SEL + "}"


def panel(
    title: str, targets: list[tuple[str, str]], unit: str = "short", kind: str = "timeseries", description: str = ""
) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom"}} if kind == "timeseries" else {},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two panels a row, 12 columns x 8 rows each; ids in order."""
    for i, p in enumerate(panels):
        p["id"] = i + 1
        p["gridPos"] = {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)}
    return panels


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"qryType": 1, "query": query, "refId": f"{name}-var"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def dashboard(uid: str, title: str, panels: list[dict[str, Any]], variables: list[dict[str, Any]]) -> dict[str, Any]:
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
    }
    return {
        "uid": uid,
        "title": title,
        "tags": ["inference-backend"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "",
        "graphTooltip": 1,
        "templating": {"list": [datasource, *variables]},
        "annotations": {"list": []},
        "links": [],
        "panels": layout(panels),
    }


def operator() -> dict[str, Any]:
    r = "[$__rate_interval]"
    panels = [
        panel(
            "Reconciles by result",
            [(f"sum by (result) (rate(inference_backend_reconciles_total{r}))", "{{result}}")],
            "ops",
            description="ok; invalid (a spec the operator refuses); error (retried with backoff)",
        ),
        panel(
            "Reconcile duration",
            [
                (
                    "histogram_quantile(0.5, sum by (le) "
                    f"(rate(inference_backend_reconcile_duration_seconds_bucket{r})))",
                    "p50",
                ),
                (
                    "histogram_quantile(0.95, sum by (le) "
                    f"(rate(inference_backend_reconcile_duration_seconds_bucket{r})))",
                    "p95",
                ),
            ],
            "s",
        ),
        panel(
            "Reconcile errors by kind",
            [(f"sum by (kind) (rate(inference_backend_errors_total{r}))", "{{kind}}")],
            "ops",
            description="The alert InferenceBackendReconcileErrors fires on these (invalid_spec aside).",
        ),
        panel("Backends by phase", [("sum by (phase) (inference_backend_backend_phase)", "{{phase}}")]),
        panel(
            "Backends not Ready",
            [('inference_backend_backend_phase{phase!="Ready"} == 1', "{{backend_namespace}}/{{backend}} {{phase}}")],
            kind="table",
            description="The alert InferenceBackendNotReady fires when one stays here.",
        ),
        panel(
            "Selections by engine",
            [
                (f"sum by (engine) (rate(inference_backend_decisions_total{r}))", "{{engine}}"),
                (f"sum(rate(inference_backend_unsatisfiable_total{r}))", "unsatisfiable"),
            ],
            "ops",
        ),
        panel(
            "API writes by kind", [(f"sum by (kind) (rate(inference_backend_api_writes_total{r}))", "{{kind}}")], "wps"
        ),
        panel("Node classes", [("sum by (accelerator) (inference_backend_node_classes)", "{{accelerator}}")]),
        panel(
            "TTFT objectives",
            [("inference_backend_ttft_objective_seconds", "{{backend_namespace}}/{{backend}}")],
            "s",
            kind="table",
            description="spec.objectives.ttftMillis of each backend that sets it",
        ),
    ]
    return dashboard("inference-backend-operator", "InferenceBackend / Operator", panels, [])


def engines() -> dict[str, Any]:
    r = "[$__rate_interval]"

    def quantile(meaning: str, q: float) -> str:
        return f"histogram_quantile({q}, sum by ({BY}, le) (rate({names(meaning)}{r})))"

    objective = (
        'label_replace(label_replace(inference_backend_ttft_objective_seconds{backend_namespace=~"$namespace", '
        'backend_instance=~"$backend"}, "namespace", "$1", "backend_namespace", "(.+)"), '
        '"app_kubernetes_io_instance", "$1", "backend_instance", "(.+)")'
    )
    panels = [
        panel("Requests running", [(f"sum by ({BY}) ({names('running')})", LEGEND)]),
        panel(
            "Requests waiting",
            [(f"sum by ({BY}) ({names('waiting')})", LEGEND)],
            description="The alert InferenceBackendEngineQueueGrowing fires when this grows past its threshold.",
        ),
        panel(
            "Time to first token p95 and objective",
            [(quantile("ttft", 0.95), LEGEND + " p95"), (objective, LEGEND + " objective")],
            "s",
        ),
        panel("KV cache in use (fullest replica)", [(f"max by ({BY}) ({names('kv')})", LEGEND)], "percentunit"),
        panel("Inter-token latency p95", [(quantile("itl", 0.95), LEGEND)], "s"),
        panel("End-to-end request latency p95", [(quantile("e2e", 0.95), LEGEND)], "s"),
        panel("Time queued p95", [(quantile("queue_time", 0.95), LEGEND)], "s"),
        panel(
            "Tokens per second",
            [
                (f"sum by ({BY}) (rate({names('prompt_tokens')}{r}))", LEGEND + " prompt"),
                (f"sum by ({BY}) (rate({names('generation_tokens')}{r}))", LEGEND + " generated"),
            ],
            "short",
        ),
        panel(
            "Requests finished by reason",
            [
                (
                    f'sum by ({BY}, finished_reason) (rate({{__name__="vllm:request_success_total", {SEL}}}{r}))',
                    LEGEND + " {{finished_reason}}",
                ),
            ],
            "reqps",
            description="vLLM and our runners (stop, length, abort, error)",
        ),
        panel(
            "Prefix cache hit ratio",
            [
                (
                    f'sum by ({BY}) (rate({{__name__="vllm:prefix_cache_hits_total", {SEL}}}{r})) / '
                    f'sum by ({BY}) (rate({{__name__="vllm:prefix_cache_queries_total", {SEL}}}{r}))',
                    LEGEND,
                ),
            ],
            "percentunit",
            description="Prompt tokens served from the prefix cache (vLLM and our runners)",
        ),
        panel(
            "Accelerator memory in use",
            [
                (
                    f'sum by ({BY}) ({{__name__="ib:gpu_memory_used_bytes", {SEL}}}) / '
                    f'sum by ({BY}) ({{__name__="ib:gpu_memory_total_bytes", {SEL}}})',
                    LEGEND,
                ),
            ],
            "percentunit",
            description="Our runners on a GPU (NVML)",
        ),
        panel(
            "Engine replicas scraped",
            [
                (
                    f"count by ({BY}, app_kubernetes_io_name) "
                    f'(up{{{SEL}, app_kubernetes_io_component="inference-server"}} == 1)',
                    LEGEND + " {{app_kubernetes_io_name}}",
                )
            ],
            description="Engine targets up, by engine (app_kubernetes_io_name)",
        ),
    ]
    selector = '{__name__=~"' + "|".join(ENGINE["running"]) + '"}'
    variables = [
        variable("namespace", "Namespace", f"label_values({selector}, namespace)"),
        variable(
            "backend",
            "InferenceBackend",
            f'label_values({selector[:-1]}, namespace=~"$namespace"}}, app_kubernetes_io_instance)',
        ),
    ]
    return dashboard("inference-backend-engines", "InferenceBackend / Engines", panels, variables)


def build() -> dict[str, str]:
    return {
        "inference-backend-operator.json": json.dumps(operator(), indent=2) + "\n",
        "inference-backend-engines.json": json.dumps(engines(), indent=2) + "\n",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed files differ")
    args = ap.parse_args()
    stale = []
    for name, text in build().items():
        path = OUT / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale (run python hack/grafana_dashboards.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
