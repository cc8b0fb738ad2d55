"""Shared pieces of the API models: naming, base classes, enums and Kubernetes sub-objects."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from inference_backend.names import DNS1123_SUBDOMAIN, LABEL_VALUE
from inference_backend.quantity import PARAMETERS_PATTERN as PARAMETERS_PATTERN
from inference_backend.quantity import QUANTITY_MAX, QUANTITY_PATTERN, parse_quantity

Format = Literal["safetensors", "gguf", "onnx", "pytorch"]
DType = Literal["float32", "float16", "bfloat16", "fp8", "int8", "int4"]
# Weight quantization schemes. GPU schemes (awq, gptq, fp8, int8, bitsandbytes) apply to safetensors checkpoints,
# the q*/f16 ones are GGUF tensor types (llama.cpp ggml-quants).
Quantization = Literal[
    "none",
    "awq",
    "gptq",
    "fp8",
    "int8",
    "bitsandbytes",
    "f32",
    "f16",
    "bf16",
    "q8_0",
    "q6_k",
    "q5_k_m",
    "q5_k_s",
    "q5_0",
    "q4_k_m",
    "q4_k_s",
    "q4_0",
    "q3_k_m",
    "q2_k",
]
GGUF_QUANTIZATIONS = frozenset(
    {"f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_0", "q4_k_m", "q4_k_s", "q4_0", "q3_k_m", "q2_k"}
)
_NOT_TEXT = "\\x00-\\x20\\x7f-\\xa0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff"
"""Control characters, the space and Unicode's spaces (a regex character range: ``\\xNN`` escapes that Go's
RE2, which the apiserver checks patterns with, and Python's re both read, then the other spaces as themselves)."""
ARG_NAME_PATTERN = f"^[^-{_NOT_TEXT}][^{_NOT_TEXT}]*$"
"""A name that becomes an engine argument (spec.model.servedName, adapter names): no whitespace or control
characters, and not starting with ``-`` (an engine's parser would read it as a flag: the PyTorch runner crash-looped
on a servedName ``--x``)."""
_SEGMENT = f"([^/.{_NOT_TEXT}][^/{_NOT_TEXT}]*|\\.[^/.{_NOT_TEXT}][^/{_NOT_TEXT}]*|\\.\\.[^/{_NOT_TEXT}]+)"
"""One path segment: not empty, not ``.`` or ``..``, no whitespace or control characters."""
URI_PATTERN = (
    f"^((hf|s3|gs|oci|https)://{_SEGMENT}(/{_SEGMENT})*|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
    f"[a-z0-9])?)*(/{_SEGMENT})*)/?$"
)
"""Where the weights are: a scheme, then path segments that are never empty, ``.`` or ``..`` (a ``..`` would leave the
claim, the bucket prefix or the download directory) and hold no whitespace or control characters; the claim of a
pvc:// uri is a DNS-1123 subdomain (``pvc_claim_ok`` bounds its length), as a PersistentVolumeClaim's name is."""
MAX_CLAIM = 253


def pvc_claim_ok(uri: str | None) -> bool:
    """A pvc:// uri's claim name is at most 253 characters (the rest of its grammar is URI_PATTERN's)."""
    return uri is None or not uri.startswith("pvc://") or len(uri[6:].split("/")[0]) <= MAX_CLAIM


PVC_CLAIM_RULE: dict[str, Any] = {
    "rule": f"!has(self.uri) || !self.uri.startsWith('pvc://') || self.uri.substring(6).split('/')[0].size() <= "
    f"{MAX_CLAIM}",
    "message": f"uri: the claim of a pvc:// uri is a PersistentVolumeClaim name (a DNS-1123 subdomain of at most "
    f"{MAX_CLAIM} characters)",
}
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = DNS1123_SUBDOMAIN
LABEL_VALUE_PATTERN = LABEL_VALUE
_QN_PREFIX = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
QUALIFIED_NAME_PATTERN = "^" + _QN_PREFIX + r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
"""A label key (k8s IsQualifiedName): an optional DNS-subdomain prefix and "/", then a name of at most 63
characters; the prefix's length (253) is checked beside the pattern."""
IMAGE_PATTERN = r"^([A-Za-z0-9][-A-Za-z0-9._/:@+]*)?$"
"""An image reference ([registry/]repository[:tag][@digest]): no whitespace anywhere (the apiserver refuses
leading and trailing whitespace)."""
INT64_MAX = 2**63 - 1024
"""The largest integer fields admit: the largest int64 that a float64 holds exactly (the apiserver keeps schema
bounds as float64, and 2^63 - 1 would round up to 2^63, past int64)."""
MAX_STR = 1024
"""Length bound of free-form strings (CEL cost and object size stay bounded)."""
MAX_LIST = 64
MAX_MAP = 64


def _integral(value: Any) -> Any:
    """JSON has one number type: the apiserver admits 3.0 for an integer field; so do we (but not "3" or true)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(_integral)]
"""An integer field: strict (no strings, no booleans), integral floats taken as the apiserver takes them."""


def bounded_int(ge: int = 0, le: int = INT64_MAX) -> Any:
    return Field(ge=ge, le=le)


def qualified_name(key: str) -> str:
    """Raise ValueError unless ``key`` is a valid label key."""
    prefix, _, name = key.rpartition("/")
    if not re.match(QUALIFIED_NAME_PATTERN, key) or len(prefix) > 253 or len(name) > 63:
        raise ValueError(
            f"{key!r} is not a valid label key (an optional DNS-subdomain prefix and '/', then at "
            "most 63 characters of [-A-Za-z0-9_.] starting and ending alphanumeric)"
        )
    return key


def _label_keys(labels: dict[str, str]) -> dict[str, str]:
    for key in labels:
        qualified_name(key)
    return labels


LABEL_KEYS_RULE: dict[str, Any] = {
    "rule": f"self.all(k, k.matches(r'{QUALIFIED_NAME_PATTERN}') && k.split('/')[0].size() <= 253)",
    "message": "keys must be label keys (an optional DNS-subdomain prefix and '/', then at most 63 characters of "
    "[-A-Za-z0-9_.] starting and ending alphanumeric)",
}
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=63)]
LabelMap = Annotated[dict[str, LabelValue], AfterValidator(_label_keys)]
"""Node labels: label keys to label values (the CRD checks the keys with LABEL_KEYS_RULE)."""


def _quantity(value: Any) -> Any:
    value = _integral(value)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{value!r}: a quantity is an integer or a string such as 500m or 32Gi")
    if isinstance(value, str) and (len(value) > 64 or not re.match(QUANTITY_PATTERN, value)):
        raise ValueError(f"{value!r} is not a quantity such as 4, 500m or 32Gi (non-negative, at most 64 characters)")
    amount = parse_quantity(value)
    if amount < 0 or amount >= QUANTITY_MAX:
        raise ValueError(f"{value!r}: a quantity must be at least 0 and below 2^63 (8Ei)")
    return value


QUANTITY_RULE: dict[str, Any] = {
    "rule": "type(self) == int ? self >= 0 : (self.matches(r'" + QUANTITY_PATTERN + "') && isQuantity(self) && "
    "quantity(self).isLessThan(quantity('8Ei')))",
    "message": "must be a quantity from 0 to below 8Ei (e.g. 4, 500m, 32Gi)",
}
Quantity = Annotated[
    int | str,
    BeforeValidator(_quantity),
    Field(json_schema_extra={"maxLength": 64, "x-kubernetes-validations": [QUANTITY_RULE]}),
]
"""A resource quantity: an integer, or a string such as 500m or 32Gi; from 0 to below 8Ei."""
RESOURCE_NAME_PATTERN = (
    r"^(cpu|memory|ephemeral-storage|hugepages-[0-9]+(Ki|Mi|Gi)|([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]"
    r"([-a-z0-9]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$"
)
RESOURCE_NAMES_RULE: dict[str, Any] = {
    "rule": f"self.all(k, k.matches(r'{RESOURCE_NAME_PATTERN}') && k.size() <= 253 && "
    "!k.split('/')[0].endsWith('kubernetes.io'))",
    "message": "keys must be cpu, memory, ephemeral-storage, hugepages-<size> or an extended resource "
    "(<domain>/<name>, not a kubernetes.io domain)",
}


def _resource_names(resources: dict[str, Any]) -> dict[str, Any]:
    for key in resources:
        prefix = key.split("/")[0]
        if not re.match(RESOURCE_NAME_PATTERN, key) or len(key) > 253 or prefix.endswith("kubernetes.io"):
            raise ValueError(f"{key!r}: {RESOURCE_NAMES_RULE['message'].removeprefix('keys must be ')} expected")
    return resources


ResourceMap = Annotated[dict[str, Quantity], AfterValidator(_resource_names)]


class ApiModel(BaseModel):
    """Base of every API object: camelCase on the wire, unknown fields refused, docstrings as descriptions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
        strict=True,
        allow_inf_nan=False,
    )

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data: Any) -> Any:
        """The apiserver prunes null object fields before defaulting and validation (apiextensions v1, fields
        not marked nullable): ``replicas: null`` is ``replicas: 1``. So here."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data

    def wire(self) -> dict[str, Any]:
        """The object as it appears in YAML/JSON: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def sub(factory: type[ApiModel]) -> Any:
    """A nested object that defaults to empty, so the CRD's defaults inside it apply even when it is absent."""
    return Field(default_factory=factory, json_schema_extra={"default": {}})


def _rules(*rules: tuple[str, str]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]})


_QN_CORE = QUALIFIED_NAME_PATTERN[1:-1]
_TOLERATION_RULES = (
    (
        "!has(self.key) || self.key == '' || (self.key.matches(r'" + QUALIFIED_NAME_PATTERN + "') && "
        "self.key.split('/')[0].size() <= 253)",
        "key must be a label key",
    ),
    (
        "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
        "operator must be Exists when key is empty",
    ),
    (
        "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        "effect must be NoExecute when tolerationSeconds is set",
    ),
    (
        "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        "value must be empty when operator is Exists",
    ),
)


class Toleration(ApiModel):
    """A Kubernetes toleration (core/v1 Toleration), copied to the engine pod."""

    model_config = ApiModel.model_config | _rules(*_TOLERATION_RULES)
    key: str | None = Field(default=None, max_length=317)
    """Taint key the toleration applies to; empty with operator Exists matches all taints."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (default Equal)."""
    value: str | None = Field(default=None, pattern=LABEL_VALUE_PATTERN, max_length=63)
    """Taint value the toleration matches, for operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all effects."""
    toleration_seconds: Int | None = Field(default=None, ge=-(2**63), le=INT64_MAX)
    """For NoExecute: how long the pod stays bound after the taint appears."""

    @model_validator(mode="after")
    def _cross_fields(self) -> Toleration:  # mirrors the CEL rules above
        if self.key:
            qualified_name(self.key)
        elif self.operator != "Exists":
            raise ValueError(_TOLERATION_RULES[1][1])
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError(_TOLERATION_RULES[2][1])
        if self.operator == "Exists" and self.value:
            raise ValueError(_TOLERATION_RULES[3][1])
        return self


ENV_NAME_PATTERN = r"^[ -<>-~]+$"
"""Printable ASCII but '=' (the apiserver's rule since RelaxedEnvironmentVariableValidation, GA in 1.34)."""
CONFIG_KEY_PATTERN = r"^\.?[-_A-Za-z0-9][-._A-Za-z0-9]*$"
"""A Secret or ConfigMap key: [-._a-zA-Z0-9]+, not "." and not starting with ".."."""
FIELD_PATH_PATTERN = (
    r"^(metadata\.(name|namespace|uid)|spec\.(nodeName|serviceAccountName)|status\.(hostIPs?|podIPs?)|"
    r"metadata\.(labels|annotations)\['" + _QN_CORE + r"'\])$"
)


class KeySelector(ApiModel):
    """A key of a Secret or ConfigMap in the namespace (core/v1 SecretKeySelector, ConfigMapKeySelector)."""

    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the Secret or ConfigMap."""
    key: str = Field(pattern=CONFIG_KEY_PATTERN, max_length=253)
    """The key to select."""
    optional: bool | None = None
    """Whether the Secret or ConfigMap (or the key) may be missing."""


class FieldSelector(ApiModel):
    """A field of the pod (core/v1 ObjectFieldSelector)."""

    field_path: str = Field(pattern=FIELD_PATH_PATTERN, max_length=250)
    """metadata.name, metadata.namespace, metadata.uid, metadata.labels['KEY'], metadata.annotations['KEY'],
    spec.nodeName, spec.serviceAccountName, status.hostIP(s) or status.podIP(s)."""
    api_version: Literal["v1"] | None = None
    """Version of the schema the path is written in (v1)."""


class ResourceFieldSelector(ApiModel):
    """A resource of the engine container (core/v1 ResourceFieldSelector, of the container itself)."""

    resource: Literal[
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
    ]
    """The resource to expose."""


_ONE_SOURCE = "set exactly one of fieldRef, resourceFieldRef, secretKeyRef and configMapKeyRef"


class EnvVarSource(ApiModel):
    """Where a variable's value comes from (core/v1 EnvVarSource): exactly one of the fields."""

    model_config = ApiModel.model_config | _rules(
        (
            "[has(self.fieldRef), has(self.resourceFieldRef), has(self.secretKeyRef), has(self.configMapKeyRef)]"
            ".filter(x, x).size() == 1",
            _ONE_SOURCE,
        )
    )
    field_ref: FieldSelector | None = None
    """A field of the pod."""
    resource_field_ref: ResourceFieldSelector | None = None
    """A resource of the engine container."""
    secret_key_ref: KeySelector | None = None
    """A key of a Secret."""
    config_map_key_ref: KeySelector | None = None
    """A key of a ConfigMap."""

    @model_validator(mode="after")
    def _one(self) -> EnvVarSource:
        sources = (self.field_ref, self.resource_field_ref, self.secret_key_ref, self.config_map_key_ref)
        if sum(s is not None for s in sources) != 1:
            raise ValueError(_ONE_SOURCE)
        return self


_VALUE_OR_FROM = "value and valueFrom are exclusive"


class EnvVar(ApiModel):
    """An environment variable for the engine container (core/v1 EnvVar)."""

    model_config = ApiModel.model_config | _rules(
        ("!has(self.valueFrom) || !has(self.value) || self.value == ''", _VALUE_OR_FROM)
    )
    name: str = Field(min_length=1, max_length=256, pattern=ENV_NAME_PATTERN)
    """Variable name (printable ASCII, no '=')."""
    value: str | None = Field(default=None, max_length=32768)
    """Literal value."""
    value_from: EnvVarSource | None = None
    """Where the value comes from: fieldRef, resourceFieldRef, secretKeyRef or configMapKeyRef."""

    @model_validator(mode="after")
    def _exclusive(self) -> EnvVar:
        if self.value_from is not None and self.value:
            raise ValueError(_VALUE_OR_FROM)
        return self


def _q(side: str) -> str:
    return f"quantity(string(self.{side}[k]))"


_BOTH = "k in self.limits && isQuantity(string(self.requests[k])) && isQuantity(string(self.limits[k]))"
_BOTH_MAPS = "!has(self.requests) || !has(self.limits) || "
"""The maps default to empty in pydantic, not in the CRD: an absent one has nothing to compare."""
RESOURCE_RULES = [
    {
        "rule": f"{_BOTH_MAPS}self.requests.all(k, !({_BOTH}) || !{_q('requests')}.isGreaterThan({_q('limits')}))",
        "message": "resources: a request above its limit (give one of them: a request alone raises the computed limit, "
        "a limit alone caps the computed request)",
    },
    {
        "rule": f"{_BOTH_MAPS}self.requests.all(k, !(k.contains('/') || k.startsWith('hugepages-')) || !({_BOTH}) || "
        f"{_q('requests')}.compareTo({_q('limits')}) == 0)",
        "message": "resources: an extended resource or hugepages request must equal its limit (give one of them: it "
        "sets both)",
    },
]


def exact_resource(name: str) -> bool:
    """Extended resources (domain/name) and hugepages: no overcommit, request = limit (core/v1 IsOvercommitAllowed)."""
    return "/" in name or name.startswith("hugepages-")


class ResourceRequirements(ApiModel):
    """Requests and limits for the engine container (core/v1 ResourceRequirements). Merged into the computed ones
    as Kubernetes users expect (docs/security.md, "spec.resources"): a request above the computed limit raises it,
    a limit below the computed request caps it; an extended resource or hugepages given once sets both its request
    and its limit."""

    model_config = ApiModel.model_config | ConfigDict(
        json_schema_extra={"x-kubernetes-validations": RESOURCE_RULES}  # type: ignore[dict-item]
    )

    requests: ResourceMap = Field(
        default_factory=dict, max_length=16, json_schema_extra={"x-kubernetes-validations": [RESOURCE_NAMES_RULE]}
    )
    """Resource requests, e.g. cpu: "4", memory: 32Gi."""
    limits: ResourceMap = Field(
        default_factory=dict, max_length=16, json_schema_extra={"x-kubernetes-validations": [RESOURCE_NAMES_RULE]}
    )
    """Resource limits, e.g. nvidia.com/gpu: 1."""

    @model_validator(mode="after")
    def _consistent(self) -> ResourceRequirements:  # mirrors the CEL rules above
        for name in self.requests.keys() & self.limits.keys():
            request, limit = parse_quantity(self.requests[name]), parse_quantity(self.limits[name])
            if request > limit:
                raise ValueError(f"requests.{name} is above limits.{name}: " + RESOURCE_RULES[0]["message"])
            if exact_resource(name) and request != limit:
                raise ValueError(f"requests.{name} differs from limits.{name}: " + RESOURCE_RULES[1]["message"])
        return self


class Condition(ApiModel):
    """A standard metav1.Condition."""

    type: str = Field(max_length=316)
    """Condition type: BackendSelected, Fits, SpeculativeDecoding or Ready."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str = Field(max_length=1024)
    """One CamelCase word for machines."""
    message: str = Field(default="", max_length=32768)
    """Human-readable details."""
    last_transition_time: str = Field(max_length=64)
    """When the status last changed (RFC 3339)."""
    observed_generation: Int | None = Field(default=None, ge=0, le=INT64_MAX)
    """The metadata.generation this condition was computed from."""
