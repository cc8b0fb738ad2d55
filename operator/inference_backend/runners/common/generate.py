"""Running one prepared request on the engine: submission (one engine request per choice, `n`), the per-request
deadline, client disconnects (cancel the generation), the JSON or SSE reply with its logprobs."""

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
from inference_backend.runners.common.logprobs import LogprobFormat
from inference_backend.runners.common.prepare import Prepared
from inference_backend.runners.common.state import State
from inference_backend.runners.common.textstream import TextStream


class Submitted:
    """A request's choices handed to the engine, one GenRequest each; their TokenEvents arrive on the event loop
    as (choice index, event). close() cancels what still runs.

    eager: wake for every event (streaming, stop strings); else only for each choice's last (common/handoff.py)."""

    def __init__(
        self, prep: Prepared, params: list[SamplingParams], deadline: float | None, timeout_s: float, eager: bool
    ) -> None:
        loop = asyncio.get_running_loop()
        self.inbox = Inbox(eager)
        self.timeout_s = timeout_s
        self.request_id = uuid.uuid4().hex
        self.engine = prep.loaded.engine
        self.reqs: list[GenRequest] = []
        self.open: set[int] = set()  # choices whose last event has not come yet
        self.timer: asyncio.TimerHandle | None = None

        def emitter(index: int) -> Any:
            def emit(ev: TokenEvent) -> None:
                self.inbox.put((index, ev), last=ev.finish_reason is not None)

            return emit

        for i, p in enumerate(params):
            rid = self.request_id if len(params) == 1 else f"{self.request_id}-{i}"
            req = GenRequest(rid, prep.ids, p, emitter(i), adapter=prep.adapter)
            try:
                self.engine.submit(req)
            except QueueFull as exc:
                self.close()
                raise errors.overloaded(int(exc.args[0])) from exc
            except EngineUnavailable as exc:
                self.close()
                raise errors.unavailable(str(exc)) from exc
            self.reqs.append(req)
            self.open.add(i)
        self.timer = None if deadline is None else loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self.cancel()
        self.inbox.put_here(None)

    async def events(self) -> AsyncIterator[tuple[int, TokenEvent]]:
        """(choice, TokenEvent) until every choice's last; raises errors.timed_out past the deadline."""
        while self.open:
            for item in await self.inbox.take():
                if item is None:
                    raise errors.timed_out(self.timeout_s)
                index, ev = item
                if index not in self.open:
                    continue  # that choice was ended early (a stop string)
                if ev.finish_reason is not None:
                    self.open.discard(index)
                yield index, ev

    def end(self, index: int) -> None:
        """This choice is complete (its text hit a stop string): the engine drops its generation."""
        if index in self.open:
            self.open.discard(index)
            self.engine.cancel(self.reqs[index])

    def cancel(self) -> None:
        """The client is gone or the deadline passed: every running choice is dropped (they end with "abort")."""
        for i in self.open:
            self.engine.cancel(self.reqs[i])

    def close(self) -> None:
        """Done, failed or abandoned: the engine drops what still runs."""
        if self.timer is not None:
            self.timer.cancel()
        self.cancel()
        self.open.clear()


class Choice:
    """One choice's text (incremental, with stop strings), token ids and logprobs."""

    def __init__(self, index: int, prep: Prepared) -> None:
        self.index = index
        self.text = TextStream(prep.loaded.tokenizer, prep.body.stop_list(), lazy=not prep.body.stream)
        self.ids: list[int] = []
        self.pieces: list[str] = []
        self.finish = "stop"
        self.logprobs = None if prep.logprobs is None else LogprobFormat(prep.loaded.tokenizer, prep.chat)
        self.all_logprobs = None if self.logprobs is None else self.logprobs.empty()

    def push(self, ev: TokenEvent) -> tuple[str, str | None, dict[str, Any] | None]:
        """Take an event: (the text now safe to send, the finish reason if this choice is done, the event's
        logprobs in the reply shape)."""
        self.ids.extend(ev.token_ids)
        delta = self.text.push(ev.token_ids, ev.finish_reason is not None)
        self.pieces.append(delta)
        finish = "stop" if self.text.stopped else ev.finish_reason
        if finish is not None:
            self.finish = finish
        lps = None
        if self.logprobs is not None and self.all_logprobs is not None:
            lps = self.logprobs.extend(self.logprobs.empty(), ev.token_ids, ev.logprobs or [])
            for key, values in lps.items():
                self.all_logprobs[key].extend(values)
        return delta, finish, lps


async def _watch_disconnect(request: Request, sub: Submitted) -> None:
    """Non-streaming replies: the body is read, so the next ASGI message is the client going away."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            sub.cancel()
            return


def _params(prep: Prepared) -> list[SamplingParams]:
    """One SamplingParams per choice; with a seed, choice i samples with seed + i (distinct, reproducible)."""
    body = prep.body
    greedy = body.temperature < GREEDY_BELOW or body.top_p < TOP_P_GREEDY_BELOW
    temp = 0.0 if greedy else body.temperature
    return [
        SamplingParams(
            prep.max_tokens,
            temp,
            body.top_p,
            None if body.seed is None else body.seed + i,
            body.ignore_eos,
            body.presence_penalty,
            body.frequency_penalty,
            max(body.top_k, 0),
            body.min_p,
            prep.logprobs,
        )
        for i in range(prep.n)
    ]


async def generate(state: State, prep: Prepared, request: Request, started: float) -> Response:
    timeout = state.limits.request_timeout_s
    eager = prep.body.stream or bool(prep.body.stop_list())  # a whole reply without stop strings: the last events
    sub = Submitted(prep, _params(prep), started + timeout if timeout > 0 else None, timeout, eager)
    rid = ("chatcmpl-" if prep.chat else "cmpl-") + sub.request_id
    base = {"id": rid, "created": int(time.time()), "model": prep.body.model}
    if prep.body.stream:
        return StreamingResponse(_sse(sub, base, prep), media_type="text/event-stream")
    watcher = asyncio.create_task(_watch_disconnect(request, sub))
    try:
        return await _whole(sub, base, prep)
    finally:
        watcher.cancel()
        sub.close()


async def _whole(sub: Submitted, base: dict[str, Any], prep: Prepared) -> Response:
    choices = [Choice(i, prep) for i in range(prep.n)]
    async for i, ev in sub.events():
        if ev.error:
            raise errors.engine_error(ev.error)
        choices[i].push(ev)
        if choices[i].text.stopped:
            sub.end(i)
    out = []
    for c in choices:
        choice: dict[str, Any] = {"index": c.index, "finish_reason": c.finish, "logprobs": c.all_logprobs}
        if prep.chat:
            choice["message"] = {"role": "assistant", "content": "".join(c.pieces)}
        else:
            choice["text"] = "".join(c.pieces)
        if prep.body.return_token_ids:
            choice["token_ids"] = c.ids
        out.append(choice)
    n_prompt, n_out = len(prep.ids), sum(len(c.ids) for c in choices)
    usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}
    obj = "chat.completion" if prep.chat else "text_completion"
    return JSONResponse({**base, "object": obj, "choices": out, "usage": usage})


async def _sse(sub: Submitted, base: dict[str, Any], prep: Prepared) -> AsyncGenerator[bytes, None]:
    """Starlette cancels this generator when the client disconnects: `finally` then cancels the generation."""
    chat, body = prep.chat, prep.body
    obj = "chat.completion.chunk" if chat else "text_completion"
    choices = [Choice(i, prep) for i in range(prep.n)]

    def chunk(index: int, delta: str, finish: str | None, ids: Any, lps: Any, first: bool = False) -> bytes:
        choice: dict[str, Any] = {"index": index, "finish_reason": finish, "logprobs": lps}
        if chat:
            choice["delta"] = {"role": "assistant", "content": delta} if first else {"content": delta}
        else:
            choice["text"] = delta
        if body.return_token_ids and ids is not None:
            choice["token_ids"] = ids
        extra = {"usage": (tally() if continuous else None)} if usage else {}
        return f"data: {json.dumps({**base, 'object': obj, 'choices': [choice], **extra})}\n\n".encode()

    def tally() -> dict[str, int]:
        n_prompt, n_out = len(prep.ids), sum(len(c.ids) for c in choices)
        return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}

    options = body.stream_options
    usage = options is not None and options.include_usage
    continuous = usage and options is not None and options.continuous_usage_stats

    try:
        if chat:
            for c in choices:
                yield chunk(c.index, "", None, None, None, first=True)
        try:
            async for i, ev in sub.events():
                if ev.error:
                    yield f"data: {json.dumps(errors.engine_error(ev.error).body())}\n\n".encode()
                    break
                delta, finish, lps = choices[i].push(ev)
                if delta or ev.token_ids or finish:
                    yield chunk(i, delta, finish, ev.token_ids, lps)
                if choices[i].text.stopped:
                    sub.end(i)
        except errors.APIError as exc:  # the deadline passed mid-stream
            yield f"data: {json.dumps(exc.body())}\n\n".encode()
        if usage:  # stream_options.include_usage: a last chunk with no choices carries the usage
            yield f"data: {json.dumps({**base, 'object': obj, 'choices': [], 'usage': tally()})}\n\n".encode()
        yield b"data: [DONE]\n\n"
    finally:
        sub.close()
