"""The official `openai` Python client against both runners (PyTorch and ONNX Runtime) as clients use the API:
completions and chat, streaming with stream_options.include_usage, greedy tokens equal transformers' generate,
stop, seed, and what the runners do not implement (echo, best_of, tools, response_format) or bound (n,
top_logprobs) refused as the client's typed exceptions naming the parameter (issue 16 item 3). Logprobs, penalties
and n > 1 are tested in test_sampling_surface.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

MSG = [{"role": "user", "content": "hello model"}]


@pytest.fixture(scope="module", params=["pytorch", "onnx"])
def client(request: Any, models: dict[str, Path], start_server: Any, chat_template: Path) -> Any:
    model = models["tiny" if request.param == "pytorch" else "onnx"]
    args = ["--model", str(model), "--served-model-name", "tiny", "--chat-template", str(chat_template)]
    srv = start_server(request.param, args)
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_list(client: Any) -> None:
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_completions_greedy_and_streamed_with_usage(client: Any, reference: Any) -> None:
    prompt = [1, 5, 9, 14]
    want, _ = reference(prompt, 6)
    r = client.completions.create(
        model="tiny",
        prompt=prompt,
        max_tokens=6,
        temperature=0,
        extra_body={"ignore_eos": True, "return_token_ids": True},
    )
    assert r.choices[0].model_extra["token_ids"][: len(want)] == want
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (4, 6, 10)
    assert r.choices[0].finish_reason == "length"
    chunks = list(
        client.completions.create(
            model="tiny",
            prompt=prompt,
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    plain = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=3, temperature=0, stream=True))
    assert all(c.usage is None for c in plain) and plain[-1].choices[0].finish_reason is not None


def test_chat_and_streamed_chat_with_usage(client: Any) -> None:
    r = client.chat.completions.create(
        model="tiny", messages=MSG, max_tokens=5, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.choices[0].message.role == "assistant" and r.usage.completion_tokens == 5
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=MSG,
            max_completion_tokens=5,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens


def test_stop_ends_the_text_before_the_stop_string(client: Any) -> None:
    full = (
        client.completions.create(
            model="tiny", prompt="the cat", max_tokens=16, temperature=0, extra_body={"ignore_eos": True}
        )
        .choices[0]
        .text
    )
    # random weights give byte-level noise: stop at two whole characters from the middle of the text
    at = next(i for i in range(len(full) // 2, len(full) - 1) if "\ufffd" not in full[i : i + 2])
    stop = full[at : at + 2]
    r = client.completions.create(
        model="tiny",
        prompt="the cat",
        max_tokens=16,
        temperature=0,
        stop=[stop, "\x00"],
        extra_body={"ignore_eos": True},
    )
    assert r.choices[0].text == full[: full.index(stop)] and r.choices[0].finish_reason == "stop"
    streamed = client.completions.create(
        model="tiny",
        prompt="the cat",
        max_tokens=16,
        temperature=0,
        stop=stop,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == r.choices[0].text


def test_seed_makes_sampling_reproducible(client: Any) -> None:
    def sample(seed: int) -> str:
        r = client.completions.create(
            model="tiny", prompt="the", max_tokens=12, temperature=1.0, seed=seed, extra_body={"ignore_eos": True}
        )
        return str(r.choices[0].text)

    first = sample(7)
    assert sample(7) == first
    assert any(sample(s) != first for s in (8, 9, 10)), "the seed changes nothing"
    greedy = (
        client.completions.create(
            model="tiny", prompt="the", max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
        )
        .choices[0]
        .text
    )
    # a top_p below the top token's probability keeps that token alone (found by schemathesis: 5e-324 was a 500)
    tiny_p = (
        client.completions.create(
            model="tiny", prompt="the", max_tokens=12, temperature=1.0, top_p=5e-324, extra_body={"ignore_eos": True}
        )
        .choices[0]
        .text
    )
    assert tiny_p == greedy


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("completions", {"echo": True}, "echo"),
    ("completions", {"best_of": 2}, "best_of"),
    ("chat", {"top_logprobs": 2}, "top_logprobs"),
    ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("completions", {"logprobs": 21}, "logprobs"),
    ("chat", {"n": 17}, "n"),
    ("chat", {"presence_penalty": -2.5}, "presence_penalty"),
    ("chat", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
    ("chat", {"response_format": {"type": "json_object"}}, "response_format"),
]


@pytest.mark.parametrize(("api", "fields", "param"), REFUSED, ids=[f"{a}-{p}" for a, _, p in REFUSED])
def test_unimplemented_fields_are_typed_400s_naming_the_parameter(
    client: Any, api: str, fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        if api == "chat":
            client.chat.completions.create(model="tiny", messages=MSG, max_tokens=2, **fields)
        else:
            client.completions.create(model="tiny", prompt="a", max_tokens=2, **fields)
    assert e.value.status_code == 400 and e.value.param == param, e.value.body
    assert e.value.type == "invalid_request_error" and param in e.value.message


def test_neutral_values_of_unimplemented_fields_are_accepted(client: Any) -> None:
    r = client.chat.completions.create(
        model="tiny",
        messages=MSG,
        max_tokens=2,
        n=1,
        logprobs=False,
        presence_penalty=0,
        frequency_penalty=0.0,
        tools=[],
        response_format={"type": "text"},
        user="u1",
    )
    assert len(r.choices) == 1


def test_errors_are_typed(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="a", max_tokens=10**6)
    assert e.value.param == "max_tokens" and e.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError) as nf:
        client.completions.create(model="nope", prompt="a")
    assert (nf.value.code, nf.value.param) == ("model_not_found", "model")
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="nope", messages=MSG)
    assert nf.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as nf:  # a path we do not serve: GET /v1/models/{id}
        client.models.retrieve("tiny")
    assert nf.value.status_code == 404 and set(nf.value.body) == {"message", "type", "param", "code"}
    with pytest.raises(openai.NotFoundError) as nf:
        client.embeddings.create(model="tiny", input="a")
    assert nf.value.status_code == 404
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="a", temperature=3.5)
    assert e.value.param == "temperature"
