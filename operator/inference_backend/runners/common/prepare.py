"""A request body to prompt token ids: read within --max-body-bytes, then (in a worker thread, off the event
loop) JSON, validation, limits, chat template, tokenization, context-length check."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request

from inference_backend.runners.common import errors, openai_fields
from inference_backend.runners.common.limits import Limits
from inference_backend.runners.common.protocol import ChatCompletionRequest, CompletionRequest, _Base
from inference_backend.runners.common.state import Loaded, State

# A prompt longer than this many characters per context token is tokenized in part first: when that part alone
# is over the context, the request is refused without tokenizing all of it (bounded CPU per request).
CHARS_PER_TOKEN_CAP = 64


@dataclass
class Prepared:
    body: Any
    loaded: Loaded
    ids: list[int]
    max_tokens: int
    chat: bool
    n: int = 1
    logprobs: int | None = None  # top alternatives per token; None: no logprobs
    adapter: str | None = None  # the LoRA adapter the `model` field names; None: the base model


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing (413) as soon as it is known to exceed `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise errors.too_large(limit)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise errors.too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect as exc:
        raise errors.client_gone() from exc
    return b"".join(chunks)


def prepare(raw: bytes, chat: bool, state: State) -> Prepared:
    """Runs in state.pool. Raises errors.APIError (OpenAI-shaped) for anything wrong with the request."""
    body = _parse(raw, ChatCompletionRequest if chat else CompletionRequest)
    if body.model != state.served_model_name and body.model not in state.adapters:
        raise errors.model_not_found(body.model)
    loaded = state.loaded
    if loaded is None:
        raise errors.not_ready()
    openai_fields.check(body.model_extra)
    _check_stop(body, state.limits)
    logprobs = _check_choices(body, chat, state.limits)
    ids = _chat_ids(body, loaded, state.limits) if chat else _completion_ids(body, loaded)
    param = "messages" if chat else "prompt"
    max_tokens = _check_length(len(ids), body.effective_max_tokens(), loaded.max_model_len, param)
    adapter = body.model if body.model != state.served_model_name else None
    return Prepared(body, loaded, ids, max_tokens, chat, body.n, logprobs, adapter)


def _parse(raw: bytes, model: type[_Base]) -> Any:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"Malformed JSON body: {exc}", code="invalid_json") from exc
    if not isinstance(data, dict):
        raise errors.bad_request("The request body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise errors.bad_request(f"{param}: {first['msg']}", param=param, code="invalid_value") from exc


def _check_stop(body: _Base, limits: Limits) -> None:
    stops = body.stop_list()
    if len(stops) > limits.max_stop_sequences:
        raise errors.bad_request(
            f"stop: at most {limits.max_stop_sequences} stop sequences are allowed (--max-stop-sequences), "
            f"got {len(stops)}.",
            "stop",
            "invalid_value",
        )
    longest = max((len(s) for s in stops), default=0)
    if longest > limits.max_stop_chars:
        raise errors.bad_request(
            f"stop: a stop sequence may have at most {limits.max_stop_chars} characters (--max-stop-chars), "
            f"got {longest}.",
            "stop",
            "invalid_value",
        )


def _check_choices(body: _Base, chat: bool, limits: Limits) -> int | None:
    """Bounds of `n` and of the logprobs asked for; returns the alternatives per token (None: no logprobs)."""
    if body.n > limits.max_n:
        raise errors.bad_request(
            f"n: at most {limits.max_n} choices per request are allowed (--max-n), got {body.n}.", "n", "invalid_value"
        )
    count = body.logprobs_count()
    param = "top_logprobs" if chat else "logprobs"
    if isinstance(body, ChatCompletionRequest) and body.top_logprobs and not body.logprobs:
        raise errors.bad_request(
            "top_logprobs: set `logprobs` to true to get top_logprobs.", "top_logprobs", "invalid_value"
        )
    if count is not None and count > limits.max_logprobs:
        raise errors.bad_request(
            f"{param}: at most {limits.max_logprobs} alternatives per token are allowed (--max-logprobs), got {count}.",
            param,
            "invalid_value",
        )
    return count


def _completion_ids(body: CompletionRequest, loaded: Loaded) -> list[int]:
    prompt = body.prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return _encode(loaded, prompt, True, "prompt")
    if not all(isinstance(t, int) for t in prompt):
        raise errors.bad_request("Only one prompt per request is supported.", "prompt", "invalid_value")
    ids = [t for t in prompt if isinstance(t, int)]
    vocab = loaded.vocab_size
    for pos, tok in enumerate(ids):
        if tok < 0 or (vocab and tok >= vocab):
            raise errors.bad_request(
                f"prompt: token id {tok} at position {pos} is out of range [0, {vocab}) of this model's vocabulary.",
                "prompt",
                "invalid_value",
            )
    return ids


def _chat_ids(body: ChatCompletionRequest, loaded: Loaded, limits: Limits) -> list[int]:
    if len(body.messages) > limits.max_messages:
        raise errors.bad_request(
            f"messages: at most {limits.max_messages} messages are allowed (--max-messages), got {len(body.messages)}.",
            "messages",
            "invalid_value",
        )
    for i, m in enumerate(body.messages):
        if isinstance(m.content, list) and any(part.get("type") != "text" for part in m.content):
            raise errors.APIError(
                400,
                f"messages[{i}].content: only text content parts are supported by this server.",
                "invalid_request_error",
                f"messages.{i}.content",
                "unsupported_parameter",
            )
    tok = loaded.tokenizer
    if not getattr(tok, "chat_template", None):
        raise errors.APIError(
            400,
            "This model has no chat template, so chat messages cannot be turned into a prompt. Start the server "
            "with --chat-template FILE (a Jinja template), or use /v1/completions with a prompt.",
            "invalid_request_error",
            "messages",
            "chat_template_missing",
        )
    conv = [{"role": m.role, "content": m.text()} for m in body.messages]
    try:
        text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=body.add_generation_prompt)
    except Exception as exc:  # the template refused the conversation (roles must alternate, ...)
        raise errors.bad_request(f"messages: the chat template failed: {exc}", "messages", "invalid_value") from exc
    return _encode(loaded, str(text), False, "messages")


def _encode(loaded: Loaded, text: str, add_special_tokens: bool, param: str) -> list[int]:
    limit = loaded.max_model_len
    cap = limit * CHARS_PER_TOKEN_CAP
    if len(text) > cap:
        head = loaded.tokenizer.encode(text[:cap], add_special_tokens=add_special_tokens)
        if len(head) > limit + 1:  # + 1: the cut may split one token in two
            raise errors.context_exceeded(
                f"This model's maximum context length is {limit} tokens. However, your prompt has more than "
                f"{len(head) - 1} tokens.",
                param,
            )
    return list(loaded.tokenizer.encode(text, add_special_tokens=add_special_tokens))


def _check_length(n_prompt: int, max_tokens: int | None, limit: int, param: str) -> int:
    """The max_tokens to run with: the request's, or what the context leaves. 400 when the prompt does not fit."""
    if n_prompt == 0:
        raise errors.bad_request("The prompt is empty.", param, "invalid_value")
    if max_tokens is None:
        if n_prompt >= limit:
            raise errors.context_exceeded(
                f"This model's maximum context length is {limit} tokens. However, your prompt has {n_prompt} "
                "tokens, which leaves no room for a completion.",
                param,
            )
        return limit - n_prompt
    if n_prompt + max_tokens > limit:
        raise errors.context_exceeded(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion).",
            "max_tokens" if n_prompt < limit else param,
        )
    return max_tokens
