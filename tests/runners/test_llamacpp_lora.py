"""llama-server b11312 serves LoRA adapters converted by llama.cpp's own convert_lora_to_gguf.py, booted with the
arguments our renderer gives it for spec.adapters (engines/llamacpp.py: ``--lora-scaled FILE:0`` per adapter), and
each adapter's greedy tokens equal peft's own with that adapter.

The tiny base model is bench_model's "tiny" preset (transformers safetensors, converted by llama.cpp's
convert_hf_to_gguf.py through bench/gguf_convert.py); two random adapters are made with peft (ib_testkit.lora) and
converted by convert_lora_to_gguf.py from the pinned source. The rendered args boot as they are except for the
weight paths (``-m``, ``--lora-scaled``: the in-container paths -> the files written here) and ``--host``/``--port``.

What b11312 does with a request (tools/server, read at the pinned commit and checked here):
- the OpenAI ``model`` field chooses nothing in a single-model server: ``"model": "<adapter name>"`` alone gets the
  base model, and the reply names the base model (server-context.cpp: oaicompat_model = the served name);
- a request's ``lora`` field ``[{"id": I, "scale": S}]`` applies adapter I (the I-th ``--lora``, i.e.
  spec.adapters[I]) for that request, every adapter not listed at scale 0 (server-schema.cpp,
  server-context.cpp ``construct_lora_list``); an id that was not loaded is ignored, so the request gets the base
  model; without the field the scales given at start apply: 0 with ``--lora-scaled FILE:0``. (With ``--lora`` and
  ``--lora-init-without-apply``, which the renderer gave before, they are 1: every plain request ran every adapter;
  ``test_lora_then_init_without_apply_runs_every_adapter_by_default`` keeps that proof.)
The decision publishes the name -> id mapping (selection/adapters.py); this test sends what it says.

Needs the runners venv (torch, transformers, peft) and hack/build-llama-server's binary and source tree.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ib_testkit.factories import node
from ib_testkit.llama_server import LlamaServer, llama_cpp_source, llama_server_bin, start_llama_server
from ib_testkit.lora import EOS_ID, convert_lora, make_adapter, peft_greedy
from ib_testkit.rendered import Rendered, render_case
from inference_backend.api.model import ModelSpec

from bench import bench_model

# name -> (seed, rank, target modules): a narrow adapter and a wide one
ADAPTERS: dict[str, tuple[int, int, tuple[str, ...]]] = {
    "sql": (1, 4, ("q_proj", "v_proj")),
    "poems": (2, 8, ("q_proj", "k_proj", "v_proj", "o_proj", "down_proj")),
}
TINY = bench_model.PRESETS["tiny"]
MODELS = {
    "tiny": ModelSpec.model_validate(
        {
            "uri": "pvc://gguf-models/tiny.gguf",
            "architecture": "LlamaForCausalLM",
            "parameters": "0.1M",
            "contextLength": TINY.context,
            "tokenizer": {"family": "ib-bench-tiny", "vocabSize": TINY.vocab},
        }
    )
}
BODY: dict[str, Any] = {
    "model": {"modelRef": "tiny", "servedName": "tiny"},
    "hardware": {"accelerator": "cpu"},
    "adapters": [
        {"name": "sql", "uri": "pvc://loras/sql.gguf", "rank": 4},
        {"name": "poems", "uri": "pvc://loras/poems.gguf"},
    ],
}
PROMPTS = [[1, 57, 203, 88, 141, 9, 260], [1, 310, 44, 44, 12, 190, 75, 233, 101], [1, 17, 280]]
N = 16


@dataclass(frozen=True)
class Case:
    hf: Path
    gguf: Path
    peft: dict[str, Path]
    lora_gguf: dict[str, Path]


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    if not llama_server_bin().exists():
        pytest.skip(f"{llama_server_bin()} missing: run hack/build-llama-server")
    if not (llama_cpp_source() / "convert_lora_to_gguf.py").exists():
        pytest.skip(f"no llama.cpp source at {llama_cpp_source()}: run hack/build-llama-server")
    root = tmp_path_factory.mktemp("llama-lora")
    hf = bench_model.make_safetensors(TINY, root / "hf")
    gguf = bench_model.convert_gguf(hf, root / "tiny.gguf", TINY.dtype)
    peft = {name: make_adapter(hf, root / name, seed, rank, mods) for name, (seed, rank, mods) in ADAPTERS.items()}
    lora_gguf = {name: convert_lora(path, hf, root / f"{name}.gguf") for name, path in peft.items()}
    return Case(hf, gguf, peft, lora_gguf)


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    return render_case(BODY, node("cpu", cpu="2", memory="8Gi"), models=MODELS, engine="llamacpp")


def _local(path: str, case: Case) -> str:
    """An in-container weight path (/models/tiny.gguf, /adapters/<name>/<name>.gguf) -> the file written here."""
    if path == "/models/tiny.gguf":
        return str(case.gguf)
    name = path.split("/")[2]
    assert path == f"/adapters/{name}/{name}.gguf", path
    return str(case.lora_gguf[name])


def localize(args: Sequence[str], case: Case) -> list[str]:
    """The rendered args with the file of each -m and --lora-scaled (FILE:SCALE) replaced by the local file."""
    out = list(args)
    for i in range(1, len(out)):
        if out[i - 1] == "-m":
            out[i] = _local(out[i], case)
        elif out[i - 1] == "--lora-scaled":
            path, scale = out[i].rsplit(":", 1)
            out[i] = f"{_local(path, case)}:{scale}"
    return out


@pytest.fixture(scope="module")
def server(case: Case, rendered: Rendered, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    tmp = tmp_path_factory.mktemp("llama-server")
    env = {**rendered.env, "LLAMA_CACHE": str(tmp / "cache")}
    srv = start_llama_server(localize(rendered.args, case), env, log_dir=tmp)
    try:
        changed = [(r, b) for r, b in zip(rendered.args, srv.argv[1:], strict=True) if r != b]
        allowed = {"-m", "--lora-scaled", "--host", "--port"}
        for i, (r, b) in enumerate(zip(rendered.args, srv.argv[1:], strict=True)):
            assert r == b or rendered.args[i - 1] in allowed, f"argument {i} changed: {r!r} -> {b!r}"
        assert len(changed) == 5  # -m, two --lora-scaled, --host, --port
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def greedy(case: Case) -> Callable[[str | None, list[int], int], list[int]]:
    return peft_greedy(case.hf, case.peft)


def _lora_ids(rendered: Rendered) -> dict[str, int]:
    """name -> the id a request names it by, as the decision publishes it."""
    ids = rendered.decision.adapters.lora_ids
    assert ids is not None, "llama.cpp selects adapters by id: the decision must say which"
    return dict(ids)


def _tokens(srv: LlamaServer, prompt: list[int], **extra: Any) -> list[int]:
    """tools/server /completion, greedy: the generated ids up to EOS (excluded)."""
    body = {"prompt": prompt, "n_predict": N, "temperature": 0, "cache_prompt": False, "return_tokens": True}
    out = srv.post_json("/completion", {**body, **extra})
    tokens = [int(t) for t in out["tokens"]]
    return tokens[: tokens.index(EOS_ID)] if EOS_ID in tokens else tokens


def _openai(srv: LlamaServer, model: str, prompt: list[int], **extra: Any) -> Mapping[str, Any]:
    body = {"model": model, "prompt": prompt, "max_tokens": N, "temperature": 0}
    out: Mapping[str, Any] = srv.post_json("/v1/completions", {**body, **extra})
    return out


def test_rendered_checks_accept_the_converted_adapters(case: Case, rendered: Rendered) -> None:
    """The rendered check-adapter init containers (inference-backend adapter check ...) pass on the files
    convert_lora_to_gguf.py wrote, and refuse a lower rank limit with the reason."""
    checks = [c for c in rendered.container.init_containers if str(c["name"]).startswith("check-adapter-")]
    assert [c["name"] for c in checks] == ["check-adapter-0", "check-adapter-1"]
    for c in checks:
        cmd = [str(a) for a in c["command"]]
        assert cmd[:3] == ["inference-backend", "adapter", "check"]
        argv = [sys.executable, "-m", "inference_backend.cli", *cmd[1:3], _local(cmd[3], case), *cmd[4:]]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode == 0, res.stdout + res.stderr
    argv = [sys.executable, "-m", "inference_backend.cli", "adapter", "check", str(case.lora_gguf["poems"])]
    res = subprocess.run(
        [*argv, "--max-rank", "4", "--adapter-format", "gguf"], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode != 0 and "rank 8 is above the engine's limit 4" in res.stdout + res.stderr, res


def test_server_loads_each_adapter_in_spec_order_unapplied(server: LlamaServer, rendered: Rendered) -> None:
    loaded = server.get_json("/lora-adapters")
    ids = _lora_ids(rendered)
    assert ids == {"sql": 0, "poems": 1}
    assert [(a["id"], Path(a["path"]).name, a["scale"]) for a in loaded] == [
        (ids["sql"], "sql.gguf", 0.0),
        (ids["poems"], "poems.gguf", 0.0),
    ]
    # /v1/models lists the base model only (its served name, -a); adapters are no models to llama-server
    assert [m["id"] for m in server.get_json("/v1/models")["data"]] == ["tiny"]


def test_lora_field_applies_the_adapter_as_peft_does(server: LlamaServer, rendered: Rendered, greedy: Any) -> None:
    ids = _lora_ids(rendered)
    differs = 0
    for prompt in PROMPTS:
        base = greedy(None, prompt, N)
        assert _tokens(server, prompt) == base, prompt  # no lora field: scale 0 (--lora-init-without-apply)
        for name, i in ids.items():
            want = greedy(name, prompt, N)
            assert _tokens(server, prompt, lora=[{"id": i, "scale": 1.0}]) == want, (name, prompt)
            differs += want != base
            # scale 0 is the base model again; another adapter's id is not this one
            assert _tokens(server, prompt, lora=[{"id": i, "scale": 0.0}]) == base
    assert differs >= 4, "the adapters must change the outputs, else this test proves nothing"


def test_openai_model_field_alone_does_not_choose_an_adapter(
    server: LlamaServer, rendered: Rendered, greedy: Any
) -> None:
    """b11312: "model": "<adapter>" alone gets the base model (and the reply names it); with the decision's lora id
    the adapter answers; an id that was not loaded is ignored (base model), it is not refused."""
    ids = _lora_ids(rendered)
    prompt = next(p for p in PROMPTS if greedy("sql", p, N) != greedy(None, p, N))
    base = _openai(server, "tiny", prompt)["choices"][0]["text"]
    by_name = _openai(server, "sql", prompt)
    assert by_name["model"] == "tiny"  # the served name, whatever the request named
    assert by_name["choices"][0]["text"] == base
    applied = _openai(server, "sql", prompt, lora=[{"id": ids["sql"], "scale": 1.0}])["choices"][0]["text"]
    assert applied != base
    native = server.post_json(
        "/completion", {"prompt": prompt, "n_predict": N, "temperature": 0, "lora": [{"id": ids["sql"], "scale": 1}]}
    )
    assert applied == native["content"]
    unknown = _openai(server, "nope", prompt, lora=[{"id": 7, "scale": 1.0}])
    assert unknown["choices"][0]["text"] == base


def test_lora_then_init_without_apply_runs_every_adapter_by_default(
    case: Case, rendered: Rendered, greedy: Any, tmp_path: Path
) -> None:
    """Why the renderer gives --lora-scaled FILE:0: the same server booted with --lora FILE ... and
    --lora-init-without-apply (what it rendered before) lists both adapters at scale 1 and answers a request without a
    lora field with the base model plus both adapters, not with the base model."""
    args = localize(rendered.args, case)
    at = [i for i, a in enumerate(args) if a == "--lora-scaled"]
    old = [a for i, a in enumerate(args) if i not in at and i - 1 not in at]
    for name in ADAPTERS:
        old += ["--lora", str(case.lora_gguf[name])]
    old.append("--lora-init-without-apply")
    with start_llama_server(old, {"LLAMA_CACHE": str(tmp_path / "cache")}, log_dir=tmp_path) as srv:
        assert [a["scale"] for a in srv.get_json("/lora-adapters")] == [1.0, 1.0]
        prompt = PROMPTS[0]
        assert _tokens(srv, prompt) != greedy(None, prompt, N)
        assert _tokens(srv, prompt, lora=[{"id": 0, "scale": 0.0}]) == greedy(None, prompt, N)
