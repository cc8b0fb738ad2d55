"""The HTTP front of both runners: OpenAI completions and chat (SSE), /v1/models, /health, /metrics.

Request handling: common/prepare.py (body, validation, tokenization, off the event loop), common/generate.py
(engine submission, deadline, disconnects, replies). Limits: common/limits.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from inference_backend.runners.common import errors, lora_updates, openapi
from inference_backend.runners.common.generate import generate
from inference_backend.runners.common.limits import Limits
from inference_backend.runners.common.metrics import Metrics
from inference_backend.runners.common.prepare import prepare, read_body
from inference_backend.runners.common.scheduler import Scheduler
from inference_backend.runners.common.state import Loaded, State

__all__ = ["Loaded", "State", "build_app", "serve", "served_name", "start_scheduler"]
log = logging.getLogger(__name__)


def start_scheduler(
    backend: Any,
    args: Any,
    tokenizer: Any,
    *,
    kv_budget: int,
    max_model_len: int,
    eos_token_ids: set[int],
    metrics: Metrics,
    vocab_size: int = 0,
) -> Loaded:
    """The scheduler both runners put in front of their backend, configured from the shared flags, started."""
    if args.chat_template:
        tokenizer.chat_template = Path(args.chat_template).read_text()
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
    return Loaded(sched, tokenizer, max_model_len, vocab_size)


def served_name(args: Any) -> str:
    """--served-model-name, or the model directory's name."""
    return str(args.served_model_name or Path(args.model).name)


def _stop_engine(state: State) -> None:
    if state.loaded is not None:
        state.loaded.engine.shutdown()
    state.pool.shutdown(wait=False, cancel_futures=True)


def build_app(state: State) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        _stop_engine(state)  # after uvicorn's drain (--shutdown-timeout): nothing is left to serve

    app = FastAPI(title="inference-backend runner", docs_url=None, redoc_url=None, lifespan=lifespan)

    @app.exception_handler(errors.APIError)
    async def _api_error(_: Request, exc: errors.APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        where = f"{request.method} {request.url.path}"
        if exc.status_code == 404:
            err = errors.APIError(404, f"Invalid URL ({where})", "invalid_request_error", None, "not_found")
        elif exc.status_code == 405:
            err = errors.APIError(
                405, f"Method not allowed ({where})", "invalid_request_error", None, "method_not_allowed"
            )
        else:
            err = errors.APIError(exc.status_code, str(exc.detail), "invalid_request_error", None, None)
        return JSONResponse(err.body(), status_code=err.status, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(p) for p in first["loc"]) or None
        err = errors.APIError(422, f"{param}: {first['msg']}", "invalid_request_error", param, "invalid_value")
        return JSONResponse(err.body(), status_code=422)

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        err = errors.APIError(500, f"Internal server error: {exc}", "internal_error", None, "internal_error")
        return JSONResponse(err.body(), status_code=500)

    @app.get("/health")
    async def health() -> Response:
        if state.loaded is None:
            return JSONResponse({"status": "failed" if state.failed else "loading"}, status_code=503)
        engine = state.loaded.engine
        if not engine.alive():
            reason = engine.fatal or "the engine thread stopped"
            return JSONResponse({"status": "unhealthy", "reason": reason}, status_code=503)
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
        if root := state.roots.get(state.served_model_name):
            card["root"] = root
        # each LoRA adapter as a model of its own whose parent is the base model and root its directory (vLLM's
        # /v1/models shape: vllm/entrypoints/openai/models/serving.py show_available_models)
        adapters = [
            {**card, "id": name, "root": state.roots.get(name), "parent": state.served_model_name}
            for name in state.adapters
        ]
        return {"object": "list", "data": [card, *adapters]}

    async def handle(request: Request, chat: bool) -> Response:
        started = asyncio.get_running_loop().time()
        raw = await read_body(request, state.limits.max_body_bytes)
        prep = await asyncio.get_running_loop().run_in_executor(state.pool, prepare, raw, chat, state)
        return await generate(state, prep, request, started)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await handle(request, chat=True)

    lora_updates.install(app, state)
    openapi.install(app)
    return app


def serve(args: Any, load: Callable[[Metrics], Loaded], served_model_name: str, metrics: Metrics | None = None) -> int:
    """Listen at once (health 503), load the model in a thread, serve until stopped. Returns an exit code.

    SIGTERM: uvicorn stops accepting, waits up to --shutdown-timeout for running requests, cancels what is left
    (their generations are cancelled with them), the engine thread is stopped (lifespan shutdown), and uvicorn
    re-raises the signal: the exit status is that of SIGTERM (143 in a shell).
    """
    import uvicorn

    metrics = metrics or Metrics(served_model_name)
    limits = Limits.from_args(args)
    given = tuple(getattr(args, "adapter", None) or ())
    roots = {served_model_name: str(args.model), **dict(given)}
    state = State(served_model_name, metrics, tuple(name for name, _ in given), roots, limits)
    config = uvicorn.Config(
        build_app(state),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=int(limits.shutdown_timeout_s + 0.999),
    )
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
    _stop_engine(state)
    return 1 if state.failed else 0
