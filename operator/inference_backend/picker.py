"""The endpoint picker's configuration: which scorers spec.routing.inferencePool's picker runs, and the engine
metrics each one reads, taken from the engine's card. Pure: an EndpointPickerConfig built as a dict (routing.py
passes it to the picker as --config-text) and one line per scorer for status.routing.scorers.

Cited against sigs.k8s.io/gateway-api-inference-extension v1.5.0 (e2e/gomod/gie), whose cmd/epp is the scoring
picker:
- apix/config/v1alpha1/endpointpickerconfig_types.go: EndpointPickerConfig (inference.networking.x-k8s.io/v1alpha1:
  plugins[{name, type, parameters}], schedulingProfiles[{name, plugins[{pluginRef, weight}]}],
  dataLayer.sources[{pluginRef, extractors[{pluginRef}]}]), decoded strictly (pkg/epp/config/loader/configloader.go
  decodeRawConfig: an unknown field fails the picker's start);
- cmd/epp/runner/runner.go registerInTreePlugins: the plugin types queue-scorer (scorer/queuedepth: the waiting
  queue), kv-cache-utilization-scorer (scorer/kvcacheutilization: KV-cache use, 0-1), prefix-cache-scorer
  (scorer/prefix, fed by requestcontrol/dataproducer/approximateprefix, which configloader.go instantiatePlugins adds
  for it: an index of the prompt blocks the picker itself sent to each pod, so it reads no engine metric),
  lora-affinity-scorer (scorer/loraaffinity: the adapters running and waiting on each pod), max-score-picker
  (scheduling/picker), metrics-data-source (datalayer/source/metrics: GET scheme://<pod IP>:<the pool's target
  port><path>) and core-metrics-extractor (datalayer/extractor/metrics/factories.go: engineConfigs[{name,
  queuedRequestsSpec, runningRequestsSpec, kvUsageSpec, loraSpec, cacheInfoSpec}], defaultEngine; an empty spec is
  no metric at all, mapping.go NewMappingFromConfig);
- pkg/epp/config/loader/defaults.go loadDefaultConfig: the weights (queue 2, KV-cache 2, prefix 3; a scorer without
  one weighs DefaultScorerWeight 1, which the LoRA affinity scorer keeps, as the module's test configurations do);
- pkg/epp/server/options.go: the metric flags of older pickers (--total-queued-requests-metric,
  --kv-cache-usage-percentage-metric, --lora-info-metric ...) are refused at start in v1.5.0 ("configure metrics via
  engineConfigs in EndpointPickerConfig instead"), so the metric names go in the extractor's engineConfigs.

A scorer whose metric the engine does not export is left out (and the status says why) rather than pointed at a
metric that does not exist: the extractor would fail on every scrape and the scorer would see 0 on every pod.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from inference_backend.decision import Decision
from inference_backend.engines.base import HTTP_PORT
from inference_backend.engines.card import EngineCard, Signal

Json = dict[str, Any]
CONFIG_API_VERSION = "inference.networking.x-k8s.io/v1alpha1"
SOURCE, EXTRACTOR, PICKER = "metrics-data-source", "core-metrics-extractor", "max-score-picker"
QUEUE, KV, PREFIX, LORA = "queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "lora-affinity-scorer"
WEIGHTS = {QUEUE: 2.0, KV: 2.0, PREFIX: 3.0, LORA: 1.0}
RATIO = 100
"""ScalingSignal.scale of a 0-1 ratio (the target is a percent): the unit the KV-cache scorer reads."""


@dataclass(frozen=True)
class Scorer:
    """One scorer the picker may run: what it reads on this engine, or why it is left out."""

    type: str
    reads: str = ""
    """The engine metric it reads (with its source), or what it reads instead; "" when left out."""
    left_out: str = ""

    @property
    def on(self) -> bool:
        return not self.left_out

    def line(self) -> str:
        """One line of status.routing.scorers."""
        if self.on:
            return f"{self.type} (weight {WEIGHTS[self.type]:g}): {self.reads}"
        return f"{self.type}: left out, {self.left_out}"


def _metric(card: EngineCard, signal: Signal, what: str, ratio: bool = False) -> tuple[str, str]:
    """(the card's gauge for ``signal``, the line saying what it is and its source), or ("", why none)."""
    sig = card.autoscaling.signals.get(signal)
    if sig is None:
        return "", f"no {what} gauge on the engine's card: {card.autoscaling.lacks}"
    if sig.kind != "gauge" or (ratio and sig.scale != RATIO):
        return "", f"{card.title} {card.version}'s {sig.metric} is not a 0-1 {what} gauge"
    return sig.metric, f"{sig.metric} ({sig.source})"


def scorers(card: EngineCard, decision: Decision) -> tuple[Scorer, ...]:
    """The four scorers, each on (what it reads) or left out (why), for the engine and what was decided."""
    out: list[Scorer] = []
    if card.endpoints.port != HTTP_PORT:
        why = f"{card.title} serves its metrics on port {card.endpoints.port}, not the pool's target port"
        out += [Scorer(QUEUE, left_out=why), Scorer(KV, left_out=why)]
    else:
        wanted: tuple[tuple[str, Signal, str], ...] = (
            (QUEUE, "queueDepth", "waiting requests"),
            (KV, "kvCacheUsage", "KV-cache usage"),
        )
        for kind, signal, what in wanted:
            metric, about = _metric(card, signal, what, ratio=kind == KV)
            out.append(Scorer(kind, reads=about) if metric else Scorer(kind, left_out=about))
    if decision.prefix_cache:
        out.append(Scorer(PREFIX, reads="no engine metric: its own index of the prompt blocks it sent to each pod"))
    else:
        out.append(Scorer(PREFIX, left_out="the engine's prefix cache is off for this backend"))
    lo = card.lora
    if not decision.adapters.items:
        out.append(Scorer(LORA, left_out="no spec.adapters"))
    elif not lo.info_metric:
        why = f"{card.title} {card.version} exports no adapter gauge in the form the picker reads"
        out.append(Scorer(LORA, left_out=why + " (vLLM's vllm:lora_requests_info)"))
    else:
        out.append(Scorer(LORA, reads=f"{lo.info_metric} ({lo.info_metric_source})"))
    return tuple(out)


def _engine_config(card: EngineCard, chosen: tuple[Scorer, ...]) -> Json:
    """The extractor's metric specs for this engine: only those a scorer on reads ("" is no metric)."""
    on = {s.type for s in chosen if s.on}
    running = card.autoscaling.signals.get("runningRequests")
    queue, kv = card.autoscaling.signals.get("queueDepth"), card.autoscaling.signals.get("kvCacheUsage")
    return {
        "name": card.name,
        "queuedRequestsSpec": queue.metric if QUEUE in on and queue else "",
        # feeds no scorer here; read where the card has it, so that each pod's metrics stay fresh (their update
        # time) even where no scorer reads a metric
        "runningRequestsSpec": running.metric if running and card.endpoints.port == HTTP_PORT else "",
        "kvUsageSpec": kv.metric if KV in on and kv else "",
        "loraSpec": card.lora.info_metric if LORA in on else "",
        # the cache's block size and block count: no card declares them, so the prefix index keeps its defaults
        "cacheInfoSpec": "",
    }


def config(card: EngineCard, decision: Decision) -> Json:
    """The EndpointPickerConfig: the scorers on, the metrics source and extractor, the max-score picker."""
    chosen = scorers(card, decision)
    plugins: list[Json] = [{"type": s.type} for s in chosen if s.on]
    plugins += [
        {"type": SOURCE, "parameters": {"scheme": "http", "path": card.endpoints.metrics, "insecureSkipVerify": True}},
        {
            "type": EXTRACTOR,
            "parameters": {"defaultEngine": card.name, "engineConfigs": [_engine_config(card, chosen)]},
        },
        {"type": PICKER},
    ]
    profile = [{"pluginRef": s.type, "weight": WEIGHTS[s.type]} for s in chosen if s.on]
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
        "schedulingProfiles": [{"name": "default", "plugins": [*profile, {"pluginRef": PICKER}]}],
        "dataLayer": {"sources": [{"pluginRef": SOURCE, "extractors": [{"pluginRef": EXTRACTOR}]}]},
    }


def config_text(card: EngineCard, decision: Decision) -> str:
    """The configuration as the picker's --config-text (JSON is YAML; keys sorted, so the pod template is stable)."""
    return json.dumps(config(card, decision), sort_keys=True, separators=(",", ":"))


def lines(card: EngineCard, decision: Decision) -> list[str]:
    """status.routing.scorers: each scorer, what it reads or why it is left out."""
    return [s.line() for s in scorers(card, decision)]
