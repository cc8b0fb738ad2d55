"""Prometheus metrics named like vLLM's (`vllm:<suffix>`), with our `ib:` prefix where the meaning matches.


Prefix-cache counters count prompt *tokens* queried/hit, like vLLM's. Device memory comes from NVML when
nvidia-ml-py is installed and a GPU is visible; otherwise those gauges are simply absent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

PREFIX = "ib:"
log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
)
_ITL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 1.0)


class NvmlCollector(Collector):
    """Device memory via NVML (pynvml from nvidia-ml-py); yields nothing without a GPU or the package."""

    def __init__(self) -> None:
        self._nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
        except Exception as exc:  # no package, no driver, no GPU: all fine on CPU
            log.debug("NVML unavailable: %s", exc)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self._nvml is None:
            return
        nv = self._nvml
        used = GaugeMetricFamily(f"{PREFIX}gpu_memory_used_bytes", "Device memory used", labels=["gpu"])
        total = GaugeMetricFamily(f"{PREFIX}gpu_memory_total_bytes", "Device memory total", labels=["gpu"])
        for i in range(nv.nvmlDeviceGetCount()):
            info = nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i))
            used.add_metric([str(i)], float(info.used))
            total.add_metric([str(i)], float(info.total))
        yield used
        yield total


class Metrics:
    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        r, lbl = self.registry, ["model_name"]

        def counter(name: str, doc: str) -> Any:
            return Counter(PREFIX + name, doc, lbl, registry=r).labels(model_name)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(PREFIX + name, doc, lbl, registry=r).labels(model_name)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(PREFIX + name, doc, lbl, buckets=buckets, registry=r).labels(model_name)

        self.ttft = hist("time_to_first_token_seconds", "Time to first token", _LATENCY_BUCKETS)
        self.e2e = hist("e2e_request_latency_seconds", "End-to-end request latency", _LATENCY_BUCKETS)
        self.itl = hist("inter_token_latency_seconds", "Time between output tokens", _ITL_BUCKETS)
        self.queue_time = hist("request_queue_time_seconds", "Time before being scheduled", _LATENCY_BUCKETS)
        self.prompt_tokens = counter("prompt_tokens", "Prefilled prompt tokens")
        self.generation_tokens = counter("generation_tokens", "Generated tokens")
        self.running = gauge("num_requests_running", "Requests in a running batch")
        self.waiting = gauge("num_requests_waiting", "Requests waiting for admission")
        self.kv_usage = gauge("kv_cache_usage_perc", "Fraction of the KV cache token budget in use (0-1)")
        self.prefix_queries = counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache")
        self.prefix_hits = counter("prefix_cache_hits", "Prompt tokens served from the prefix cache")
        self.spec_drafts = counter("spec_decode_num_drafts", "Speculative decoding steps")
        self.spec_draft_tokens = counter("spec_decode_num_draft_tokens", "Draft tokens proposed")
        self.spec_accepted = counter("spec_decode_num_accepted_tokens", "Draft tokens accepted")
        self.success = Counter(
            PREFIX + "request_success", "Finished requests", ["model_name", "finished_reason"], registry=r
        )
        self.model_name = model_name
        r.register(NvmlCollector())

    def finished(self, reason: str) -> None:
        self.success.labels(self.model_name, reason).inc()
