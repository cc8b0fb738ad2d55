"""The HTTP front: OpenAI errors, SSE streaming, /v1/models, /health, /metrics, queue overflow."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from ib_testkit.chat import CHAT_TEMPLATE
from ib_testkit.runners import SERVERS, complete

VLLM_SUFFIXES = (
    "time_to_first_token_seconds_bucket",
    "e2e_request_latency_seconds_bucket",
    "inter_token_latency_seconds_bucket",
    "request_time_per_output_token_seconds_bucket",
    "prompt_tokens_total",
    "generation_tokens_total",
    "num_requests_running",
    "num_requests_waiting",
    "kv_cache_usage_perc",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
)


@pytest.fixture(scope="module", params=list(SERVERS))
def server(request: Any, models: dict[str, Path], start_server: Any, chat_template: Path) -> Any:
    kind, key = SERVERS[request.param]
    args = ["--model", str(models[key]), "--served-model-name", "tiny", "--chat-template", str(chat_template)]
    return start_server(kind, args)


def _error(r: httpx.Response, status: int, code: str | None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["message"]
    return dict(err)


def test_openai_errors(server: Any) -> None:
    url = server.url + "/v1/completions"
    _error(httpx.post(url, json={"model": "nope", "prompt": "a"}), 404, "model_not_found")
    err = _error(
        httpx.post(url, json={"model": "tiny", "prompt": "a", "max_tokens": 10**6}),
        400,
        "context_length_exceeded",
    )
    assert err["param"] == "max_tokens"
    _error(
        httpx.post(url, content=b'{"model": "tiny",', headers={"content-type": "application/json"}),
        400,
        "invalid_json",
    )
    err = _error(httpx.post(url, json={"model": "tiny", "prompt": "a", "temperature": -1}), 400, "invalid_value")
    assert err["param"] == "temperature"
    _error(httpx.post(url, json={"model": "tiny"}), 400, "invalid_value")
    chat = server.url + "/v1/chat/completions"
    _error(httpx.post(chat, json={"model": "tiny", "messages": []}), 400, "invalid_value")


def test_models_health_metrics(server: Any) -> None:
    models = httpx.get(server.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert httpx.get(server.url + "/health").status_code == 200
    with httpx.Client() as c:
        complete(c, server.url, "the cat and the dog", 5)
    text = httpx.get(server.url + "/metrics").text
    for suffix in VLLM_SUFFIXES:  # vLLM's names, labelled model_name as vLLM's are
        assert f'vllm:{suffix}{{model_name="tiny"' in text or f"vllm:{suffix}{{le=" in text, suffix
    series = [ln.split("{")[0].split(" ")[0] for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert not [n for n in series if n.endswith("_created")]  # vLLM exposes none
    assert {n.split(":")[0] for n in series} <= {"vllm", "ib"} and all(
        n.startswith("ib:gpu_memory_") for n in series if n.startswith("ib:")
    )
    # buckets long enough for CPU generations (vLLM's: TTFT to 2560 s, e2e to 7680 s, inter-token to 80 s)
    for name, top in (
        ("time_to_first_token", "2560.0"),
        ("e2e_request_latency", "7680.0"),
        ("inter_token_latency", "80.0"),
    ):
        assert f'vllm:{name}_seconds_bucket{{le="{top}",model_name="tiny"}}' in text, name


def test_streaming_equals_non_streaming(server: Any) -> None:
    with httpx.Client() as c:
        whole = complete(c, server.url, "the red fox", 12, ignore_eos=True)["choices"][0]
        ids, text, finish = [], "", None
        body = {"model": "tiny", "prompt": "the red fox", "max_tokens": 12, "temperature": 0, "stream": True}
        body.update(return_token_ids=True, ignore_eos=True)
        with c.stream("POST", server.url + "/v1/completions", json=body) as r:
            lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        for ln in lines[:-1]:
            choice = json.loads(ln[6:])["choices"][0]
            ids += choice.get("token_ids", [])
            text += choice["text"]
            finish = choice["finish_reason"] or finish
    assert ids == whole["token_ids"] and len(ids) == 12
    assert text == whole["text"] and finish == "length"


def test_chat_uses_the_template_file(server: Any, models: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(models["tiny"])
    msgs = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "the cat"}]
    body = {"model": "tiny", "messages": msgs, "max_tokens": 2, "temperature": 0}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    expected = tok.encode(
        tok.apply_chat_template(msgs, chat_template=CHAT_TEMPLATE, tokenize=False, add_generation_prompt=True),
        add_special_tokens=False,
    )
    assert r.json()["usage"]["prompt_tokens"] == len(expected)
    refused = {**body, "messages": [{"role": "system", "content": "be brief"}, *msgs]}
    r = httpx.post(server.url + "/v1/chat/completions", json=refused, timeout=60)
    assert r.status_code == 400 and "no system messages here" in r.json()["error"]["message"], r.text
    assert r.json()["error"]["param"] == "messages"


def test_chat_streaming(server: Any) -> None:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 6,
        "temperature": 0,
    }
    whole = httpx.post(server.url + "/v1/chat/completions", json={**body, "ignore_eos": True}).json()
    assert whole["object"] == "chat.completion"
    content = whole["choices"][0]["message"]["content"]
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", json={**body, "stream": True, "ignore_eos": True}
    ) as r:
        chunks = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == content
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    usage = {**body, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=usage) as r:
        last = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")][-1]
    assert last["choices"] == [] and last["usage"] == whole["usage"]


def test_stop_string(server: Any) -> None:
    with httpx.Client() as c:
        full = complete(c, server.url, "the blue bird", 30, ignore_eos=True)["choices"][0]["text"]
        stop = full[5:8]
        if not stop.strip():
            pytest.skip("generated text has no usable stop string")  # deterministic model: never happens
        cut = complete(c, server.url, "the blue bird", 30, ignore_eos=True, stop=stop)["choices"][0]
    assert cut["text"] == full[: full.index(stop)] and cut["finish_reason"] == "stop"


def test_queue_overflow_answers_429(models: dict[str, Path], start_server: Any) -> None:
    args = [
        "--model",
        str(models["tiny"]),
        "--served-model-name",
        "tiny",
        "--max-batch-size",
        "1",
        "--max-queue",
        "2",
    ]
    srv = start_server("pytorch", args)
    body = {"model": "tiny", "prompt": "a b c", "max_tokens": 200, "temperature": 0, "ignore_eos": True}
    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(lambda _: httpx.post(srv.url + "/v1/completions", json=body, timeout=120), range(10)))
    statuses = sorted(r.status_code for r in codes)
    assert 200 in statuses and 429 in statuses and set(statuses) <= {200, 429}
    for r in codes:
        if r.status_code == 429:
            assert r.json()["error"]["code"] == "queue_full"


def test_health_503_while_loading() -> None:
    from fastapi.testclient import TestClient
    from inference_backend.runners.common.metrics import Metrics
    from inference_backend.runners.common.server import State, build_app

    state = State("tiny", Metrics("tiny"))
    client = TestClient(build_app(state))
    assert client.get("/health").status_code == 503
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "a"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_loading"


def test_openapi_document_describes_the_bodies_and_errors(server: Any) -> None:
    """What schema fuzzers (schemathesis) read: the request models and the OpenAI-shaped error responses."""
    doc = httpx.get(server.url + "/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for path, field in (("/v1/completions", "prompt"), ("/v1/chat/completions", "messages")):
        op = doc["paths"][path]["post"]
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        body = schemas[ref.rsplit("/", 1)[1]]
        assert field in body["properties"], path
        # what the server accepts: its fields and the ignored OpenAI ones, nothing else (the rest is a 400)
        assert body["additionalProperties"] is False and "user" in body["properties"], path
        for code in ("400", "404", "413", "429", "500", "503", "504"):
            assert op["responses"][code]["content"]["application/json"]["schema"]["$ref"].endswith("/Error")
    assert set(schemas["Error"]["properties"]["error"]["required"]) == {"message", "type", "param", "code"}
    assert "text/plain" in doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    prompt = schemas["CompletionRequest"]["properties"]["prompt"]["anyOf"]
    assert [b.get("maxItems") for b in prompt] == [None, None, 1, 1]  # one prompt per request
