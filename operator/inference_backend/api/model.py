"""The Model kind: an entry of the model registry (ModelRegistry)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from inference_backend.api.common import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    INT64_MAX,
    PARAMETERS_PATTERN,
    URI_PATTERN,
    ApiModel,
    DType,
    Format,
    Int,
    Quantization,
)
from inference_backend.names import MAX_NAME


class Tokenizer(ApiModel):
    """Tokenizer identity: a draft model must share it with its target."""

    family: str = Field(min_length=1, max_length=256)
    """Tokenizer identity: a family name (llama3, llama2, qwen2, mistral) or a hash of tokenizer.json."""
    vocab_size: Int = Field(ge=1, le=INT64_MAX)
    """Vocabulary size (number of token ids)."""
    vocab_hash: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    """sha256 of the token strings in id order (`inference-backend model inspect` computes it from tokenizer.json
    or the GGUF token list); when target and draft both have one, the draft check compares it."""


class ModelSpec(ApiModel):
    """What a model is, so the operator can size it, pick an engine and check a draft model against it."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.activeExpertsPerToken) || !has(self.experts)"
                    " || self.activeExpertsPerToken <= self.experts",
                    "message": "activeExpertsPerToken must not exceed experts",
                },
            ]
        }
    }

    uri: str = Field(pattern=URI_PATTERN, max_length=2048)
    """Where the weights are: hf://org/name, s3://bucket/path, gs://bucket/path, pvc://claim/path, oci://image,
    https://host/file."""
    format: Format | None = None
    """Weight format: safetensors, gguf, onnx or pytorch. Inferred from the uri when it ends in .gguf, .onnx,
    .pt or .bin; otherwise safetensors."""
    architecture: str | None = Field(default=None, max_length=256)
    """Hugging Face architecture class, e.g. LlamaForCausalLM, Qwen2ForCausalLM."""
    parameters: str | None = Field(default=None, pattern=PARAMETERS_PATTERN, max_length=16)
    """Parameter count: 350M, 1.5B, 8B, 70B."""
    dtype: DType | None = None
    """Weight dtype: float32, float16, bfloat16, fp8, int8 or int4."""
    quantization: Quantization | None = None
    """Weight quantization: none, awq, gptq, fp8, int8, bitsandbytes, or a GGUF type such as q4_k_m or q8_0."""
    context_length: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Maximum context length in tokens."""
    tokenizer: Tokenizer | None = None
    """Tokenizer identity, needed to accept the model as a speculative-decoding draft or target."""
    layers: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Transformer layers (num_hidden_layers), for KV cache sizing."""
    kv_heads: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Key/value heads (num_key_value_heads), for KV cache sizing."""
    head_dim: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Dimension of one attention head, for KV cache sizing."""
    attention_heads: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Query heads (num_attention_heads): tensor parallelism must divide them, and divide (or be a multiple of)
    kvHeads. Absent: taken from the built-in architecture table when the uri names a known model."""
    experts: Int | None = Field(default=None, ge=2, le=INT64_MAX)
    """Mixture of experts: routed experts per layer (num_local_experts). Absent for a dense model."""
    active_experts_per_token: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Mixture of experts: experts each token is routed to (num_experts_per_tok)."""
    active_parameters: str | None = Field(default=None, pattern=PARAMETERS_PATTERN)
    """Mixture of experts: parameters one token uses (dense part + its active experts), e.g. 12.9B for an 8x7B
    model. Memory is sized by parameters (all weights are loaded); speed is rated by activeParameters."""

    @model_validator(mode="after")
    def _experts(self) -> ModelSpec:  # mirrors the CEL rule above, for the offline CLI
        if self.active_experts_per_token and self.experts and self.active_experts_per_token > self.experts:
            raise ValueError(f"activeExpertsPerToken: {self.active_experts_per_token} exceeds experts {self.experts}")
        return self


class ObjectMeta(ApiModel):
    """The part of metav1.ObjectMeta the operator reads."""

    model_config = ApiModel.model_config | {"extra": "allow"}
    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Object name (a DNS-1123 subdomain, as the apiserver requires of custom resources)."""
    namespace: str | None = Field(default=None, pattern=DNS_LABEL_PATTERN, max_length=63)
    """Object namespace."""


class BackendMeta(ObjectMeta):
    """An InferenceBackend's metadata: its name is also its Deployment's, whose ReplicaSets append 11 characters
    (the CRD's root rule says the same)."""

    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=MAX_NAME)
    """Object name: a DNS-1123 subdomain of at most 242 characters."""


class Model(ApiModel):
    """A registered model (kind Model, short name mdl)."""

    KIND: ClassVar[str] = "Model"
    api_version: Literal["serving.inferencebackend.io/v1alpha1"] = "serving.inferencebackend.io/v1alpha1"
    """API version."""
    kind: Literal["Model"] = "Model"
    """Kind."""
    metadata: ObjectMeta
    """Standard object metadata."""
    spec: ModelSpec
    """The model's facts."""
    status: dict[str, Any] | None = None
    """Unused for now."""
