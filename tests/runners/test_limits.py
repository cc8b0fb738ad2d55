"""Request limits (each a flag, docs/runners.md) answered with OpenAI-shaped errors; the event loop stays free
while big bodies are handled; deadlines, client disconnects and SIGTERM cancel generations."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ib_testkit.runners import SERVERS, complete, metric

# Static batching that waits for 16 requests for ten minutes: a lone request stays queued (deterministically).
PARKED = ["--batching", "static", "--max-batch-size", "16", "--max-wait-ms", "600000"]


def _error(r: httpx.Response, status: int, code: str | None, param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["message"] and err["param"] == param, err
    return dict(err)


def _until(check: Any, what: str, timeout: float = 60.0) -> None:
    """Poll until check() holds (a wait, not a speed assertion: the bound only stops a hung test)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


def _flags(model: Path, *extra: str) -> list[str]:
    return ["--model", str(model), "--served-model-name", "tiny", *extra]


@pytest.fixture(scope="module", params=list(SERVERS))
def limited(request: Any, models: dict[str, Path], start_server: Any, chat_template: Path) -> Any:
    kind, key = SERVERS[request.param]
    model = models[key]
    extra = ["--max-body-bytes", "20000", "--max-stop-sequences", "3", "--max-stop-chars", "10"]
    extra += ["--chat-template", str(chat_template)]
    extra += ["--max-n", "2", "--max-logprobs", "1"]
    return start_server(kind, _flags(model, *extra, "--max-messages", "3", "--max-model-len", "64"))


def test_body_size_limit(limited: Any) -> None:
    url = limited.url + "/v1/completions"
    big = json.dumps({"model": "tiny", "prompt": "the cat " * 3000, "max_tokens": 2}).encode()
    _error(httpx.post(url, content=big, headers={"content-type": "application/json"}), 413, "request_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while reading
        for i in range(0, len(big), 4096):
            yield big[i : i + 4096]

    _error(httpx.post(url, content=chunks(), headers={"content-type": "application/json"}), 413, "request_too_large")
    with httpx.Client() as c:  # just under the limit is served
        assert complete(c, limited.url, "the cat " * 5, 2)["usage"]["completion_tokens"] >= 1


def test_context_length_with_and_without_max_tokens(limited: Any) -> None:
    url = limited.url + "/v1/completions"
    base = {"model": "tiny", "temperature": 0, "ignore_eos": True}
    err = _error(httpx.post(url, json={**base, "prompt": [5] * 64}), 400, "context_length_exceeded", "prompt")
    assert "64 tokens" in err["message"]
    _error(
        httpx.post(url, json={**base, "prompt": [5] * 70, "max_tokens": 1}), 400, "context_length_exceeded", "prompt"
    )
    _error(
        httpx.post(url, json={**base, "prompt": [5] * 60, "max_tokens": 5}),
        400,
        "context_length_exceeded",
        "max_tokens",
    )
    r = httpx.post(url, json={**base, "prompt": [5] * 60}, timeout=60)  # no max_tokens: what the context leaves
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "the cat " * 100}]}
    _error(httpx.post(limited.url + "/v1/chat/completions", json=chat), 400, "context_length_exceeded", "messages")


def test_stop_seed_n_logprobs_messages_bounds(limited: Any) -> None:
    url = limited.url + "/v1/completions"
    base = {"model": "tiny", "prompt": "the cat", "max_tokens": 3}
    _error(httpx.post(url, json={**base, "stop": ["a", "b", "c", "d"]}), 400, "invalid_value", "stop")
    _error(httpx.post(url, json={**base, "stop": "x" * 11}), 400, "invalid_value", "stop")
    assert httpx.post(url, json={**base, "stop": ["a", "b", "xxxxxxxxxx"]}, timeout=60).status_code == 200
    _error(httpx.post(url, json={**base, "seed": 2**70}), 400, "invalid_value", "seed")
    _error(httpx.post(url, json={**base, "seed": -(2**63) - 1}), 400, "invalid_value", "seed")
    for seed in (-1, 2**64 - 1):  # the whole 64-bit range samples, reproducibly
        once = [httpx.post(url, json={**base, "seed": seed, "temperature": 1}, timeout=60) for _ in range(2)]
        assert [r.status_code for r in once] == [200, 200], once[0].text
        assert once[0].json()["choices"][0]["text"] == once[1].json()["choices"][0]["text"]
    err = _error(httpx.post(url, json={**base, "n": 3}), 400, "invalid_value", "n")
    assert "--max-n" in err["message"]
    assert len(httpx.post(url, json={**base, "n": 2}, timeout=60).json()["choices"]) == 2
    _error(httpx.post(url, json={**base, "logprobs": 2}), 400, "invalid_value", "logprobs")
    assert httpx.post(url, json={**base, "logprobs": 1}, timeout=60).json()["choices"][0]["logprobs"]["tokens"]
    chat_lp = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 2}
    _error(httpx.post(limited.url + "/v1/chat/completions", json=chat_lp), 400, "invalid_value", "top_logprobs")
    msgs = [{"role": "user", "content": "hi"}] * 4
    chat = limited.url + "/v1/chat/completions"
    _error(httpx.post(chat, json={"model": "tiny", "messages": msgs}), 400, "invalid_value", "messages")


def test_tiny_temperature_is_greedy(limited: Any) -> None:
    with httpx.Client() as c:
        greedy = complete(c, limited.url, "the red fox", 8, ignore_eos=True)["choices"][0]["token_ids"]
        tiny = complete(c, limited.url, "the red fox", 8, ignore_eos=True, temperature=1e-300)
    assert tiny["choices"][0]["token_ids"] == greedy


def test_health_answers_while_a_huge_body_is_handled(models: dict[str, Path], start_server: Any) -> None:
    srv = start_server("pytorch", _flags(models["tiny"]))  # default --max-body-bytes (8 MiB)
    body = json.dumps({"model": "tiny", "prompt": "the red fox and the cat. " * 300_000}).encode()  # 7.5 MB
    health: list[int] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            health.append(httpx.get(srv.url + "/health", timeout=5).status_code)  # a liveness probe's patience
            time.sleep(0.05)

    t = threading.Thread(target=probe)
    t.start()
    try:
        r = httpx.post(
            srv.url + "/v1/completions", content=body, headers={"content-type": "application/json"}, timeout=120
        )
    finally:
        done.set()
        t.join()
    _error(r, 400, "context_length_exceeded", "prompt")
    assert health and set(health) == {200}


def test_deadline_cancels(models: dict[str, Path], start_server: Any) -> None:
    srv = start_server("pytorch", _flags(models["tiny"], *PARKED, "--request-timeout", "1"))
    body = {"model": "tiny", "prompt": "the cat", "max_tokens": 4}
    _error(httpx.post(srv.url + "/v1/completions", json=body, timeout=60), 504, "request_timeout")
    with httpx.stream("POST", srv.url + "/v1/completions", json={**body, "stream": True}, timeout=60) as r:
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert json.loads(lines[0][6:])["error"]["code"] == "request_timeout" and lines[-1] == "data: [DONE]"
    _until(lambda: metric(srv.url, "vllm:num_requests_waiting") == 0, "the timed-out requests leave the queue")
    assert metric(srv.url, "vllm:request_success_total", finished_reason="abort") == 2


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_disconnect_while_queued_cancels(stream: bool, models: dict[str, Path], start_server: Any) -> None:
    srv = start_server("pytorch", _flags(models["tiny"], *PARKED))
    body = {"model": "tiny", "prompt": "the cat", "max_tokens": 4, "stream": stream}
    url = srv.url + "/v1/completions"
    with pytest.raises(httpx.ReadTimeout), httpx.stream("POST", url, json=body, timeout=1.5) as r:
        r.read()  # whole: no reply while queued; stream: nothing after the headers
    _until(lambda: metric(srv.url, "vllm:num_requests_waiting") == 0, "the abandoned request leaves the queue")
    assert metric(srv.url, "vllm:request_success_total", finished_reason="abort") == 1


@pytest.mark.parametrize("n", [1, 3])
def test_disconnect_mid_stream_stops_generation(n: int, models: dict[str, Path], start_server: Any) -> None:
    srv = start_server("pytorch", _flags(models["tiny"], "--threads", "1"))
    body = {"model": "tiny", "prompt": "the cat", "max_tokens": 500, "stream": True, "ignore_eos": True, "n": n}
    with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if '"text"' in line:
                break  # the first tokens arrived: hang up
    _until(lambda: metric(srv.url, "vllm:num_requests_running") == 0, "the generation stops")
    assert metric(srv.url, "vllm:request_success_total", finished_reason="abort") == n  # every choice
    assert metric(srv.url, "vllm:generation_tokens_total") < 500 * n


def test_sigterm_drains_then_cancels(models: dict[str, Path], start_server: Any) -> None:
    # A running stream finishes within --shutdown-timeout; a request that cannot finish is cut at the deadline.
    srv = start_server("pytorch", _flags(models["tiny"], "--shutdown-timeout", "30"))
    body = {"model": "tiny", "prompt": "the cat", "max_tokens": 60, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=120) as r:
        it = r.iter_lines()
        first = next(ln for ln in it if ln.startswith("data: "))
        srv.proc.send_signal(signal.SIGTERM)
        rest = [ln for ln in it if ln.startswith("data: ")]
    chunks = [json.loads(ln[6:]) for ln in [first, *rest[:-1]]]
    assert rest[-1] == "data: [DONE]" and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert srv.proc.wait(timeout=60) in (0, -signal.SIGTERM)

    parked = start_server("pytorch", _flags(models["tiny"], *PARKED, "--shutdown-timeout", "1"))
    outcome: list[Any] = []

    def send() -> None:
        try:
            outcome.append(httpx.post(parked.url + "/v1/completions", json={**body, "stream": False}, timeout=120))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    t = threading.Thread(target=send)
    t.start()
    _until(lambda: metric(parked.url, "vllm:num_requests_waiting") == 1, "the request is queued")
    parked.proc.send_signal(signal.SIGTERM)
    assert parked.proc.wait(timeout=60) in (0, -signal.SIGTERM)  # not the ten minutes the batch would wait
    t.join(timeout=60)
    assert outcome and not (isinstance(outcome[0], httpx.Response) and outcome[0].status_code == 200)
    assert "timeout graceful shutdown exceeded" in parked.log.read_text()
