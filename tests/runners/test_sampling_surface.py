"""What the runners implement of OpenAI's sampling surface (issue 16 item 3), checked against transformers on the
same weights, over HTTP, on the PyTorch runner (with a draft model configured: such requests must not go
speculative), our ONNX export and an onnxruntime-genai model:

- logprobs (completions) and logprobs + top_logprobs (chat): the chosen token's logprob and the top alternatives
  equal log_softmax of transformers' logits at each generated position; streamed chunks carry the same;
- presence and frequency penalties: greedy tokens equal a reference greedy loop applying OpenAI's formula
  (logit -= frequency * count + presence * (count > 0), over generated tokens), while plain greedy requests in the
  same batch still get exactly their reference tokens;
- top_k and min_p (vLLM's): every sampled token is among the k likeliest / at least min_p x the likeliest one's
  probability (top_k 1 and min_p 1 are greedy);
- n > 1: n choices, indices 0..n-1, choice i equal to the same request with n = 1 and seed + i, usage summed,
  streamed choices equal the whole ones.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from ib_testkit.chat import CHAT_TEMPLATE
from ib_testkit.runners import SERVERS, complete

SERVED = [
    pytest.param(("pytorch", ["--batching", "continuous"]), id="pytorch-continuous-draft"),
    pytest.param(("onnx", ["--batching", "dynamic", "--max-wait-ms", "200"]), id="onnx-dynamic"),
    pytest.param(
        ("onnx-genai", ["--batching", "continuous", "--enable-prefix-caching"]), id="onnx-genai-ort-continuous"
    ),
    pytest.param(
        ("onnx-genai", ["--batching", "dynamic", "--max-wait-ms", "200", "--genai-runtime", "genai"]),
        id="onnx-genai-generator-dynamic",
    ),
]
PROMPT = [1, 17, 40, 33, 90, 7]
MSG = [{"role": "user", "content": "hello model"}]
ATOL = 2e-3


@pytest.fixture(scope="module", params=SERVED)
def server(request: Any, models: dict[str, Path], start_server: Any, chat_template: Path) -> Any:
    kind, flags = request.param
    runner, model = SERVERS[kind]
    args = ["--model", str(models[model]), "--served-model-name", "tiny", "--chat-template", str(chat_template)]
    if kind == "pytorch":
        args += ["--draft-model", str(models["draft"])]
    return start_server(runner, [*args, *flags])


@pytest.fixture(scope="module")
def hf(models: dict[str, Path]) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(models["tiny"], dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(models["tiny"])


def _logprobs(hf: Any, ids: list[int], start: int) -> Any:
    """log_softmax of the model's logits predicting ids[start:], as a [len(ids) - start, vocab] tensor."""
    import torch

    with torch.inference_mode():
        logits = hf[0](torch.tensor([ids])).logits[0, start - 1 : len(ids) - 1]
    return torch.log_softmax(logits.float(), dim=-1)


def _penalized_greedy(hf: Any, prompt: list[int], n: int, presence: float, frequency: float) -> list[int]:
    import torch

    ids, counts = list(prompt), torch.zeros(hf[0].config.vocab_size)
    for _ in range(n):
        with torch.inference_mode():
            logits = hf[0](torch.tensor([ids])).logits[0, -1].float()
        tok = int(torch.argmax(logits - frequency * counts - presence * (counts > 0)))
        counts[tok] += 1
        ids.append(tok)
    return ids[len(prompt) :]


def _post(srv: Any, path: str, body: dict[str, Any]) -> Any:
    r = httpx.post(srv.url + path, json={"model": "tiny", **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_completion_logprobs_equal_transformers(server: Any, hf: Any) -> None:
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    choice = _post(server, "/v1/completions", {**body, "logprobs": 3})["choices"][0]
    ids, lp = choice["token_ids"], choice["logprobs"]
    assert len(ids) == 8 and len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 8
    ref = _logprobs(hf, PROMPT + ids, len(PROMPT))
    tok = hf[1]
    for i, tid in enumerate(ids):
        assert lp["token_logprobs"][i] == pytest.approx(float(ref[i, tid]), abs=ATOL)
        assert lp["tokens"][i] == tok.decode([tid])
        values, top_ids = ref[i].topk(3)
        want: dict[str, float] = {}
        for t, v in zip([*top_ids.tolist(), tid], [*values.tolist(), float(ref[i, tid])], strict=True):
            want.setdefault(tok.decode([t]), v)  # the legacy shape is keyed by text: the likelier token stays
        assert lp["top_logprobs"][i] == pytest.approx(want, abs=ATOL)
        assert lp["token_logprobs"][i] == pytest.approx(values[0].item(), abs=ATOL)  # greedy: the chosen is the top
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(8)]
    if "\ufffd" not in choice["text"]:  # a byte-level token alone may be part of a character
        assert "".join(lp["tokens"]) == choice["text"]
    plain = _post(server, "/v1/completions", body)["choices"][0]
    assert plain["token_ids"] == ids and plain["logprobs"] is None  # asking for logprobs changes no token


def test_sampled_logprobs_are_those_of_the_sampled_tokens(server: Any, hf: Any) -> None:
    body = {
        "prompt": PROMPT,
        "max_tokens": 10,
        "temperature": 1.3,
        "seed": 11,
        "ignore_eos": True,
        "return_token_ids": True,
        "logprobs": 0,
    }
    choice = _post(server, "/v1/completions", body)["choices"][0]
    ids, lp = choice["token_ids"], choice["logprobs"]
    ref = _logprobs(hf, PROMPT + ids, len(PROMPT))
    assert lp["token_logprobs"] == pytest.approx([float(ref[i, t]) for i, t in enumerate(ids)], abs=ATOL)
    assert all(list(d) == [lp["tokens"][i]] for i, d in enumerate(lp["top_logprobs"]))  # logprobs 0: itself only


def test_top_k_and_min_p_keep_the_sampled_tokens_among_the_likeliest(server: Any, hf: Any) -> None:
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 2.0, "ignore_eos": True, "return_token_ids": True}
    for extra, check in [
        ({"top_k": 3}, "top3"),
        ({"min_p": 0.3}, "min_p"),
        ({"top_k": 1}, "greedy"),
        ({"min_p": 1.0}, "greedy"),
    ]:
        for seed in (1, 2):
            ids = _post(server, "/v1/completions", {**body, **extra, "seed": seed})["choices"][0]["token_ids"]
            probs = (_logprobs(hf, PROMPT + ids, len(PROMPT)) / 2.0).softmax(-1)  # at temperature 2, as sampled
            for i, t in enumerate(ids):  # each token, given the (sampled) tokens before it
                if check == "top3":
                    assert t in probs[i].topk(3).indices.tolist(), (extra, i)
                elif check == "min_p":
                    assert probs[i, t] >= 0.3 * probs[i].max() - 1e-4, (extra, i)
                else:
                    assert t == int(probs[i].argmax()), (extra, i)
    wide = {_post(server, "/v1/completions", {**body, "seed": s})["choices"][0]["text"] for s in (1, 2, 3)}
    assert len(wide) > 1, "plain sampling at temperature 2 should vary with the seed"


def test_chat_logprobs_with_the_official_client_streamed_and_whole(server: Any, hf: Any) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    kw: dict[str, Any] = {
        "model": "tiny",
        "messages": MSG,
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
        "extra_body": {"ignore_eos": True, "return_token_ids": True},
    }
    r = client.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    ids = r.choices[0].model_extra["token_ids"]
    assert len(content) == r.usage.completion_tokens == 6
    text = hf[1].apply_chat_template(MSG, chat_template=CHAT_TEMPLATE, tokenize=False, add_generation_prompt=True)
    prompt = hf[1].encode(text, add_special_tokens=False)  # as the server does (common/prepare.py)
    assert r.usage.prompt_tokens == len(prompt)
    for entry, tid in zip(content, ids, strict=True):
        assert entry.token == hf[1].decode([tid]) and entry.bytes == list(entry.token.encode())
        assert len(entry.top_logprobs) == 2 and entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=ATOL)
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
    ref = _logprobs(hf, prompt + ids, len(prompt))
    assert [e.logprob for e in content] == pytest.approx([float(ref[i, t]) for i, t in enumerate(ids)], abs=ATOL)
    chunks = list(client.chat.completions.create(**kw, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]
    no = client.chat.completions.create(**{**kw, "logprobs": False, "top_logprobs": None})
    assert no.choices[0].logprobs is None


def test_penalties_follow_openais_formula_beside_plain_greedy_requests(server: Any, hf: Any) -> None:
    penalized = [(2.0, 0.0), (0.0, 1.5), (0.0, -2.0), (-2.0, 0.0)]  # negative: the model repeats itself
    with httpx.Client() as client, ThreadPoolExecutor(8) as pool:
        plain = [
            pool.submit(complete, client, server.url, [1, 9 + i, 4, 30 + i], 12, ignore_eos=True) for i in range(4)
        ]
        pen = [
            pool.submit(
                complete, client, server.url, PROMPT, 12, ignore_eos=True, presence_penalty=p, frequency_penalty=f
            )
            for p, f in penalized
        ]
        got_plain = [f.result()["choices"][0]["token_ids"] for f in plain]
        got_pen = [f.result()["choices"][0]["token_ids"] for f in pen]
    for i, toks in enumerate(got_plain):
        assert toks == _penalized_greedy(hf, [1, 9 + i, 4, 30 + i], 12, 0.0, 0.0)
    unpenalized = _penalized_greedy(hf, PROMPT, 12, 0.0, 0.0)
    for (p, f), toks in zip(penalized, got_pen, strict=True):
        assert toks == _penalized_greedy(hf, PROMPT, 12, p, f), (p, f)
    assert any(toks != unpenalized for toks in got_pen), "the penalties changed nothing"


def test_n_choices_are_the_seeded_single_choices(server: Any) -> None:
    body = {
        "prompt": PROMPT,
        "max_tokens": 8,
        "temperature": 1.0,
        "seed": 100,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    r = _post(server, "/v1/completions", {**body, "n": 3})
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    singles = [_post(server, "/v1/completions", {**body, "seed": 100 + i})["choices"][0] for i in range(3)]
    assert [c["token_ids"] for c in r["choices"]] == [c["token_ids"] for c in singles]
    assert len({tuple(c["token_ids"]) for c in singles}) > 1, "every choice is the same: the seeds change nothing"
    assert r["usage"] == {"prompt_tokens": len(PROMPT), "completion_tokens": 24, "total_tokens": len(PROMPT) + 24}
    texts: dict[int, str] = {}
    with httpx.stream(
        "POST", server.url + "/v1/completions", timeout=120, json={"model": "tiny", **body, "n": 3, "stream": True}
    ) as s:
        for line in s.iter_lines():
            if line.startswith("data: {"):
                for c in json.loads(line[6:])["choices"]:
                    texts[c["index"]] = texts.get(c["index"], "") + c["text"]
    assert [texts[i] for i in range(3)] == [c["text"] for c in r["choices"]]


def test_chat_n_with_the_official_client(server: Any) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    r = client.chat.completions.create(
        model="tiny", messages=MSG, max_tokens=5, n=4, temperature=0.9, seed=3, extra_body={"ignore_eos": True}
    )
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3] and r.usage.completion_tokens == 20
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=MSG,
            max_tokens=5,
            n=4,
            temperature=0.9,
            seed=3,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    texts = ["", "", "", ""]
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
    assert texts == [c.message.content for c in r.choices]
    assert chunks[-1].usage.completion_tokens == 20
    finished = [ch.index for c in chunks for ch in c.choices if ch.finish_reason]
    assert sorted(finished) == [0, 1, 2, 3]
