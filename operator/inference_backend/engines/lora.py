"""The LoRA adapters of a container (spec.adapters): each fetched and checked like the weights, at /adapters/<name>.
Pure (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

from inference_backend.decision import Decision
from inference_backend.engines import artifacts
from inference_backend.engines.card import AdapterFormat, Lora


@dataclass(frozen=True)
class Served:
    """The adapters of one container: (name, path in the container) in spec order, and their artifacts."""

    paths: tuple[tuple[str, str], ...]
    artifacts: tuple[artifacts.Artifact, ...]


def served(decision: Decision, lora: Lora, fmt: AdapterFormat = "peft") -> Served:
    """Each adapter of the decision fetched (or mounted) and checked against ``lora``'s limits: the rank limit the
    decision rendered, the modules the engine adapts, DoRA, the declared rank, the base model's architecture."""
    model = decision.model
    assert model is not None
    chosen = decision.adapters
    paths: list[tuple[str, str]] = []
    arts: list[artifacts.Artifact] = []
    for i, a in enumerate(chosen.items):
        check = artifacts.AdapterCheck(
            max_rank=chosen.max_rank,
            adapter_format=fmt,
            modules=tuple(sorted(lora.target_modules)),
            rank=a.rank,
            base_architecture=model.architecture if fmt == "peft" else None,
            dora=lora.dora,
        )
        art = artifacts.adapter(model, i, a.name, a.uri, check)
        assert art.local_path is not None
        paths.append((a.name, art.local_path))
        arts.append(art)
    return Served(tuple(paths), tuple(arts))


def no_lora(why: str, source: str) -> Lora:
    """The card entry of an engine that serves no adapters."""
    return Lora(
        serves=False,
        how=why,
        formats=frozenset(),
        max_rank=0,
        rank_choices=(),
        default_rank=0,
        architectures=frozenset(),
        target_modules=frozenset(),
        runtime="",
        prefix_cache=True,
        speculative=frozenset(),
        dora=False,
        source=source,
    )
