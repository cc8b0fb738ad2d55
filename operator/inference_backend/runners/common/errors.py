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


def context_exceeded(message: str, param: str) -> APIError:
    return APIError(400, message, "invalid_request_error", param, "context_length_exceeded")


def too_large(limit: int) -> APIError:
    return APIError(
        413,
        f"The request body is larger than {limit} bytes (--max-body-bytes).",
        "invalid_request_error",
        None,
        "request_too_large",
    )


def client_gone() -> APIError:
    return APIError(499, "The client closed the connection.", "invalid_request_error", None, "client_closed")


def timed_out(seconds: float) -> APIError:
    return APIError(
        504,
        f"The request did not finish within {seconds:g} s (--request-timeout); its generation was cancelled.",
        "timeout_error",
        None,
        "request_timeout",
    )


def unavailable(reason: str) -> APIError:
    return APIError(503, f"The engine is not serving: {reason}", "service_unavailable", None, "engine_unavailable")


def engine_error(message: str) -> APIError:
    return APIError(500, message, "internal_error", None, "engine_error")
