"""Selection: spec + node facts + engine cards (the registry) -> Decision with reasons. Pure: no I/O."""

from inference_backend.decision import Current, Decision, InvalidSpec, ResolvedModel, Speculation
from inference_backend.selection.tree import select

__all__ = ["Current", "Decision", "InvalidSpec", "ResolvedModel", "Speculation", "select"]
