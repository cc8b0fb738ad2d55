"""The Decision: what the selection tree chose, where, and the ordered reasons that got there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inference_backend.api import inferencebackend as api
from inference_backend.api.model import Tokenizer
from inference_backend.facts import GPUFacts, HardwareClass
from inference_backend.quantity import gib


def bounded(items: tuple[str, ...] | list[str], max_items: int = api.MAX_REASONS,
            max_length: int = api.MAX_REASON) -> list[str]:  # fmt: skip
    """At most ``max_items`` entries of at most ``max_length`` characters, whatever the cluster's size: the first
    ones and the last one are kept (the path's start and its conclusion), the middle is elided with a count."""
    out = [t if len(t) <= max_length else t[: max_length - 3] + "..." for t in items]
    if len(out) > max_items:
        elided = len(out) - (max_items - 1)
        out = [*out[: max_items - 2], f"... {elided} more entries elided ...", out[-1]]
    return out


class InvalidSpec(ValueError):
    """The spec cannot be acted on until the user changes it; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class ResolvedModel:
    """The model's facts after merging the registered Model with the inline ones and applying defaults."""

    uri: str | None
    format: str
    parameters: int
    dtype: str
    quantization: str
    context_length: int
    layers: int
    kv_heads: int
    head_dim: int
    shape_source: str
    architecture: str | None = None
    served_name: str | None = None
    credentials_secret: str | None = None
    tokenizer: Tokenizer | None = None
    model_ref: str | None = None


@dataclass(frozen=True)
class Speculation:
    enabled: bool
    reason: str
    method: str | None = None
    num_tokens: int = 0
    draft: ResolvedModel | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"enabled": self.enabled, "reason": self.reason}
        if self.enabled:
            out["method"] = self.method
            out["numSpeculativeTokens"] = self.num_tokens
            if self.draft is not None:
                out["draftModelRef"] = self.draft.model_ref
        return out


@dataclass(frozen=True)
class Current:
    """The engine and placement serving now (from the InferenceBackend's status)."""

    engine: str
    accelerator: str
    gpu_product: str | None
    gpus_per_replica: int

    def describe(self) -> str:
        return f"{self.gpus_per_replica}x {self.gpu_product}" if self.gpu_product else "CPU"


@dataclass(frozen=True)
class Placement:
    accelerator: str
    hardware: HardwareClass
    nodes: int
    gpu: GPUFacts | None = None
    gpus_per_replica: int = 0

    @property
    def tensor_parallel_size(self) -> int:
        return self.gpus_per_replica

    def describe(self) -> str:
        if self.gpu is None:
            return f"CPU ({self.hardware.cpu_millis // 1000} cores, {gib(self.hardware.memory_bytes)} GiB)"
        return f"{self.gpus_per_replica}x {self.gpu.product} ({self.gpu.memory_mib} MiB each)"


@dataclass(frozen=True)
class Memory:
    weights: float
    kv_cache: float
    required: float
    available: float
    kv_per_token: float

    def to_api(self) -> api.MemoryReport:
        return api.MemoryReport(
            weights_gi_b=gib(self.weights), kv_cache_gi_b=gib(self.kv_cache),
            required_gi_b=gib(self.required), available_gi_b=gib(self.available),
        )  # fmt: skip


@dataclass(frozen=True)
class Batching:
    strategy: str
    max_batch_size: int | None
    max_batch_tokens: int | None
    max_wait_millis: int | None


@dataclass(frozen=True)
class Decision:
    backend: str | None
    reasons: tuple[str, ...]
    rejected: tuple[tuple[str, str], ...] = ()
    placement: Placement | None = None
    memory: Memory | None = None
    batching: Batching | None = None
    prefix_cache: bool = False
    speculation: Speculation = field(default_factory=lambda: Speculation(False, "not requested"))
    unsupported: tuple[str, ...] = ()
    model: ResolvedModel | None = None
    serving_dtype: str | None = None
    kv_cache_dtype: str = "auto"
    estimate: dict[str, float] = field(default_factory=dict)

    @property
    def satisfiable(self) -> bool:
        return self.backend is not None

    def to_json(self) -> dict[str, Any]:
        """The `inference-backend select -o json` object (see shared/design/api.md)."""
        p = self.placement
        out: dict[str, Any] = {
            "backend": self.backend,
            "satisfiable": self.satisfiable,
            "reasons": list(self.reasons),
            "rejected": [{"backend": b, "reason": r} for b, r in self.rejected],
            "accelerator": p.accelerator if p else None,
            "gpuProduct": p.gpu.product if p and p.gpu else None,
            "gpusPerReplica": p.gpus_per_replica if p else 0,
            "tensorParallelSize": p.tensor_parallel_size if p else 0,
            "batching": self.batching.strategy if self.batching else None,
            "prefixCache": self.prefix_cache,
            "speculativeDecoding": self.speculation.to_json(),
            "unsupported": list(self.unsupported),
        }
        if self.memory:
            out["memory"] = self.memory.to_api().wire()
        if self.estimate:
            out["estimate"] = dict(self.estimate)
        return out

    def to_status(self) -> api.Decision:
        p = self.placement
        placement = None
        if p is not None:
            placement = api.Placement(
                accelerator="gpu" if p.gpu else "cpu",
                gpu_product=bounded([p.gpu.product], 1, 253)[0] if p.gpu else None,
                gpus_per_replica=p.gpus_per_replica,
                tensor_parallel_size=p.tensor_parallel_size,
                gpu_resource=bounded([p.gpu.resource], 1, 317)[0] if p.gpu else None,
            )
        rejected = self.rejected[: api.MAX_REASONS]
        return api.Decision(
            reasons=bounded(self.reasons),
            rejected=[
                api.Rejection.model_validate({"backend": b, "reason": r})
                for (b, _), r in zip(rejected, bounded([r for _, r in rejected]), strict=True)
            ],
            placement=placement,
            memory=self.memory.to_api() if self.memory else None,
            batching=self.batching.strategy if self.batching else None,
            unsupported=bounded(self.unsupported),
        )
