"""Request models of the OpenAI completions and chat completions APIs (the subset we serve)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inference_backend.runners.common.limits import SEED_MAX, SEED_MIN


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: the usage so far in every chunk (with include_usage)


class _Base(BaseModel):
    # Undeclared fields land in model_extra; common/openai_fields.py refuses those we do not implement.
    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1)  # at most --max-n (prepare.py)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    # vLLM extensions (sampling only: greedy ignores them). top_k -1 or 0: off.
    top_k: int = Field(default=-1, ge=-1)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    # vLLM extensions.
    ignore_eos: bool = False
    return_token_ids: bool = False

    def effective_max_tokens(self) -> int | None:
        return self.max_tokens

    def logprobs_count(self) -> int | None:
        """Top alternatives to return per token (0: only the chosen token's logprob); None: no logprobs."""
        return None

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]


class CompletionRequest(_Base):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0)  # at most --max-logprobs (prepare.py)

    def logprobs_count(self) -> int | None:
        return self.logprobs


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(part.get("text", "")) for part in self.content if part.get("type") == "text")


class ChatCompletionRequest(_Base):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    add_generation_prompt: bool = True
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0)  # at most --max-logprobs, with logprobs: true

    def logprobs_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
