"""Prometheus metrics under vLLM's names (`vllm:...`, labelled `model_name`) where the meaning is the same, so
dashboards, KEDA triggers and schedulers written for vLLM read our runners unchanged (docs/metrics.md).

Names and bucket boundaries follow vLLM 0.33 (vllm/v1/metrics/loggers.py, vllm/v1/metrics/buckets.py): their
buckets reach 2560 s (TTFT), 80 s (inter-token) and 7680 s (e2e, queue), long enough for CPU generations.
Prefix-cache counters count prompt *tokens* queried/hit, like vLLM's. No `_created` series (prometheus_client's
are disabled), as in vLLM. Only what vLLM lacks keeps our prefix: device memory, `ib:gpu_memory_*_bytes`, from
NVML when nvidia-ml-py is installed and a GPU is visible (otherwise absent).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

PREFIX = "vllm:"
OWN_PREFIX = "ib:"
log = logging.getLogger(__name__)
FINISHED_REASONS = ("stop", "length", "abort", "error")  # vLLM's FinishReason, less `repetition` (no such check)
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

# vLLM 0.33, vllm/v1/metrics/buckets.py
TTFT_BUCKETS = (
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
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


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
        used = GaugeMetricFamily(f"{OWN_PREFIX}gpu_memory_used_bytes", "Device memory used", labels=["gpu"])
        total = GaugeMetricFamily(f"{OWN_PREFIX}gpu_memory_total_bytes", "Device memory total", labels=["gpu"])
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

        self.ttft = hist("time_to_first_token_seconds", "Time to first token", TTFT_BUCKETS)
        self.e2e = hist("e2e_request_latency_seconds", "End-to-end request latency", REQUEST_LATENCY_BUCKETS)
        self.itl = hist("inter_token_latency_seconds", "Time between output tokens", ITL_BUCKETS)
        self.tpot = hist(  # per request; vLLM 0.33's name for the old vllm:time_per_output_token_seconds
            "request_time_per_output_token_seconds", "Mean time per output token of each request", ITL_BUCKETS
        )
        self.queue_time = hist("request_queue_time_seconds", "Time before being scheduled", REQUEST_LATENCY_BUCKETS)
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
        self.lora_info: Any = None  # enable_lora
        self.max_lora = 0
        for reason in FINISHED_REASONS:  # every series from the start, as vLLM does (rate() needs a first 0)
            self.success.labels(model_name, reason)
        r.register(NvmlCollector())

    def enable_lora(self, max_lora: int) -> None:
        """vllm:lora_requests_info, as vLLM 0.33.0 exports it with LoRA on (v1/metrics/loggers.py): labels max_lora,
        waiting_lora_adapters and running_lora_adapters (adapter names, comma-separated), value the time it was
        set; the endpoint picker's lora-affinity scorer reads the newest series. ``max_lora``: how many adapters run
        at once (ours: one per batch row)."""
        labels = ["max_lora", "waiting_lora_adapters", "running_lora_adapters"]
        self.lora_info = Gauge(
            PREFIX + "lora_requests_info", "Running stats on lora requests.", labels, registry=self.registry
        )
        self.max_lora = max_lora

    def lora_requests(self, running: list[str], waiting: list[str]) -> None:
        if self.lora_info is not None:
            self.lora_info.labels(str(self.max_lora), ",".join(waiting), ",".join(running)).set_to_current_time()

    def finished(self, reason: str) -> None:
        self.success.labels(self.model_name, reason).inc()
