"""The runners' OpenAPI document (GET /openapi.json) as the endpoints behave, for clients and schema fuzzers.

The POST endpoints read their body themselves (size limit, tokenization off the event loop), so FastAPI cannot
see their request models: this adds them (protocol.py's pydantic models), the OpenAI-shaped error responses every
endpoint can give, and /metrics' Prometheus text format.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from inference_backend.runners.common.openai_fields import IGNORED
from inference_backend.runners.common.protocol import ChatCompletionRequest, CompletionRequest

REF = "#/components/schemas/{model}"
ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
POST_ERRORS = {
    "400": "invalid request",
    "404": "unknown model",
    "413": "body too large",
    "429": "queue full",
    "500": "the request failed in the engine",
    "503": "not loaded or engine stopped",
    "504": "deadline passed",
}


def _error_response(what: str) -> dict[str, Any]:
    return {"description": what, "content": {"application/json": {"schema": {"$ref": REF.format(model="Error")}}}}


def _one_prompt(prompt: dict[str, Any]) -> None:
    """Token ids are >= 0; a batch of prompts (list of strings or of id lists) may hold one (prepare.py)."""
    for branch in prompt["anyOf"]:
        items = branch.get("items", {})
        if items.get("type") == "integer":
            items["minimum"] = 0
        elif items.get("type") in ("string", "array"):
            branch["maxItems"] = 1
            items.get("items", {}).update({"minimum": 0} if items.get("type") == "array" else {})


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        cached: dict[str, Any] | None = app.openapi_schema
        if cached:
            return cached
        doc: dict[str, Any] = get_openapi(title=app.title, version=app.version, routes=app.routes)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        schemas["Error"] = ERROR
        for path, model in (("/v1/completions", CompletionRequest), ("/v1/chat/completions", ChatCompletionRequest)):
            schema = model.model_json_schema(ref_template=REF)
            schemas.update(schema.pop("$defs", {}))
            # the models allow extra fields only for openai_fields.check to refuse them (400), except these
            schema["additionalProperties"] = False
            schema["properties"].update({name: {"description": "accepted and ignored"} for name in sorted(IGNORED)})
            if model is CompletionRequest:
                _one_prompt(schema["properties"]["prompt"])
            schemas[model.__name__] = schema
            op = doc["paths"][path]["post"]
            ref = {"$ref": REF.format(model=model.__name__)}
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref}}}
            op["responses"] = {
                "200": {
                    "description": "the completion (JSON, or text/event-stream with stream)",
                    "content": {
                        "application/json": {"schema": {"type": "object"}},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                **{code: _error_response(what) for code, what in POST_ERRORS.items()},
            }
        doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"] = {"text/plain": {"schema": {"type": "string"}}}
        health = doc["paths"]["/health"]["get"]["responses"]
        health["503"] = {
            "description": "loading, failed or unhealthy",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
