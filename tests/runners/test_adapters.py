"""LoRA adapters on our PyTorch runner (--adapter NAME=PATH): two tiny random PEFT adapters made here with peft,
served beside the base model and chosen by the OpenAI `model` field; every reply's greedy tokens equal peft's own
generate with that adapter set (and the base model's with none), in one mixed batch, with and without the prefix
cache. The adapters' facts (`inference-backend model inspect`, the fetch step's check) are read from the same files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from ib_testkit.lora import make_adapter
from ib_testkit.runners import complete, metric, workload

ADAPTERS = ("sql", "poems")


@pytest.fixture(scope="module")
def lora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from inference_backend.runners.tiny import make_model

    root = tmp_path_factory.mktemp("lora")
    base = make_model(root / "base", layers=2, seed=0)
    return {
        "base": base,
        "sql": make_adapter(base, root / "sql", 1, 4, ["q_proj", "v_proj"]),
        "poems": make_adapter(base, root / "poems", 2, 8, ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"]),
    }


@pytest.fixture(scope="module")
def peft_greedy(lora: dict[str, Path]) -> Any:
    """greedy(adapter or None, prompt, n) -> n tokens of peft's generate (the base model's with None)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(lora["base"], dtype=torch.float32).eval()
    model = PeftModel.from_pretrained(base, lora["sql"], adapter_name="sql")
    model.load_adapter(lora["poems"], adapter_name="poems")
    model.eval()

    def greedy(adapter: str | None, prompt: list[int], n: int) -> list[int]:
        ids = torch.tensor([prompt])
        kw = {
            "attention_mask": torch.ones_like(ids),
            "do_sample": False,
            "max_new_tokens": n,
            "min_new_tokens": n,
            "eos_token_id": None,
        }
        with torch.inference_mode():
            if adapter is None:
                with model.disable_adapter():
                    out = model.generate(input_ids=ids, **kw)
            else:
                model.set_adapter(adapter)
                out = model.generate(input_ids=ids, **kw)
        return list(out[0, len(prompt) :].tolist())

    return greedy


@pytest.mark.parametrize("flags", [["--enable-prefix-caching"], ["--no-enable-prefix-caching"]])
def test_adapters_greedy_equal_peft_in_one_mixed_batch(
    flags: list[str], lora: dict[str, Path], peft_greedy: Any, start_server: Any
) -> None:
    args = ["--model", str(lora["base"]), "--served-model-name", "tiny", "--max-batch-size", "8", *flags]
    for name in ADAPTERS:
        args += ["--adapter", f"{name}={lora[name]}"]
    srv = start_server("pytorch", args)
    models = httpx.get(srv.url + "/v1/models").json()["data"]
    assert [(m["id"], m.get("parent")) for m in models] == [("tiny", None), ("sql", "tiny"), ("poems", "tiny")]
    assert [m["root"] for m in models] == [str(lora["base"]), str(lora["sql"]), str(lora["poems"])]
    jobs = [(prompt, 12, (None, *ADAPTERS)[i % 3]) for i, (prompt, _) in enumerate(workload(18, seed=3))]
    limits = httpx.Limits(max_connections=18)
    from concurrent.futures import ThreadPoolExecutor

    def one(job: tuple[list[int], int, str | None]) -> Any:
        prompt, n, adapter = job
        with httpx.Client(limits=limits) as client:
            return complete(client, srv.url, prompt, n, model=adapter or "tiny", ignore_eos=True)

    with ThreadPoolExecutor(18) as pool:  # concurrent: rows of different adapters share decode steps
        replies = list(pool.map(one, jobs))
    differs = 0
    for (prompt, n, adapter), reply in zip(jobs, replies, strict=True):
        want = peft_greedy(adapter, prompt, n)
        assert reply["model"] == (adapter or "tiny")
        assert reply["choices"][0]["token_ids"] == want, f"adapter {adapter}, prompt {prompt}"
        differs += adapter is not None and want != peft_greedy(None, prompt, n)
    assert differs >= 8  # the adapters really change the outputs (else the test would prove nothing)
    if "--enable-prefix-caching" in flags:
        assert metric(srv.url, "vllm:prefix_cache_hits_total") > 0


def test_unknown_model_name_is_404_and_bad_flag_refused(lora: dict[str, Path], start_server: Any) -> None:
    srv = start_server(
        "pytorch", ["--model", str(lora["base"]), "--served-model-name", "tiny", "--adapter", f"sql={lora['sql']}"]
    )
    r = httpx.post(srv.url + "/v1/completions", json={"model": "poems", "prompt": [1, 5], "max_tokens": 2})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    bad = start_server("pytorch", ["--model", str(lora["base"]), "--adapter", "nopath"], wait=False)
    assert bad.proc.wait(timeout=60) == 2


def test_adapter_facts_from_peft_files(lora: dict[str, Path]) -> None:
    from inference_backend.modelinfo.adapter import Limits, problems, read_adapter

    facts = read_adapter(lora["poems"])
    assert (facts.format, facts.rank) == ("peft", 8)
    assert facts.target_modules == ("down_proj", "k_proj", "o_proj", "q_proj", "v_proj")
    assert problems(facts, Limits(8, "peft", rank=8, base_architecture="LlamaForCausalLM")) == []
    assert problems(facts, Limits(4, "peft")) != []


RUNTIME = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def _post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=300)


def _served(url: str) -> list[str]:
    return [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]]


def test_adapters_load_and_unload_at_run_time(lora: dict[str, Path], peft_greedy: Any, start_server: Any) -> None:
    """vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter (same bodies) with VLLM_ALLOW_RUNTIME_LORA_UPDATING:
    a runner started with no adapter gains both, serves each as peft does, refuses a second load of a name, drops
    one (404 for it from then on, the other and the base model unchanged), and the last (the plain model again)."""
    srv = start_server("pytorch", ["--model", str(lora["base"]), "--served-model-name", "tiny"], env=RUNTIME)
    prompts = [p for p, _ in workload(4, seed=5)]
    with httpx.Client() as client:

        def tokens(model: str, prompt: list[int]) -> list[int]:
            out = complete(client, srv.url, prompt, 10, model=model, ignore_eos=True)
            return list(out["choices"][0]["token_ids"])

        assert _served(srv.url) == ["tiny"]
        for name in ADAPTERS:
            r = _post(srv.url, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(lora[name])})
            assert r.status_code == 200 and r.text == f"Success: LoRA adapter '{name}' added successfully.", r.text
        assert _served(srv.url) == ["tiny", *ADAPTERS]
        roots = {m["id"]: m.get("root") for m in httpx.get(srv.url + "/v1/models").json()["data"]}
        assert roots == {"tiny": str(lora["base"]), **{name: str(lora[name]) for name in ADAPTERS}}
        for prompt in prompts:
            for name in (None, *ADAPTERS):
                assert tokens(name or "tiny", prompt) == peft_greedy(name, prompt, 10), (name, prompt)
        again = _post(srv.url, "/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": str(lora["sql"])})
        assert again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]
        missing = _post(srv.url, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": str(lora["base"] / "no")})
        assert missing.status_code == 400 and "x" not in _served(srv.url)
        base = _post(srv.url, "/v1/load_lora_adapter", {"lora_name": "tiny", "lora_path": str(lora["sql"])})
        assert base.status_code == 400 and "conflicts with a served base model" in base.text
        # load_inplace: the name now runs the other adapter's weights, then its own again
        for weights in ("poems", "sql"):
            body = {"lora_name": "sql", "lora_path": str(lora[weights]), "load_inplace": True}
            assert _post(srv.url, "/v1/load_lora_adapter", body).status_code == 200
            assert tokens("sql", prompts[0]) == peft_greedy(weights, prompts[0], 10)
            served = httpx.get(srv.url + "/v1/models").json()["data"]
            assert [m["root"] for m in served if m["id"] == "sql"] == [str(lora[weights])]
        assert _served(srv.url) == ["tiny", *ADAPTERS]

        r = _post(srv.url, "/v1/unload_lora_adapter", {"lora_name": "sql"})
        assert r.status_code == 200 and r.text == "Success: LoRA adapter 'sql' removed successfully."
        assert _served(srv.url) == ["tiny", "poems"]
        gone = httpx.post(srv.url + "/v1/completions", json={"model": "sql", "prompt": [1, 5], "max_tokens": 2})
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"
        assert _post(srv.url, "/v1/unload_lora_adapter", {"lora_name": "sql"}).status_code == 404
        for prompt in prompts:
            assert tokens("poems", prompt) == peft_greedy("poems", prompt, 10)
            assert tokens("tiny", prompt) == peft_greedy(None, prompt, 10)

        assert _post(srv.url, "/v1/unload_lora_adapter", {"lora_name": "poems"}).status_code == 200
        assert _served(srv.url) == ["tiny"]
        assert all(tokens("tiny", p) == peft_greedy(None, p, 10) for p in prompts)
        # loaded again after the last was taken out: PEFT wraps the plain model again
        r = _post(srv.url, "/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": str(lora["sql"])})
        assert r.status_code == 200 and all(tokens("sql", p) == peft_greedy("sql", p, 10) for p in prompts)


def test_unload_waits_for_the_adapters_running_request(
    lora: dict[str, Path], peft_greedy: Any, start_server: Any
) -> None:
    """An unload during a long request of that adapter returns after it; the request keeps its adapter to the end."""
    args = ["--model", str(lora["base"]), "--served-model-name", "tiny", "--adapter", f"sql={lora['sql']}"]
    srv = start_server("pytorch", args, env=RUNTIME)
    prompt = workload(1, seed=9)[0][0]
    from concurrent.futures import ThreadPoolExecutor

    with httpx.Client() as client, ThreadPoolExecutor(1) as pool:
        long = pool.submit(complete, client, srv.url, prompt, 300, model="sql", ignore_eos=True)
        while metric(srv.url, "vllm:num_requests_running") < 1:
            assert not long.done()
        # vLLM's adapter gauge, which the endpoint picker's lora-affinity scorer reads: sql is running
        info = re.findall(r"^vllm:lora_requests_info\{([^}]*)\} ", httpx.get(srv.url + "/metrics").text, re.M)
        assert 'max_lora="16",running_lora_adapters="sql",waiting_lora_adapters=""' in info, info
        r = _post(srv.url, "/v1/unload_lora_adapter", {"lora_name": "sql"})
        # the unload ran on the engine thread after the request left the batch (its HTTP reply may still be on
        # its way), with every one of its 300 tokens computed with the adapter
        assert r.status_code == 200 and metric(srv.url, "vllm:num_requests_running") == 0
        assert long.result(timeout=60)["choices"][0]["token_ids"] == peft_greedy("sql", prompt, 300)


def test_run_time_endpoints_are_off_by_default(lora: dict[str, Path], start_server: Any) -> None:
    srv = start_server("pytorch", ["--model", str(lora["base"]), "--served-model-name", "tiny"])
    r = _post(srv.url, "/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": str(lora["sql"])})
    assert r.status_code == 404 and _served(srv.url) == ["tiny"]
