"""OpenAI request fields we do not implement: refused with 400 naming the parameter instead of ignored.

A field set to its neutral value (the value that changes nothing) is accepted. Fields with no effect on the output
(`user`, `metadata`, ...) are accepted and ignored. Any other unknown field is refused, as OpenAI does
("Unrecognized request argument supplied"), so a client relying on an extension we lack finds out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inference_backend.runners.common import errors


def _none_or(*neutral: Any) -> Callable[[Any], bool]:
    return lambda v: v is None or any(v == n and type(v) is type(n) for n in neutral)


# field -> is this value neutral? (then accepted)
UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "repetition_penalty": _none_or(1, 1.0),
    "logit_bias": _none_or({}),
    "best_of": _none_or(1),
    "echo": _none_or(False),
    "suffix": _none_or(""),
    "response_format": _none_or({"type": "text"}),
    "tools": _none_or([]),
    "tool_choice": _none_or("none"),
    "functions": _none_or([]),
    "function_call": _none_or("none"),
    "modalities": _none_or(["text"]),
    "audio": _none_or(),
    "prediction": _none_or(),
    "web_search_options": _none_or(),
    "reasoning_effort": _none_or(),
    "guided_json": _none_or(),
    "guided_regex": _none_or(),
    "guided_choice": _none_or(),
    "guided_grammar": _none_or(),
    "structured_outputs": _none_or(),
}
# No effect on the tokens: accepted and ignored (OpenAI bookkeeping; tool-call options without tools).
IGNORED = frozenset(
    {"user", "metadata", "store", "service_tier", "parallel_tool_calls", "safety_identifier", "prompt_cache_key"}
)


def check(extra: dict[str, Any] | None) -> None:
    """Raise 400 for the first unsupported (non-neutral) or unrecognized field among the undeclared ones."""
    for name, value in (extra or {}).items():
        neutral = UNSUPPORTED.get(name)
        if neutral is not None:
            if not neutral(value):
                raise errors.APIError(
                    400,
                    f"{name}: this server does not support `{name}` (got {value!r}); leave it out.",
                    "invalid_request_error",
                    name,
                    "unsupported_parameter",
                )
        elif name not in IGNORED:
            raise errors.APIError(
                400,
                f"Unrecognized request argument supplied: {name}",
                "invalid_request_error",
                name,
                "unrecognized_parameter",
            )
