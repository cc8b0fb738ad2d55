"""Rendered llama.cpp containers boot the real pinned llama-server (b11312) and do what the spec asked.

CPU specs (ib_testkit.factories nodes) -> select -> engines.llamacpp.container -> the container's args, booted as
they are except for exactly these substitutions (checked by ``_assert_only_substituted``):

- command: the rendered ``/app/llama-server`` (the image's path) -> the binary built by hack/build-llama-server;
- the values of ``-m``/``-md`` (and their long spellings): the in-container weight paths (``/models/<file>``,
  ``/draft-models/<file>``) -> the tiny GGUF of the same file name that the test writes (``localize``);
- the value of ``--host`` (0.0.0.0) -> 127.0.0.1 and of ``--port`` (8000) -> a free port (the harness's
  substitute_args);
- env: the rendered env, with LLAMA_CACHE (/model-cache, the pod's emptyDir) -> a temporary directory.

The weights come from ``pvc://`` Models (so ``-m``/``-md`` are rendered); the ``hf://`` form (``-hf``/``-hff``/
``-hfd``, which would download) is checked against the pinned build's flag list instead.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from ib_testkit.factories import MODELS, node
from ib_testkit.llama_server import (
    DRAFT_FLAGS,
    MODEL_FLAGS,
    free_port,
    llama_server_bin,
    run_llama_server_to_exit,
    start_llama_server,
)
from ib_testkit.rendered import Rendered, render_case
from inference_backend.api.model import ModelSpec
from inference_backend.decision import InvalidSpec

from tests.contracts.conftest import require
from tests.contracts.gguf_models import write_target_and_draft
from tests.contracts.llama_flags import check_llama_server_args

pytestmark = pytest.mark.slow

HF_FLAGS = ("-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf")
TINY_TOKENIZER = {"family": "ib-tiny", "vocabSize": 320}
CTX = 512
TINY: dict[str, ModelSpec] = {
    **MODELS,
    "tiny-target": ModelSpec.model_validate(
        {
            "uri": "pvc://gguf-models/tiny-target.gguf",
            "architecture": "LlamaForCausalLM",
            "parameters": "1.2M",
            "contextLength": CTX,
            "tokenizer": TINY_TOKENIZER,
        }
    ),
    "tiny-draft": ModelSpec.model_validate(
        {
            "uri": "pvc://gguf-models/tiny-draft.gguf",
            "architecture": "LlamaForCausalLM",
            "parameters": "0.6M",
            "tokenizer": TINY_TOKENIZER,
        }
    ),
}
CPU = node("cpu", cpu="2", memory="8Gi")  # 2 cores -> -t 1 (90% of the node, at least 1)

# name -> spec body (all on CPU, llama.cpp by selection: GGUF weights)
BOOT_CASES: dict[str, dict[str, Any]] = {
    "draft-q8kv-4slots": {
        "model": {"modelRef": "tiny-target", "servedName": "tiny"},
        "hardware": {"accelerator": "cpu"},
        "batching": {"maxBatchSize": 4},
        "kvCache": {"dtype": "q8_0"},
        "speculativeDecoding": {"draftModelRef": "tiny-draft", "numSpeculativeTokens": 6},
    },
    "static-noprefix-2slots": {
        "model": {"modelRef": "tiny-target"},
        "hardware": {"accelerator": "cpu"},
        "batching": {"strategy": "static", "maxBatchSize": 2, "maxBatchTokens": 256},
        "prefixCache": {"enabled": False},
        "kvCache": {"dtype": "float16"},
    },
}


def localize(args: Sequence[str], files: Mapping[str, Path]) -> list[str]:
    """Replace the value of each -m/-md (any spelling) by the local file of the same name; nothing else."""
    out = list(args)
    for i in range(1, len(out)):
        if out[i - 1] in MODEL_FLAGS or out[i - 1] in DRAFT_FLAGS:
            out[i] = str(files[Path(out[i]).name])
    assert not any(a in HF_FLAGS for a in out), f"an hf:// form cannot boot offline: {out}"
    return out


def _assert_only_substituted(rendered: Sequence[str], booted: Sequence[str]) -> None:
    assert len(rendered) == len(booted), (rendered, booted)
    allowed = set(MODEL_FLAGS) | set(DRAFT_FLAGS) | {"--host", "--port"}
    for i, (r, b) in enumerate(zip(rendered, booted, strict=True)):
        if r != b:
            assert i > 0 and rendered[i - 1] in allowed, f"argument {i} changed: {r!r} -> {b!r}"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require(importlib.util.find_spec("gguf") is not None, "the gguf package is not installed")
    require(llama_server_bin().exists(), f"{llama_server_bin()} missing (run hack/build-llama-server)")
    target, draft = write_target_and_draft(tmp_path_factory.mktemp("gguf"))
    return {"tiny-target.gguf": target, "tiny-draft.gguf": draft}


def _render(body: Mapping[str, Any]) -> Rendered:
    return render_case(body, CPU, models=TINY, engine="llamacpp")


def _boot(r: Rendered, files: Mapping[str, Path], tmp: Path) -> Any:
    assert r.container.command == ("/app/llama-server",)
    env = {**r.env, "LLAMA_CACHE": str(tmp)}
    assert set(env) == {"LLAMA_CACHE"}, env  # pvc:// needs no token; nothing else is set by the renderer
    srv = start_llama_server(localize(r.args, files), env, port=free_port(), log_dir=tmp)
    _assert_only_substituted(r.args, srv.argv[1:])
    return srv


@pytest.mark.parametrize("name", list(BOOT_CASES))
def test_rendered_container_boots_and_serves(name: str, files: dict[str, Path], tmp_path: Path) -> None:
    r = _render(BOOT_CASES[name])
    assert check_llama_server_args(r.args) == []
    s, d = r.spec, r.decision
    slots = s.batching.max_batch_size
    assert slots is not None
    with _boot(r, files, tmp_path) as srv:
        assert srv.get_json("/health") == {"status": "ok"}
        # the served name (-a) is the OpenAI model id
        assert srv.get_json("/v1/models")["data"][0]["id"] == (s.model.served_name or "ib")
        res = srv.post_json(
            "/v1/completions", {"prompt": "the cat sat on", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
        )
        assert res["usage"]["completion_tokens"] == 8 and res["choices"][0]["text"], res
        native = srv.post_json(
            "/completion", {"prompt": "the cat", "n_predict": 12, "temperature": 0, "ignore_eos": True}
        )
        assert native["tokens_predicted"] == 12

        status, body = srv.get("/metrics")
        assert status == 200
        metrics = body.decode()
        assert re.search(r"^llamacpp:tokens_predicted_total [1-9]", metrics, re.M), metrics[:2000]

        got = srv.get_json("/slots")
        assert len(got) == slots  # -np = spec.batching.maxBatchSize
        assert {x["n_ctx"] for x in got} == {CTX}  # -c = contextLength x slots: each slot has the model context
        drafting = d.speculation.enabled
        assert all(x["speculative"] is drafting for x in got), got
        if drafting:
            assert native["timings"]["draft_n"] > 0, native["timings"]
            assert re.search(r"^llamacpp:spec_decode_num_drafts_total [1-9]", metrics, re.M), metrics[:2000]
        props = srv.get_json("/props")
        assert props["total_slots"] == slots
    assert srv.proc.returncode == 0, srv.output()[-3000:]
    if s.kv_cache.dtype == "q8_0":
        # booted with a quantized V cache, which llama-server refuses without flash attention (harness test)
        assert r.args[r.args.index("-ctv") + 1] == "q8_0" and r.args[r.args.index("--flash-attn") + 1] == "on"
    if s.batching.strategy == "static":
        assert "--no-cont-batching" in r.args


def test_hf_form_flags_are_in_the_pinned_flag_list() -> None:
    """hf:// weights render -hf/-hff (target) and -hfd (draft); they would download, so only the flags are checked."""
    body = {
        "model": {"modelRef": "llama-3-2-3b-gguf", "servedName": "llama-3.2-3b"},
        "hardware": {"accelerator": "cpu"},
        "batching": {"maxBatchSize": 4},
        "kvCache": {"dtype": "q8_0"},
        "speculativeDecoding": {"draftModelRef": "llama-3-2-1b-gguf", "numSpeculativeTokens": 8},
    }
    r = render_case(body, node("cpu", cpu="16"), engine="llamacpp")
    args = r.args
    assert args[args.index("-hf") + 1] == "bartowski/Llama-3.2-3B-Instruct-GGUF"
    assert args[args.index("-hff") + 1] == "Llama-3.2-3B-Instruct-Q4_K_M.gguf"
    assert args[args.index("-hfd") + 1] == "bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0"
    assert args[args.index("--spec-type") + 1] == "draft-simple"
    assert check_llama_server_args(args) == []


def test_gpu_multi_gpu_form_flags_are_in_the_pinned_flag_list() -> None:
    """GPU forms (-ngl 999, -sm layer, -ngld 999) cannot boot here; their flags are checked against the list."""
    body = {
        "model": {"modelRef": "tiny-target"},
        "hardware": {"accelerator": "gpu"},
        "speculativeDecoding": {"draftModelRef": "tiny-draft"},
    }
    r = render_case(body, node("g", "l4", 2), models=TINY, engine="llamacpp")
    assert check_llama_server_args(r.args) == []
    assert r.args[r.args.index("-ngl") + 1] == "999" and r.args[r.args.index("-ngld") + 1] == "999"


# ---- negative ---------------------------------------------------------------------------------------------------


def test_removed_draft_max_in_extra_args_makes_llama_server_exit(files: dict[str, Path]) -> None:
    """Without a draft the renderer does not set --spec-draft-n-max, so it lets `--draft-max` through: the real
    llama-server then refuses to start (removed in PR #22397)."""
    body = {**BOOT_CASES["static-noprefix-2slots"], "engine": {"extraArgs": ["--draft-max", "8"]}}
    r = _render(body)
    assert check_llama_server_args(r.args) == ["--draft-max: the argument has been removed in this build"]
    code, out = run_llama_server_to_exit(localize(r.args, files))
    assert code != 0, out
    assert "the argument has been removed" in out, out[-3000:]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--ctx-size", "4096"], "--ctx-size (same flag as -c)"),
        (["-c", "4096"], "-c is set by the operator"),
        (["--draft-max", "4"], "--draft-max (same flag as --spec-draft-n-max)"),
        (["--parallel=2"], "--parallel (same flag as -np)"),
        (["-nocb"], "-nocb (same flag as -cb)"),
        (["--spec-draft-model", "/x.gguf"], "--spec-draft-model (same flag as -md)"),
    ],
)
def test_renderer_refuses_extra_args_repeating_its_flags(extra: list[str], named: str) -> None:
    body = {**BOOT_CASES["draft-q8kv-4slots"], "engine": {"extraArgs": extra}}
    with pytest.raises(InvalidSpec, match=r"spec\.engine\.extraArgs") as info:
        _render(body)
    assert named in str(info.value)
