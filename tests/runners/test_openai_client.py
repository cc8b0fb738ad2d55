"""The official `openai` Python client against the PyTorch runner: completions and chat, streaming with usage,
greedy tokens equal transformers' generate, and our errors surface as the client's typed exceptions with the
parameter named (issue 16 item 3). Skips where the client is not installed (it is not in the runners venv yet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client(models: dict[str, Path], start_server: Any, chat_template: Path) -> Any:
    args = ["--model", str(models["tiny"]), "--served-model-name", "tiny", "--chat-template", str(chat_template)]
    srv = start_server("pytorch", args)
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_completions_greedy_and_streamed(client: Any, reference: Any) -> None:
    prompt = [1, 5, 9, 14]
    want, _ = reference(prompt, 6)
    r = client.completions.create(model="tiny", prompt=prompt, max_tokens=6, temperature=0,
                                  extra_body={"ignore_eos": True, "return_token_ids": True})  # fmt: skip
    assert r.choices[0].model_extra["token_ids"][: len(want)] == want
    assert r.usage.prompt_tokens == 4 and r.usage.completion_tokens == 6
    chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=6, temperature=0, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True}))  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6


def test_chat(client: Any) -> None:
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert r.choices[0].message.role == "assistant" and r.usage.completion_tokens >= 1


def test_errors_are_typed_and_name_the_parameter(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="a", max_tokens=10**6)
    assert e.value.param == "max_tokens" and e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                       tools=[{"type": "function", "function": {"name": "f"}}])  # fmt: skip
    assert e.value.param == "tools"
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="nope", prompt="a")
    assert e.value.code == "model_not_found"
