"""OpenAI-style error bodies: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """An error answered to the client with an HTTP status and an OpenAI-style body."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def model_not_found(name: str) -> APIError:
    message = f"The model `{name}` does not exist."
    return APIError(404, message, "invalid_request_error", "model", "model_not_found")


def overloaded(max_queue: int) -> APIError:
    return APIError(
        429,
        f"Server is overloaded: {max_queue} requests already waiting. Retry later.",
        "rate_limit_error",
        None,
        "queue_full",
    )


def not_ready() -> APIError:
    return APIError(503, "Model is still loading.", "service_unavailable", None, "model_loading")
