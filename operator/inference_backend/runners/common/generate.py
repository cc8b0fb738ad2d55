"""Running one prepared request on the engine: submission, the per-request deadline, client disconnects
(cancel the generation), the JSON or SSE reply."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import Request

from inference_backend.runners.common import errors
from inference_backend.runners.common.engine import EngineUnavailable, GenRequest, QueueFull, SamplingParams, TokenEvent
from inference_backend.runners.common.handoff import Inbox
from inference_backend.runners.common.limits import GREEDY_BELOW, TOP_P_GREEDY_BELOW
from inference_backend.runners.common.prepare import Prepared
from inference_backend.runners.common.state import State
from inference_backend.runners.common.textstream import TextStream


class Submitted:
    """A request handed to the engine; its TokenEvents arrive on the event loop. close() cancels it."""

    def __init__(self, prep: Prepared, params: SamplingParams, deadline: float | None, timeout_s: float,
                 eager: bool = True) -> None:  # fmt: skip
        """eager: wake for every event (streaming, stop strings); else only for the last (common/handoff.py)."""
        loop = asyncio.get_running_loop()
        self.inbox = Inbox(eager)
        self.timeout_s = timeout_s
        self.done = False  # the engine sent the last event

        def emit(ev: TokenEvent) -> None:
            self.inbox.put(ev, last=ev.finish_reason is not None)

        self.req = GenRequest(uuid.uuid4().hex, prep.ids, params, emit)
        self.engine = prep.loaded.engine
        try:
            prep.loaded.engine.submit(self.req)
        except QueueFull as exc:
            raise errors.overloaded(int(exc.args[0])) from exc
        except EngineUnavailable as exc:
            raise errors.unavailable(str(exc)) from exc
        self.timer = None if deadline is None else loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self.engine.cancel(self.req)
        self.inbox.put_here(None)

    async def events(self) -> AsyncIterator[TokenEvent]:
        """TokenEvents up to the last; raises errors.timed_out past the deadline."""
        while True:
            for ev in await self.inbox.take():
                if ev is None:
                    raise errors.timed_out(self.timeout_s)
                if ev.finish_reason is not None:
                    self.done = True
                yield ev
                if self.done:
                    return

    def close(self) -> None:
        """Done, failed or abandoned: the engine drops the request if it still runs."""
        if self.timer is not None:
            self.timer.cancel()
        if not self.done:
            self.engine.cancel(self.req)


async def _watch_disconnect(request: Request, sub: Submitted) -> None:
    """Non-streaming replies: the body is read, so the next ASGI message is the client going away."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            sub.engine.cancel(sub.req)
            return


async def generate(state: State, prep: Prepared, request: Request, started: float) -> Response:
    body = prep.body
    greedy = body.temperature < GREEDY_BELOW or body.top_p < TOP_P_GREEDY_BELOW
    temp = 0.0 if greedy else body.temperature
    params = SamplingParams(prep.max_tokens, temp, body.top_p, body.seed, body.ignore_eos)
    timeout = state.limits.request_timeout_s
    eager = body.stream or bool(body.stop_list())  # a whole reply without stop strings needs only the last event
    sub = Submitted(prep, params, started + timeout if timeout > 0 else None, timeout, eager)
    rid = ("chatcmpl-" if prep.chat else "cmpl-") + sub.req.request_id
    text = TextStream(prep.loaded.tokenizer, body.stop_list(), lazy=not body.stream)
    base = {"id": rid, "created": int(time.time()), "model": state.served_model_name}
    if body.stream:
        return StreamingResponse(_sse(sub, text, base, prep), media_type="text/event-stream")
    watcher = asyncio.create_task(_watch_disconnect(request, sub))
    try:
        return await _whole(sub, text, base, prep)
    finally:
        watcher.cancel()
        sub.close()


async def _whole(sub: Submitted, text: TextStream, base: dict[str, Any], prep: Prepared) -> Response:
    out_ids: list[int] = []
    pieces: list[str] = []
    finish = "stop"
    async for ev in sub.events():
        if ev.error:
            raise errors.engine_error(ev.error)
        out_ids.extend(ev.token_ids)
        pieces.append(text.push(ev.token_ids, ev.finish_reason is not None))
        finish = ev.finish_reason or finish
        if text.stopped:
            finish = "stop"
            break
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
    if prep.chat:
        choice["message"] = {"role": "assistant", "content": "".join(pieces)}
    else:
        choice["text"] = "".join(pieces)
    if prep.body.return_token_ids:
        choice["token_ids"] = out_ids
    n_prompt, n_out = len(prep.ids), len(out_ids)
    usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}
    obj = "chat.completion" if prep.chat else "text_completion"
    return JSONResponse({**base, "object": obj, "choices": [choice], "usage": usage})


async def _sse(sub: Submitted, text: TextStream, base: dict[str, Any], prep: Prepared) -> AsyncGenerator[bytes, None]:
    """Starlette cancels this generator when the client disconnects: `finally` then cancels the generation."""
    chat, body = prep.chat, prep.body
    obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(delta: str, finish: str | None, ids: list[int] | None, first: bool = False) -> bytes:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if chat:
            choice["delta"] = {"role": "assistant", "content": delta} if first else {"content": delta}
        else:
            choice["text"] = delta
        if body.return_token_ids and ids is not None:
            choice["token_ids"] = ids
        extra = {"usage": (tally() if continuous else None)} if usage else {}
        return f"data: {json.dumps({**base, 'object': obj, 'choices': [choice], **extra})}\n\n".encode()

    def tally() -> dict[str, int]:
        n_prompt = len(prep.ids)
        return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}

    options = body.stream_options
    usage = options is not None and options.include_usage
    continuous = usage and options is not None and options.continuous_usage_stats
    n_out = 0

    try:
        if chat:
            yield chunk("", None, None, first=True)
        try:
            async for ev in sub.events():
                if ev.error:
                    yield f"data: {json.dumps(errors.engine_error(ev.error).body())}\n\n".encode()
                    break
                final = ev.finish_reason is not None
                n_out += len(ev.token_ids)
                delta = text.push(ev.token_ids, final)
                finish = "stop" if text.stopped else ev.finish_reason
                if delta or ev.token_ids or finish:
                    yield chunk(delta, finish, ev.token_ids)
                if text.stopped or final:
                    break
        except errors.APIError as exc:  # the deadline passed mid-stream
            yield f"data: {json.dumps(exc.body())}\n\n".encode()
        if usage:  # stream_options.include_usage: a last chunk with no choices carries the usage
            yield f"data: {json.dumps({**base, 'object': obj, 'choices': [], 'usage': tally()})}\n\n".encode()
        yield b"data: [DONE]\n\n"
    finally:
        sub.close()
