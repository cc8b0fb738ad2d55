"""spec.adapters against the engines' cards (``EngineCard.lora``): which engines can serve them, and the rank limit
rendered for the chosen one. Pure."""

from __future__ import annotations

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Adapters, ResolvedAdapter, ResolvedModel
from inference_backend.engines.card import EngineCard
from inference_backend.engines.lora import RUNTIME_SCHEMES


def lora_refusal(caps: EngineCard, spec: InferenceBackendSpec, model: ResolvedModel) -> str:
    """Why ``caps`` cannot serve spec.adapters (naming the field), or "" when it can."""
    lo = caps.lora
    if not lo.serves:
        return f"it serves no LoRA adapters (spec.adapters: {lo.how})"
    arch = model.architecture
    if lo.architectures and arch is not None and arch not in lo.architectures:
        return (
            f"it serves no LoRA adapters on {arch} (spec.adapters; {caps.title} {caps.version} applies LoRA to "
            f"{len(lo.architectures)} architectures, not this one)"
        )
    for i, a in enumerate(spec.adapters):
        if a.rank is not None and a.rank > lo.max_rank:
            return f"spec.adapters[{i}].rank {a.rank} is above its largest LoRA rank {lo.max_rank}"
        extra = sorted(set(a.target_modules) - lo.target_modules) if lo.target_modules else []
        if extra:
            return (
                f"spec.adapters[{i}].targetModules {', '.join(extra)}: not modules it adapts "
                f"({', '.join(sorted(lo.target_modules))})"
            )
    return ""


def rank_limit(spec: InferenceBackendSpec, caps: EngineCard) -> tuple[int, str]:
    """The rank limit to render: the largest declared rank (the card's default where one is undeclared), rounded up
    to a value the engine's flag takes; and where it comes from."""
    lo = caps.lora
    declared = [a.rank for a in spec.adapters if a.rank is not None]
    want = max(declared, default=0)
    how = f"the largest declared rank {want}" if declared else ""
    if len(declared) < len(spec.adapters):
        if lo.default_rank > want:
            how = f"{caps.name}'s default limit {lo.default_rank} (an adapter without spec.adapters[].rank)"
        want = max(want, lo.default_rank)
    if lo.rank_choices:
        rounded = min(r for r in lo.rank_choices if r >= want)
        if rounded != want:
            how += f", rounded up to {rounded} (its flag takes {', '.join(map(str, lo.rank_choices))})"
        want = rounded
    return want, how


def adapter_plan(spec: InferenceBackendSpec, caps: EngineCard) -> tuple[Adapters, list[str]]:
    """The chosen engine's Adapters and the reasons to record ([] without spec.adapters)."""
    if not spec.adapters:
        return Adapters((), 0), []
    lo = caps.lora
    items = tuple(ResolvedAdapter(a.name, a.uri, a.rank, tuple(a.target_modules)) for a in spec.adapters)
    limit, how = rank_limit(spec, caps)
    ids = tuple((a.name, i) for i, a in enumerate(items)) if lo.by_index else None
    by_id = "".join(f'; {name}: "lora": [{{"id": {i}, "scale": 1.0}}]' for name, i in ids or ())
    reasons = [
        f"adapters: {len(items)} LoRA adapter(s) ({', '.join(a.name for a in items)}) served by {caps.name}: "
        f"{lo.how}{by_id}; rank limit {limit} ({how}; the fetch step checks each adapter's files against it); "
        + _changes(lo.runtime_switch, items)
    ]
    return Adapters(items, limit, ids), reasons


def _changes(switch: str, items: tuple[ResolvedAdapter, ...]) -> str:
    """What a change of spec.adapters does (engines/lora.py runtime: the adapters sidecar on one node)."""
    if switch and all(a.uri.partition("://")[0] in RUNTIME_SCHEMES for a in items):
        return (
            f"loaded while the pods serve ({switch}; the adapters sidecar fetches and loads each one its ConfigMap "
            "lists): a change of the list rolls nothing out unless the limits rendered change (one node only)"
        )
    return "a change of the list rolls the pods out"
