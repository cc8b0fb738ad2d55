"""The Model kind: an entry of the model registry (ModelRegistry)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from inference_backend.api.common import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    INT64_MAX,
    PARAMETERS_PATTERN,
    PVC_CLAIM_RULE,
    URI_PATTERN,
    ApiModel,
    DType,
    Format,
    Int,
    Quantization,
    pvc_claim_ok,
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


MAX_HEADS = 2**20
"""Bound of attentionHeads, kvHeads and headDim (the largest models have 128 heads of 256 dimensions)."""
MAX_HIDDEN = 2**30
_UNIT = "{'K': 1000.0, 'M': 1000000.0, 'B': 1000000000.0, 'T': 1000000000000.0}"


def _count_cel(field: str) -> str:
    """CEL for a parameter count field as a double: the number times its unit."""
    return (
        f"double(self.{field}.substring(0, self.{field}.size() - 1)) * "
        f"{_UNIT}[self.{field}.substring(self.{field}.size() - 1)]"
    )


def parameters_double(text: str) -> float:
    """A parameter count as CEL computes it above (the same double arithmetic, so both sides agree exactly)."""
    return float(text[:-1]) * {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[text[-1]]


HIDDEN_RATIO = (0.5, 4)
"""headDim x attentionHeads over hiddenSize, at least and at most. Published configs (config.json) range from 0.76
(Gemma-3-27B: 128 x 32 / 5376) and 0.8 (Mistral-Nemo: 128 x 32 / 5120) through 1 (Llama, Qwen2.5, Mistral) to 2
(Qwen3-0.6B: 128 x 16 / 1024; Qwen3-30B-A3B: 128 x 32 / 2048): this allows a factor 1.5 to 2 beyond them and still
refuses a headDim given for the hidden size (x heads) or a per-group figure."""
_MODEL_RULES: list[dict[str, str]] = [
    {
        "rule": "!has(self.activeExpertsPerToken) || !has(self.experts) || self.activeExpertsPerToken <= self.experts",
        "message": "activeExpertsPerToken must not exceed experts",
    },
    {
        "rule": "!has(self.kvHeads) || !has(self.attentionHeads) || (self.kvHeads <= self.attentionHeads && "
        "self.attentionHeads % self.kvHeads == 0)",
        "message": "kvHeads must divide attentionHeads (each key/value head serves a whole group of query heads)",
    },
    {
        "rule": "!has(self.hiddenSize) || !has(self.headDim) || !has(self.attentionHeads) || "
        "(2 * self.headDim * self.attentionHeads >= self.hiddenSize && "
        "self.headDim * self.attentionHeads <= 4 * self.hiddenSize)",
        "message": "headDim x attentionHeads must be between half and 4 times hiddenSize (published models: 0.76 to 2)",
    },
    {
        "rule": "!has(self.activeParameters) || !has(self.parameters) || "
        f"{_count_cel('activeParameters')} <= {_count_cel('parameters')}",
        "message": "activeParameters must not exceed parameters",
    },
    PVC_CLAIM_RULE,
]


class ModelSpec(ApiModel):
    """What a model is, so the operator can size it, pick an engine and check a draft model against it."""

    model_config = ApiModel.model_config | ConfigDict(
        json_schema_extra={"x-kubernetes-validations": _MODEL_RULES}  # type: ignore[dict-item]
    )

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
    kv_heads: Int | None = Field(default=None, ge=1, le=MAX_HEADS)
    """Key/value heads (num_key_value_heads), for KV cache sizing: at most attentionHeads, and dividing them."""
    head_dim: Int | None = Field(default=None, ge=1, le=MAX_HEADS)
    """Dimension of one attention head, for KV cache sizing."""
    kv_latent_dim: Int | None = Field(default=None, ge=1, le=MAX_HEADS)
    """Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2): elements of the compressed KV one token stores per
    layer, kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3). KV sizing then uses it in place of
    2 x kvHeads x headDim, held whole by every tensor-parallel rank."""
    hidden_size: Int | None = Field(default=None, ge=1, le=MAX_HIDDEN)
    """Width of the residual stream (hidden_size): with headDim and attentionHeads, a check that the attention shape
    is the model's (headDim x attentionHeads between half and 4 times it)."""
    attention_heads: Int | None = Field(default=None, ge=1, le=MAX_HEADS)
    """Query heads (num_attention_heads): tensor parallelism must divide them, and divide (or be a multiple of)
    kvHeads. Absent: taken from the built-in architecture table when the uri names a known model."""
    experts: Int | None = Field(default=None, ge=2, le=INT64_MAX)
    """Mixture of experts: routed experts per layer (num_local_experts). Absent for a dense model."""
    active_experts_per_token: Int | None = Field(default=None, ge=1, le=INT64_MAX)
    """Mixture of experts: experts each token is routed to (num_experts_per_tok)."""
    active_parameters: str | None = Field(default=None, pattern=PARAMETERS_PATTERN, max_length=16)
    """Mixture of experts: parameters one token uses (dense part + its active experts), e.g. 12.9B for an 8x7B
    model. Memory is sized by parameters (all weights are loaded); speed is rated by activeParameters."""

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:  # mirrors the CEL rules above, for the offline CLI
        if self.active_experts_per_token and self.experts and self.active_experts_per_token > self.experts:
            raise ValueError(f"activeExpertsPerToken: {self.active_experts_per_token} exceeds experts {self.experts}")
        if (
            self.kv_heads
            and self.attention_heads
            and (self.kv_heads > self.attention_heads or self.attention_heads % self.kv_heads)
        ):
            raise ValueError(
                f"kvHeads {self.kv_heads} must divide attentionHeads {self.attention_heads} (each "
                "key/value head serves a whole group of query heads)"
            )
        if self.hidden_size and self.head_dim and self.attention_heads:
            width = self.head_dim * self.attention_heads
            if not (2 * width >= self.hidden_size and width <= 4 * self.hidden_size):
                raise ValueError(
                    f"headDim x attentionHeads = {width} must be between half and 4 times hiddenSize "
                    f"{self.hidden_size} (published models: 0.76 to 2)"
                )
        if (
            self.active_parameters
            and self.parameters
            and parameters_double(self.active_parameters) > parameters_double(self.parameters)
        ):
            raise ValueError(f"activeParameters {self.active_parameters} exceeds parameters {self.parameters}")
        if not pvc_claim_ok(self.uri):
            raise ValueError(PVC_CLAIM_RULE["message"])
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
