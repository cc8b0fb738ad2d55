"""LoRA adapters on our PyTorch runner (--adapter NAME=PATH): two tiny random PEFT adapters made here with peft,
served beside the base model and chosen by the OpenAI `model` field; every reply's greedy tokens equal peft's own
generate with that adapter set (and the base model's with none), in one mixed batch, with and without the prefix
cache. The adapters' facts (`inference-backend model inspect`, the fetch step's check) are read from the same files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from ib_testkit.runners import complete, metric, workload

ADAPTERS = ("sql", "poems")


def _make_adapter(base: Path, out: Path, seed: int, rank: int, modules: list[str]) -> Path:
    """A random LoRA adapter (B not zero, so it changes the outputs) saved the way PEFT saves trained ones."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=modules, init_lora_weights=False, task_type="CAUSAL_LM"
    )
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():  # large enough to move the greedy choices away from the base model's
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.3)
    peft_model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def lora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from inference_backend.runners.tiny import make_model

    root = tmp_path_factory.mktemp("lora")
    base = make_model(root / "base", layers=2, seed=0)
    return {
        "base": base,
        "sql": _make_adapter(base, root / "sql", 1, 4, ["q_proj", "v_proj"]),
        "poems": _make_adapter(base, root / "poems", 2, 8, ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"]),
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
