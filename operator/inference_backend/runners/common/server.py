"""The HTTP front of both runners: OpenAI completions and chat (SSE), /v1/models, /health, /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from inference_backend.runners.common import errors
from inference_backend.runners.common.engine import GenRequest, QueueFull, SamplingParams, TokenEvent
from inference_backend.runners.common.metrics import Metrics
from inference_backend.runners.common.protocol import ChatCompletionRequest, CompletionRequest, _Base
from inference_backend.runners.common.scheduler import Scheduler
from inference_backend.runners.common.textstream import TextStream

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    """What a runner's loader returns once the model is ready."""

    engine: Any  # has submit(GenRequest) (raises QueueFull) and shutdown()
    tokenizer: Any
    max_model_len: int


def start_scheduler(backend: Any, args: Any, tokenizer: Any, *, kv_budget: int, max_model_len: int,
                    eos_token_ids: set[int], metrics: Metrics) -> Loaded:  # fmt: skip
    """The scheduler both runners put in front of their backend, configured from the shared flags, started."""
    sched = Scheduler(
        backend,
        policy=args.batching,
        max_batch_size=args.max_batch_size,
        max_batch_tokens=args.max_batch_tokens,
        max_wait_ms=args.max_wait_ms,
        max_queue=args.max_queue,
        kv_capacity_tokens=kv_budget,
        max_model_len=max_model_len,
        eos_token_ids=eos_token_ids,
        metrics=metrics,
    )
    sched.start()
    return Loaded(sched, tokenizer, max_model_len)


def served_name(args: Any) -> str:
    """--served-model-name, or the model directory's name."""
    return str(args.served_model_name or Path(args.model).name)


@dataclass
class State:
    served_model_name: str
    metrics: Metrics
    loaded: Loaded | None = None
    failed: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))


def _fallback_chat_prompt(messages: list[tuple[str, str]]) -> str:
    return "".join(f"<|{role}|>\n{text}\n" for role, text in messages) + "<|assistant|>\n"


def build_app(state: State) -> FastAPI:
    app = FastAPI(title="inference-backend runner", docs_url=None, redoc_url=None)

    @app.exception_handler(errors.APIError)
    async def _api_error(_: Request, exc: errors.APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.get("/health")
    async def health() -> Response:
        if state.loaded is None:
            return JSONResponse({"status": "failed" if state.failed else "loading"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card: dict[str, Any] = {
            "id": state.served_model_name,
            "object": "model",
            "created": state.created,
            "owned_by": "inference-backend",
        }
        if state.loaded is not None:
            card["max_model_len"] = state.loaded.max_model_len
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await _parse(request, CompletionRequest)
        loaded = _ready(state, body)
        prompt = body.prompt
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            ids = loaded.tokenizer.encode(prompt)
        elif all(isinstance(t, int) for t in prompt):
            ids = [int(t) for t in prompt]
        else:
            raise errors.bad_request("Only one prompt per request is supported.", "prompt")
        return await _generate(state, loaded, body, ids, body.max_tokens, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await _parse(request, ChatCompletionRequest)
        loaded = _ready(state, body)
        msgs = [(m.role, m.text()) for m in body.messages]
        tok = loaded.tokenizer
        if getattr(tok, "chat_template", None):
            conv = [{"role": r, "content": t} for r, t in msgs]
            gen = body.add_generation_prompt
            text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
        else:
            text = _fallback_chat_prompt(msgs)
        ids = tok.encode(text, add_special_tokens=False)
        return await _generate(state, loaded, body, ids, body.effective_max_tokens(), chat=True)

    return app


async def _parse(request: Request, model: type[_Base]) -> Any:
    raw = await request.body()
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


def _ready(state: State, body: _Base) -> Loaded:
    if body.model != state.served_model_name:
        raise errors.model_not_found(body.model)
    if state.loaded is None:
        raise errors.not_ready()
    return state.loaded


async def _events(state: State, loaded: Loaded, ids: list[int], params: SamplingParams) -> AsyncGenerator[Any, None]:
    """Submit a request; yield the GenRequest first, then its TokenEvents until the last one."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[TokenEvent] = asyncio.Queue()

    def emit(ev: TokenEvent) -> None:
        with contextlib.suppress(RuntimeError):  # event loop gone (shutdown)
            loop.call_soon_threadsafe(queue.put_nowait, ev)

    req = GenRequest(uuid.uuid4().hex, ids, params, emit)
    try:
        loaded.engine.submit(req)
    except QueueFull as exc:
        raise errors.overloaded(int(exc.args[0])) from exc
    yield req
    try:
        while True:
            ev = await queue.get()
            yield ev
            if ev.finish_reason is not None:
                return
    finally:
        req.cancelled.set()  # client went away or we stopped early: the engine drops it


async def _generate(
    state: State, loaded: Loaded, body: _Base, ids: list[int], max_tokens: int | None, chat: bool
) -> Response:
    n_prompt, limit = len(ids), loaded.max_model_len
    if n_prompt == 0:
        raise errors.bad_request("The prompt is empty.", "prompt")
    if max_tokens is None:
        max_tokens = limit - n_prompt
    if n_prompt + max_tokens > limit:
        raise errors.bad_request(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion).",
            "max_tokens" if n_prompt < limit else "prompt",
            "context_length_exceeded",
        )
    temp = body.temperature
    params = SamplingParams(max_tokens, temp, body.top_p, body.seed, body.ignore_eos)
    events = _events(state, loaded, ids, params)
    req = await events.__anext__()  # raises the 429 before any response starts
    rid = ("chatcmpl-" if chat else "cmpl-") + req.request_id
    text = TextStream(loaded.tokenizer, body.stop_list())
    base = {"id": rid, "created": int(time.time()), "model": state.served_model_name}
    if body.stream:
        return StreamingResponse(_sse(events, text, base, body, chat), media_type="text/event-stream")
    out_ids: list[int] = []
    pieces: list[str] = []
    finish = "stop"
    async for ev in events:
        if ev.error:
            raise errors.APIError(500, ev.error, "internal_error", None, "engine_error")
        out_ids.extend(ev.token_ids)
        pieces.append(text.push(ev.token_ids, ev.finish_reason is not None))
        finish = ev.finish_reason or finish
        if text.stopped:
            finish = "stop"
            break
    await events.aclose()
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
    if chat:
        choice["message"] = {"role": "assistant", "content": "".join(pieces)}
    else:
        choice["text"] = "".join(pieces)
    if body.return_token_ids:
        choice["token_ids"] = out_ids
    n_out = len(out_ids)
    usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}
    obj = "chat.completion" if chat else "text_completion"
    return JSONResponse({**base, "object": obj, "choices": [choice], "usage": usage})


async def _sse(
    events: AsyncGenerator[Any, None], text: TextStream, base: dict[str, Any], body: _Base, chat: bool
) -> AsyncGenerator[bytes, None]:
    obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(delta: str, finish: str | None, ids: list[int] | None, first: bool = False) -> bytes:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if chat:
            choice["delta"] = {"role": "assistant", "content": delta} if first else {"content": delta}
        else:
            choice["text"] = delta
        if body.return_token_ids and ids is not None:
            choice["token_ids"] = ids
        return f"data: {json.dumps({**base, 'object': obj, 'choices': [choice]})}\n\n".encode()

    try:
        if chat:
            yield chunk("", None, None, first=True)
        async for ev in events:
            if ev.error:
                err = errors.APIError(500, ev.error, "internal_error", None, "engine_error")
                yield f"data: {json.dumps(err.body())}\n\n".encode()
                break
            final = ev.finish_reason is not None
            delta = text.push(ev.token_ids, final)
            finish = "stop" if text.stopped else ev.finish_reason
            if delta or ev.token_ids or finish:
                yield chunk(delta, finish, ev.token_ids)
            if text.stopped or final:
                break
        yield b"data: [DONE]\n\n"
    finally:
        await events.aclose()


def serve(args: Any, load: Callable[[Metrics], Loaded], served_model_name: str, metrics: Metrics | None = None) -> int:
    """Listen at once (health 503), load the model in a thread, serve until stopped. Returns an exit code."""
    import uvicorn

    metrics = metrics or Metrics(served_model_name)
    state = State(served_model_name, metrics)
    config = uvicorn.Config(build_app(state), host=args.host, port=args.port, log_level=args.log_level)
    server = uvicorn.Server(config)

    def loader() -> None:
        try:
            t0 = time.monotonic()
            state.loaded = load(metrics)
            log.info("model %s ready in %.1fs", served_model_name, time.monotonic() - t0)
        except Exception as exc:
            log.exception("loading the model failed")
            state.failed = str(exc)
            server.should_exit = True

    threading.Thread(target=loader, name="loader", daemon=True).start()
    server.run()
    if state.loaded is not None:
        state.loaded.engine.shutdown()
    return 1 if state.failed else 0
