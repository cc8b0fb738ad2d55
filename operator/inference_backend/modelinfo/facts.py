"""What inspection found, field by field, with where each fact came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Model.spec fields in the order they are printed (camelCase, as on the wire).
FIELDS = (
    "format",
    "architecture",
    "parameters",
    "activeParameters",
    "dtype",
    "quantization",
    "contextLength",
    "tokenizer",
    "layers",
    "attentionHeads",
    "kvHeads",
    "headDim",
    "kvLatentDim",
    "hiddenSize",
    "experts",
    "activeExpertsPerToken",
)


@dataclass
class Facts:
    """Model.spec values (wire names) and, for each, the source it was read from."""

    path: str
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def set(self, name: str, value: Any, source: str) -> None:
        if value is None:
            return
        self.values[name] = value
        self.sources[name] = source


def first_int(config: dict[str, Any], *keys: str) -> tuple[int, str] | None:
    """The first of ``keys`` that holds a positive integer, with its key."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, key
    return None
