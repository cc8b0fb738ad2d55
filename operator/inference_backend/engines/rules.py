"""Spec rules that depend on what the engines can do, made from the registry's cards.

Each rule is stated once and used twice: as a CEL rule in the CRD (the API server refuses the object, naming the
field; crdgen.py writes them) and as a check the selection runs first (the offline CLI and any object admitted
before the rule existed get the same message as an InvalidSpec). Pure (no I/O).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic.alias_generators import to_snake

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import InvalidSpec
from inference_backend.engines.card import SIGNALS, EngineCard

QUANTIZED_KV_DTYPES = ("q8_0", "q4_0")
"""Block-quantized KV cache types: only the engines whose card lists them have them."""


@dataclass(frozen=True)
class Rule:
    field: str
    """The spec field the message names."""
    cel: str
    """The CEL rule on the spec object (true = admitted)."""
    message: str
    admits: Callable[[InferenceBackendSpec], bool]
    """The same rule in Python."""


def _quoted(names: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{n}'" for n in names) + "]"


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _or(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def spec_rules(registry: Sequence[EngineCard]) -> tuple[Rule, ...]:
    rules: list[Rule] = []
    kv_owners = [c.name for c in registry if all(d in c.kv_dtypes for d in QUANTIZED_KV_DTYPES)]
    if kv_owners:
        allowed = ("auto", *kv_owners)
        titles = sorted({c.title for c in registry if c.name in kv_owners})
        rules.append(
            Rule(
                "spec.kvCache.dtype",
                f"!(self.kvCache.dtype in {_quoted(QUANTIZED_KV_DTYPES)}) || self.backend in {_quoted(allowed)}",
                f"kvCache.dtype {_and(QUANTIZED_KV_DTYPES)} are {_or(titles)} cache types: backend must be "
                f"{_or(kv_owners)} or auto",
                lambda s: s.kv_cache.dtype not in QUANTIZED_KV_DTYPES or s.backend in allowed,
            )
        )
    gpu_only = [c.name for c in registry if c.gpu_required]
    if gpu_only:
        rules.append(
            Rule(
                "spec.hardware.accelerator",
                f"self.hardware.accelerator != 'cpu' || !(self.backend in {_quoted(gpu_only)})",
                f"backend {_and(gpu_only)} need{'s' if len(gpu_only) == 1 else ''} a GPU: hardware.accelerator cannot "
                "be cpu",
                lambda s: s.hardware.accelerator != "cpu" or s.backend not in gpu_only,
            )
        )
    for signal in SIGNALS:
        without = [c.name for c in registry if signal not in c.autoscaling.signals]
        if not without:
            continue
        has = [c.name for c in registry if c.name not in without]
        rules.append(
            Rule(
                "spec.autoscaling.metric",
                f"!has(self.autoscaling) || self.autoscaling.metric != '{signal}' "
                f"|| !(self.backend in {_quoted(without)})",
                f"autoscaling.metric {signal}: {_and(without)} expose{'s' if len(without) == 1 else ''} no such "
                f"metric: backend must be {_or([*has, 'auto'])}, or another metric",
                lambda s, signal=signal, without=without: (  # type: ignore[misc]
                    s.autoscaling is None or s.autoscaling.metric != signal or s.backend not in without
                ),
            )
        )
    cold = [c.name for c in registry if not c.autoscaling.scale_to_zero]
    if cold:
        warm = [c.name for c in registry if c.name not in cold]
        rules.append(
            Rule(
                "spec.autoscaling.minReplicas",
                f"!has(self.autoscaling) || self.autoscaling.minReplicas > 0 || !(self.backend in {_quoted(cold)})",
                f"autoscaling.minReplicas 0: {_and(cold)} cold-start in minutes, too long for a request to wait "
                f"(docs/autoscaling.md): backend must be {_or([*warm, 'auto'])}, or minReplicas at least 1",
                lambda s: s.autoscaling is None or s.autoscaling.min_replicas > 0 or s.backend not in cold,
            )
        )
    rules.extend(_bound_rules(registry))
    no_lora = [c.name for c in registry if not c.lora.serves]
    if no_lora:
        serves = [c.name for c in registry if c.name not in no_lora]
        rules.append(
            Rule(
                "spec.adapters",
                f"!has(self.adapters) || size(self.adapters) == 0 || !(self.backend in {_quoted(no_lora)})",
                f"adapters: {_and(no_lora)} serve{'s' if len(no_lora) == 1 else ''} no LoRA adapters: backend must be "
                f"{_or([*serves, 'auto'])}, or no adapters",
                lambda s: not s.adapters or s.backend not in no_lora,
            )
        )
    return tuple(rules)


def _field_value(spec: InferenceBackendSpec, field: str) -> object:
    node: object = spec
    for part in field.removeprefix("spec.").split("."):
        node = getattr(node, to_snake(part), None)
    return node


def _bound_rules(registry: Sequence[EngineCard]) -> list[Rule]:
    """A spec field an engine flag takes verbatim is bounded by the smallest maximum of the engines' flags (cards'
    ``flag_bounds``): any engine the selection may choose can then take it (batching.maxBatchTokens at its int64
    maximum rendered llama-server's -b 9223372036854774784, past its int32)."""
    tightest: dict[str, tuple[int, str, str]] = {}
    for c in registry:
        for flag, bound in sorted(c.flag_bounds.items()):
            if bound.field and (bound.field not in tightest or bound.maximum < tightest[bound.field][0]):
                tightest[bound.field] = (bound.maximum, f"{c.title}'s {flag}", bound.source)
    out = []
    for field, (most, flag, source) in sorted(tightest.items()):
        path = field.removeprefix("spec.")
        parent, _, leaf = path.rpartition(".")
        cel = (
            f"!has(self.{parent}.{leaf}) || self.{path} <= {most}"
            if parent
            else f"!has(self.{leaf}) || self.{leaf} <= {most}"
        )
        out.append(
            Rule(
                field,
                cel,
                f"{path} must be at most {most} ({flag} is an {source})",
                lambda s, field=field, most=most: (  # type: ignore[misc]
                    not isinstance(v := _field_value(s, field), int) or v <= most
                ),
            )
        )
    return out


def check(spec: InferenceBackendSpec, registry: Sequence[EngineCard]) -> None:
    """Raise InvalidSpec (naming the field) for the first rule the spec breaks."""
    for rule in spec_rules(registry):
        if not rule.admits(spec):
            raise InvalidSpec(rule.field, rule.message)
