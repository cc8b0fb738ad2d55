"""LoRA adapters loaded and unloaded while the runner serves: vLLM's two endpoints, with vLLM's request bodies, answers
and switch. vLLM 0.33.0: vllm/entrypoints/serve/lora/api_router.py mounts ``POST /v1/load_lora_adapter`` and
``POST /v1/unload_lora_adapter`` only when VLLM_ALLOW_RUNTIME_LORA_UPDATING is true (vllm/envs.py: "1" or "true",
any case); vllm/entrypoints/serve/lora/protocol.py the bodies ({"lora_name", "lora_path", "load_inplace"},
{"lora_name", "lora_int_id"}); vllm/entrypoints/openai/models/serving.py the answers (200 "Success: LoRA adapter
'NAME' added successfully." / "... removed successfully.", 400 for an empty name or path, the base model's name or a
name loaded already without load_inplace, 404 "The lora adapter 'NAME' cannot be found.").

A load runs on the engine thread between two steps (Scheduler.call) and the name is served once it is loaded. An
unload first stops serving the name (a new request for it gets 404), then waits until no queued or running request
uses it, then takes it out: a request that was admitted keeps its adapter to its end (vLLM too keeps serving the
requests it admitted). ``load_inplace`` replaces a served adapter's weights the same way, once nothing uses it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict

from inference_backend.runners.common import errors
from inference_backend.runners.common.state import State

ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
"""vLLM's switch, read the way vllm/envs.py reads it ("1" or "true", any case)."""


def enabled() -> bool:
    return os.environ.get(ENV, "0").strip().lower() in ("1", "true")


class LoadLoRAAdapterRequest(BaseModel):
    """vLLM's LoadLoRAAdapterRequest: lora_name, lora_path (a PEFT adapter directory on the pod), load_inplace (its
    is_3d_lora_weight is accepted and means nothing here)."""

    model_config = ConfigDict(extra="ignore")

    lora_name: str
    lora_path: str
    load_inplace: bool = False


class UnloadLoRAAdapterRequest(BaseModel):
    """vLLM's UnloadLoRAAdapterRequest: lora_name (its lora_int_id is accepted and not needed)."""

    model_config = ConfigDict(extra="ignore")

    lora_name: str
    lora_int_id: int | None = None


def _backend(state: State) -> tuple[Any, Any]:
    """(the scheduler, its backend) once the model is loaded, for a backend that serves adapters."""
    if state.loaded is None:
        raise errors.not_ready()
    engine = state.loaded.engine
    backend = getattr(engine, "backend", None)
    if not hasattr(backend, "load_adapter"):
        raise errors.bad_request("this runner serves no LoRA adapters")
    return engine, backend


def _invalid(message: str, param: str) -> errors.APIError:
    return errors.APIError(400, message, "InvalidUserInput", param)


async def load(state: State, body: LoadLoRAAdapterRequest) -> Response:
    name, path = body.lora_name, body.lora_path
    if not name or not path:
        raise _invalid("Both 'lora_name' and 'lora_path' must be provided.", "lora_name")
    if name == state.served_model_name:
        raise _invalid(f"The lora adapter '{name}' conflicts with a served base model.", "lora_name")
    inplace = body.load_inplace and name in state.adapters
    if name in state.adapters and not inplace:
        raise _invalid(
            f"The lora adapter '{name}' has already been loaded. If you want to load the adapter in place, set "
            "'load_inplace' to True.",
            "lora_name",
        )
    engine, backend = _backend(state)

    def swap() -> None:
        if inplace:
            backend.unload_adapter(name)
        backend.load_adapter(name, path)

    idle = (lambda: not engine.uses(lambda r: r.adapter == name)) if inplace else (lambda: True)
    try:
        await asyncio.wrap_future(engine.call(swap, when=idle))
    except ValueError as exc:  # AdapterError: the files, or a concurrent load of the same name
        if inplace:  # the old weights are out: the name is not served any more
            state.adapters = tuple(a for a in state.adapters if a != name)
        raise _invalid(str(exc), "lora_path") from exc
    state.roots[name] = path
    if not inplace:
        state.adapters = (*state.adapters, name)
    return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")


async def unload(state: State, body: UnloadLoRAAdapterRequest) -> Response:
    name = body.lora_name
    if not name:
        raise _invalid("'lora_name' needs to be provided to unload a LoRA adapter.", "lora_name")
    if name not in state.adapters:
        raise errors.APIError(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError", "lora_name")
    engine, backend = _backend(state)
    state.adapters = tuple(a for a in state.adapters if a != name)  # new requests for it: 404 from now on
    fut = engine.call(lambda: backend.unload_adapter(name), when=lambda: not engine.uses(lambda r: r.adapter == name))
    await asyncio.wrap_future(fut)
    state.roots.pop(name, None)
    return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")


def install(app: FastAPI, state: State) -> None:
    """The two endpoints, when VLLM_ALLOW_RUNTIME_LORA_UPDATING is true."""
    if not enabled():
        return

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(body: LoadLoRAAdapterRequest) -> Response:
        return await load(state, body)

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(body: UnloadLoRAAdapterRequest) -> Response:
        return await unload(state, body)
