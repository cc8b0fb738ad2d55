"""The OpenAI API as clients use it: what we do not implement is refused with 400 naming the parameter (never
silently ignored), every error has the OpenAI shape, no chat prompt format is invented, usage in streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

SHAPE = {"message", "type", "param", "code"}


@pytest.fixture(scope="module", params=["pytorch", "onnx"])
def bare(request: Any, models: dict[str, Path], start_server: Any) -> Any:
    """A server whose model has no chat template (and none given)."""
    model = models["tiny" if request.param == "pytorch" else "onnx"]
    return start_server(request.param, ["--model", str(model), "--served-model-name", "tiny"])


def _error(r: httpx.Response, status: int, code: str | None, param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == SHAPE and err["message"], err
    assert (err["code"], err["param"]) == (code, param), err
    return dict(err)


COMPLETIONS_REFUSED = [
    ("echo", True),
    ("logit_bias", {"5": 10}),
    ("best_of", 2),
    ("suffix", "end"),
    ("guided_json", {"type": "object"}),
]
CHAT_REFUSED = [
    ("response_format", {"type": "json_object"}),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
    ("tool_choice", "required"),
]


@pytest.mark.parametrize(("field", "value"), COMPLETIONS_REFUSED)
def test_unsupported_completion_fields_are_refused(bare: Any, field: str, value: Any) -> None:
    body = {"model": "tiny", "prompt": "the cat", "max_tokens": 2, field: value}
    err = _error(httpx.post(bare.url + "/v1/completions", json=body), 400, "unsupported_parameter", field)
    assert field in err["message"]


@pytest.mark.parametrize(("field", "value"), CHAT_REFUSED)
def test_unsupported_chat_fields_are_refused(bare: Any, field: str, value: Any) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], field: value}
    _error(httpx.post(bare.url + "/v1/chat/completions", json=body), 400, "unsupported_parameter", field)


def test_neutral_values_and_bookkeeping_fields_are_accepted(bare: Any) -> None:
    neutral = {
        "logprobs": None,
        "echo": False,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logit_bias": {},
        "best_of": 1,
        "user": "u-1",
        "metadata": {"k": "v"},
        "store": False,
    }
    body = {"model": "tiny", "prompt": "the cat", "max_tokens": 2, "temperature": 0, **neutral}
    assert httpx.post(bare.url + "/v1/completions", json=body, timeout=60).status_code == 200


def test_unknown_fields_are_refused(bare: Any) -> None:
    body = {"model": "tiny", "prompt": "the cat", "max_tokens": 2, "temprature": 0}
    err = _error(httpx.post(bare.url + "/v1/completions", json=body), 400, "unrecognized_parameter", "temprature")
    assert err["message"] == "Unrecognized request argument supplied: temprature"
    body = {"model": "tiny", "prompt": "x", "stream": True, "stream_options": {"include_usage": True, "foo": 1}}
    _error(httpx.post(bare.url + "/v1/completions", json=body), 400, "invalid_value", "stream_options.foo")


def test_non_text_content_parts_are_refused(bare: Any) -> None:
    parts = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    body = {"model": "tiny", "messages": [{"role": "user", "content": parts}]}
    _error(httpx.post(bare.url + "/v1/chat/completions", json=body), 400, "unsupported_parameter", "messages.0.content")


def test_no_invented_chat_template(bare: Any) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    err = _error(httpx.post(bare.url + "/v1/chat/completions", json=body), 400, "chat_template_missing", "messages")
    assert "--chat-template" in err["message"]


def test_every_error_is_openai_shaped(bare: Any) -> None:
    err = _error(httpx.post(bare.url + "/v1/nothing", json={}), 404, "not_found")
    assert err["message"] == "Invalid URL (POST /v1/nothing)"
    _error(httpx.get(bare.url + "/v2/models"), 404, "not_found")
    _error(httpx.get(bare.url + "/v1/completions"), 405, "method_not_allowed")
    _error(httpx.delete(bare.url + "/health"), 405, "method_not_allowed")


def test_stream_include_usage(bare: Any) -> None:
    body: dict[str, Any] = {"model": "tiny", "max_tokens": 7, "temperature": 0, "ignore_eos": True, "stream": True}
    body.update(stream_options={"include_usage": True}, prompt=[1, 5, 9, 12])
    with httpx.stream("POST", bare.url + "/v1/completions", json=body, timeout=60) as r:
        chunks = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 4, "completion_tokens": 7, "total_tokens": 11}
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}  # vLLM's (guidellm sends it)
    with httpx.stream("POST", bare.url + "/v1/completions", json=body, timeout=60) as r:
        running = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    counts = [c["usage"]["completion_tokens"] for c in running]
    assert counts == sorted(counts) and counts[-1] == 7 and running[-1]["choices"] == []
    assert all(c["usage"]["prompt_tokens"] == 4 for c in running)
    without = {k: v for k, v in body.items() if k != "stream_options"}
    with httpx.stream("POST", bare.url + "/v1/completions", json=without, timeout=60) as r:
        plain = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    assert all("usage" not in c for c in plain) and plain[-1]["choices"]
