"""The engines: one module per engine, each declaring its card (``CARD``) beside its renderer.

``REGISTRY`` is the one ordered list of engines. Its order is the documented tie-break: when two engines are equal on
every criterion the selection weighs, the one listed first wins (vLLM first: highest throughput and the most
features on GPU; PyTorch eager last: the research fallback). Adding an engine is one module and one entry here (and
its name in the API's Literal, which tests/test_engine_cards.py holds equal to this list).

Pure (no I/O). Layering: api -> facts -> decision -> engines -> selection -> render.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.engines import llamacpp, onnxruntime, pytorch, rules, sglang, tgi, vllm
from inference_backend.engines.base import EngineContainer, Renderer
from inference_backend.engines.card import EngineCard, MeasuredRow, Profile

REGISTRY: tuple[EngineCard, ...] = (vllm.CARD, tgi.CARD, sglang.CARD, llamacpp.CARD, onnxruntime.CARD, pytorch.CARD)

CARDS: Mapping[str, EngineCard] = MappingProxyType({c.name: c for c in REGISTRY})
NAMES: tuple[str, ...] = tuple(c.name for c in REGISTRY)
ENGINES: Mapping[str, Renderer] = MappingProxyType({c.name: c.render for c in REGISTRY})
VERSIONS: Mapping[str, str] = MappingProxyType({c.name: c.version for c in REGISTRY})


def card(name: str) -> EngineCard:
    """The card of ``name``; KeyError names the registered engines."""
    try:
        return CARDS[name]
    except KeyError:
        raise KeyError(f"no engine {name!r}; registered: {', '.join(NAMES)}") from None


def check_spec(spec: InferenceBackendSpec) -> None:
    """Raise InvalidSpec for a spec that breaks a rule made from the cards (the CRD carries the same rules)."""
    rules.check(spec, REGISTRY)


__all__ = [
    "CARDS",
    "ENGINES",
    "NAMES",
    "REGISTRY",
    "VERSIONS",
    "EngineCard",
    "EngineContainer",
    "MeasuredRow",
    "Profile",
    "Renderer",
    "card",
    "check_spec",
]
