"""Shared pieces of the API models: naming, base classes, enums and Kubernetes sub-objects."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from inference_backend.names import DNS1123_SUBDOMAIN

GROUP = "serving.inferencebackend.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

Format = Literal["safetensors", "gguf", "onnx", "pytorch"]
DType = Literal["float32", "float16", "bfloat16", "fp8", "int8", "int4"]
# Weight quantization schemes. GPU schemes (awq, gptq, fp8, int8, bitsandbytes) apply to safetensors checkpoints,
# the q*/f16 ones are GGUF tensor types (llama.cpp ggml-quants).
Quantization = Literal[
    "none", "awq", "gptq", "fp8", "int8", "bitsandbytes",
    "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_0", "q4_k_m", "q4_k_s", "q4_0", "q3_k_m", "q2_k",
]  # fmt: skip
GGUF_QUANTIZATIONS = frozenset(
    {"f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_0", "q4_k_m", "q4_k_s", "q4_0", "q3_k_m", "q2_k"}
)
PARAMETERS_PATTERN = r"^[0-9]+(\.[0-9]+)?[KMBT]$"
URI_PATTERN = r"^(hf|s3|gs|pvc|oci|https)://.+$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = DNS1123_SUBDOMAIN


class ApiModel(BaseModel):
    """Base of every API object: camelCase on the wire, unknown fields refused, docstrings as descriptions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    def wire(self) -> dict[str, Any]:
        """The object as it appears in YAML/JSON: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def sub(factory: type[ApiModel]) -> Any:
    """A nested object that defaults to empty, so the CRD's defaults inside it apply even when it is absent."""
    return Field(default_factory=factory, json_schema_extra={"default": {}})


class Toleration(ApiModel):
    """A Kubernetes toleration (core/v1 Toleration), copied to the engine pod."""

    key: str | None = None
    """Taint key the toleration applies to; empty with operator Exists matches all taints."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (default Equal)."""
    value: str | None = None
    """Taint value the toleration matches, for operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all effects."""
    toleration_seconds: int | None = None
    """For NoExecute: how long the pod stays bound after the taint appears."""


class EnvVar(ApiModel):
    """An environment variable for the engine container (core/v1 EnvVar)."""

    name: str = Field(min_length=1)
    """Variable name."""
    value: str | None = None
    """Literal value."""
    value_from: dict[str, Any] | None = None
    """A core/v1 EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef)."""


class ResourceRequirements(ApiModel):
    """Requests and limits for the engine container (core/v1 ResourceRequirements)."""

    requests: dict[str, int | str] = Field(default_factory=dict)
    """Resource requests, e.g. cpu: "4", memory: 32Gi."""
    limits: dict[str, int | str] = Field(default_factory=dict)
    """Resource limits, e.g. nvidia.com/gpu: 1."""


class Condition(ApiModel):
    """A standard metav1.Condition."""

    type: str
    """Condition type: BackendSelected, Fits, SpeculativeDecoding or Ready."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str
    """One CamelCase word for machines."""
    message: str = ""
    """Human-readable details."""
    last_transition_time: str
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation this condition was computed from."""
