"""spec.adapters: the API's checks, the selection against each engine's LoRA card, the rendering of every engine,
and the adapter facts read from real PEFT and GGUF files (written here with safetensors and gguf-py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ib_testkit.factories import MODELS, cluster, node, spec
from inference_backend.decision import InvalidSpec
from inference_backend.engines import ENGINES, REGISTRY, card
from inference_backend.modelinfo.adapter import Limits, check_adapter, is_adapter, problems, read_adapter
from inference_backend.modelinfo.errors import InspectError
from inference_backend.selection import select
from pydantic import ValidationError

L8 = {"modelRef": "llama-3-1-8b"}
GPU = [node("g", "h100")]
CPU = [node("c", cpu="32", memory="128Gi")]
ADAPTER = {"name": "sql", "uri": "hf://acme/sql-lora"}


def _select(body: dict[str, Any], nodes: list[dict[str, Any]] = GPU) -> Any:
    return select(spec(**body), cluster(*nodes), MODELS)


# ---- the API ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("adapters", "served", "message"),
    [
        ([ADAPTER, {**ADAPTER, "uri": "s3://b/other/"}], None, "listed twice"),
        ([{**ADAPTER, "name": "chat"}], "chat", "servedName"),
        ([{**ADAPTER, "name": "-x"}], None, "pattern"),
        ([{**ADAPTER, "name": "a/b"}], None, "pattern"),
        ([{**ADAPTER, "uri": "ftp://x/y"}], None, "pattern"),
        ([{**ADAPTER, "rank": 0}], None, "greater than or equal to 1"),
    ],
)
def test_bad_adapters_are_refused_naming_the_field(
    adapters: list[dict[str, Any]], served: str | None, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(model={**L8, **({"servedName": served} if served else {})}, adapters=adapters)


# ---- selection ------------------------------------------------------------------------------------------------


def test_engine_without_lora_is_refused_naming_spec_adapters() -> None:
    onnx = {"uri": "hf://acme/phi-onnx", "format": "onnx", "parameters": "3.8B", "contextLength": 4096}
    with pytest.raises(InvalidSpec) as exc:
        _select({"model": onnx, "backend": "onnxruntime", "adapters": [ADAPTER]}, CPU)
    assert exc.value.field == "spec.adapters"
    # auto: the only engine of the format serves no adapters, so nothing is placed, and the reason says why
    d = _select({"model": onnx, "adapters": [ADAPTER]}, CPU)
    assert not d.satisfiable
    assert "spec.adapters" in dict(d.rejected)["onnxruntime"]


def test_every_lora_engine_renders_adapters_and_the_others_are_rejected() -> None:
    served = {c.name for c in REGISTRY if c.lora.serves}
    assert served == {"vllm", "sglang", "tgi", "llamacpp", "pytorch"}
    for c in REGISTRY:
        assert c.lora.source and c.lora.how, c.name


def test_rank_above_the_engine_limit_is_rejected() -> None:
    d = _select({"model": L8, "backend": "vllm", "adapters": [{**ADAPTER, "rank": 1000}]})
    assert not d.satisfiable
    assert "spec.adapters[0].rank 1000 is above its largest LoRA rank 512" in dict(d.rejected)["vllm"]


def test_target_modules_the_engine_does_not_adapt_are_rejected() -> None:
    d = _select({"model": L8, "backend": "tgi", "adapters": [{**ADAPTER, "targetModules": ["q_proj", "mlp.fc9"]}]})
    assert not d.satisfiable
    assert "spec.adapters[0].targetModules mlp.fc9" in dict(d.rejected)["tgi"]


def test_architecture_without_lora_on_the_engine_is_rejected() -> None:
    archs = card("vllm").lora.architectures
    assert "LlamaForCausalLM" in archs and "Qwen2ForCausalLM" in archs
    odd = {
        "uri": "hf://acme/odd",
        "architecture": "NoSuchLoraModelForCausalLM",
        "parameters": "1B",
        "contextLength": 2048,
    }
    d = _select({"model": odd, "backend": "vllm", "adapters": [ADAPTER]})
    assert not d.satisfiable and "serves no LoRA adapters on NoSuchLoraModelForCausalLM" in dict(d.rejected)["vllm"]


@pytest.mark.parametrize(
    ("ranks", "limit"), [([16], 16), ([20], 32), ([None], 16), ([8, None], 16), ([300], 320), ([64, None], 64)]
)
def test_vllm_rank_limit_is_the_smallest_choice_covering_every_adapter(ranks: list[int | None], limit: int) -> None:
    adapters = [{"name": f"a{i}", "uri": f"hf://acme/a{i}", **({"rank": r} if r else {})} for i, r in enumerate(ranks)]
    d = _select({"model": L8, "backend": "vllm", "adapters": adapters})
    assert d.adapters.max_rank == limit
    c = ENGINES["vllm"](d, spec(model=L8, backend="vllm", adapters=adapters), "ib")
    assert c.args[c.args.index("--max-lora-rank") + 1] == str(limit)


def test_vllm_args_env_and_fetch_init_containers() -> None:
    """An adapter on a volume (pvc://) is in the pod template: every adapter is given at start (--lora-modules) and
    fetched by an init container; a change of the list rolls out."""
    adapters = [
        {**ADAPTER, "rank": 8},
        {"name": "support.v2", "uri": "s3://b/support/", "rank": 16},
        {"name": "legal", "uri": "pvc://claims/legal"},
    ]
    body = {"model": {**L8, "credentialsSecret": "hf-token"}, "backend": "vllm", "adapters": adapters}
    d = _select(body)
    c = ENGINES["vllm"](d, spec(**body), "ib")
    args = list(c.args)
    i = args.index("--lora-modules")
    assert args[i + 1 : i + 4] == [
        "sql=/adapters/sql",
        "support.v2=/adapters/support.v2",
        "legal=/adapters/legal/legal",
    ]
    assert "--enable-lora" in args and args[args.index("--max-loras") + 1] == "3"
    assert c.adapters_config is None and all(e["name"] != "VLLM_ALLOW_RUNTIME_LORA_UPDATING" for e in c.env)
    init = {i["name"]: i for i in c.init_containers}
    hf, s3 = init["fetch-adapter-0"], init["fetch-adapter-1"]
    assert hf["command"][:4] == ["inference-backend", "fetch", "hf://acme/sql-lora", "/adapters/sql"]
    assert "--adapter" in hf["command"] and hf["command"][hf["command"].index("--max-rank") + 1] == "16"
    # the model's Secret for an adapter in the same store (hf://), none for another store
    assert [e["name"] for e in hf["env"]] == ["HF_TOKEN", "HF_ENDPOINT"] and "env" not in s3
    assert any("a change of the list rolls the pods out" in r for r in d.reasons)
    assert d.adapters.lora_ids is None and "loraIds" not in d.to_json()["adapters"]  # the model field names them


@pytest.mark.parametrize(
    ("count", "slots", "cpu"), [(1, 1, None), (2, 2, None), (3, 4, None), (5, 8, None), (8, 8, None), (9, 8, 16)]
)
def test_vllm_loads_fetched_adapters_at_run_time(count: int, slots: int, cpu: int | None) -> None:
    """Every adapter fetched (hf://, s3://): not in the args, listed in the ConfigMap the sidecar reads, the switch
    on; the slots rounded up to a power of two, so the pod template (its hash) changes only when a limit does."""
    adapters = [{"name": f"a{i}", "uri": f"s3://b/a{i}/", "rank": 8} for i in range(count)]
    body = {"model": {**L8, "credentialsSecret": "hf-token"}, "backend": "vllm", "adapters": adapters}
    d = _select(body)
    c = ENGINES["vllm"](d, spec(**body), "ib")
    args = list(c.args)
    assert "--lora-modules" not in args and "--enable-lora" in args
    assert args[args.index("--max-loras") + 1] == str(slots)
    assert (args[args.index("--max-cpu-loras") + 1] if "--max-cpu-loras" in args else None) == (
        str(cpu) if cpu else None
    )
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in c.env
    (sidecar,) = c.init_containers
    assert sidecar["name"] == "adapters" and sidecar["restartPolicy"] == "Always"
    assert sidecar["command"][:4] == [
        "inference-backend",
        "adapter",
        "sync",
        "/etc/inference-backend/adapters/adapters.json",
    ]
    assert sidecar["command"][sidecar["command"].index("--max-rank") + 1] == "8"
    assert [e["name"] for e in sidecar.get("env", [])] == ["HF_TOKEN", "HF_ENDPOINT"]  # the model's store's Secret
    assert c.adapters_config is not None
    listed = json.loads(c.adapters_config)["adapters"]
    assert [(a["name"], a["path"], a["rank"]) for a in listed] == [
        (f"a{i}", f"/adapters/a{i}", 8) for i in range(count)
    ]
    assert any("rolls nothing out unless the limits rendered change" in r for r in d.reasons)


def test_run_time_adapters_leave_the_pod_template_hash() -> None:
    """Adding an adapter within the limits changes the ConfigMap only; a higher declared rank changes the template."""
    from inference_backend.api import InferenceBackend
    from inference_backend.render import render_result

    def rendered(adapters: list[dict[str, Any]]) -> tuple[str, Any]:
        body = {"model": L8, "backend": "vllm", "adapters": adapters}
        ib = InferenceBackend.model_validate(
            {
                "metadata": {"name": "ib", "namespace": "ns"},
                "spec": spec(**body).model_dump(by_alias=True, exclude_none=True),
            }
        )
        r = render_result(ib, _select(body))
        (cm,) = [o for o in r.objects if o["kind"] == "ConfigMap"]
        return r.spec_hash, json.loads(cm["data"]["adapters.json"])

    one = rendered([{"name": "a", "uri": "s3://b/a/", "rank": 8}, {"name": "b", "uri": "s3://b/b/", "rank": 8}])
    other = rendered([{"name": "a", "uri": "s3://b/a/", "rank": 8}, {"name": "c", "uri": "hf://o/c", "rank": 8}])
    higher = rendered([{"name": "a", "uri": "s3://b/a/", "rank": 8}, {"name": "c", "uri": "hf://o/c", "rank": 64}])
    assert one[0] == other[0] and one[1] != other[1]
    assert higher[0] != other[0]  # vLLM's --max-lora-rank 8 -> 64: rolls out


def test_run_time_adapters_on_the_runner_leave_the_template_whatever_their_rank() -> None:
    """Our runner has no rank flag: the sidecar checks files against its own limit (1024) and each adapter's declared
    rank from the ConfigMap, so adding one with a higher declared rank changes no pod template."""
    from inference_backend.api import InferenceBackend
    from inference_backend.render import render_result

    def rendered(adapters: list[dict[str, Any]]) -> tuple[str, list[Any]]:
        body = {"model": {"modelRef": "qwen-0-5b"}, "backend": "pytorch", "hardware": {"accelerator": "cpu"}}
        body["adapters"] = adapters
        doc = spec(**body).model_dump(by_alias=True, exclude_none=True)
        ib = InferenceBackend.model_validate({"metadata": {"name": "ib", "namespace": "ns"}, "spec": doc})
        r = render_result(ib, _select(body, CPU))
        (cm,) = [o for o in r.objects if o["kind"] == "ConfigMap"]
        return r.spec_hash, json.loads(cm["data"]["adapters.json"])["adapters"]

    one = rendered([{"name": "sql", "uri": "s3://b/sql/", "rank": 4}])
    two = rendered([{"name": "sql", "uri": "s3://b/sql/", "rank": 4}, {"name": "poems", "uri": "s3://b/p/", "rank": 8}])
    assert one[0] == two[0] and [a["rank"] for a in two[1]] == [4, 8]


def test_no_adapters_renders_nothing_new() -> None:
    d = _select({"model": L8, "backend": "vllm"})
    c = ENGINES["vllm"](d, spec(model=L8, backend="vllm"), "ib")
    assert "--enable-lora" not in c.args and not c.init_containers


def test_sglang_turns_draft_speculation_off_and_tgi_its_prefix_cache() -> None:
    sg = {
        "model": L8,
        "backend": "sglang",
        "adapters": [{**ADAPTER, "rank": 8}],
        "speculativeDecoding": {"draftModelRef": "llama-3-2-1b"},
    }
    d = _select(sg)
    assert not d.speculation.enabled and "LoRA adapters" in d.speculation.reason
    c = ENGINES["sglang"](d, spec(**sg), "ib")
    assert "--speculative-algorithm" not in c.args
    assert c.args[c.args.index("--lora-paths") + 1] == "sql=/adapters/sql"
    assert c.args[c.args.index("--max-lora-rank") + 1] == "8"
    # an adapter without a declared rank: SGLang infers the limit itself, so no --max-lora-rank
    sg2 = {"model": L8, "backend": "sglang", "adapters": [ADAPTER]}
    assert "--max-lora-rank" not in ENGINES["sglang"](_select(sg2), spec(**sg2), "ib").args
    tgi = {"model": L8, "backend": "tgi", "adapters": [ADAPTER]}
    d = _select(tgi)
    assert not d.prefix_cache and any("prefix cache off" in u for u in d.unsupported)
    c = ENGINES["tgi"](d, spec(**tgi), "ib")
    env = {e["name"]: e.get("value") for e in c.env}
    assert env["LORA_ADAPTERS"] == "sql=/adapters/sql" and env["PREFIX_CACHING"] == "0"
    with pytest.raises(InvalidSpec, match="LORA_ADAPTERS is set by the operator"):
        ENGINES["tgi"](d, spec(**tgi, engine={"env": [{"name": "LORA_ADAPTERS", "value": "x"}]}), "ib")


def test_llamacpp_takes_gguf_files_and_pytorch_peft_directories() -> None:
    gguf = {
        "model": {"modelRef": "llama-3-2-1b-gguf"},
        "hardware": {"accelerator": "cpu"},
        "adapters": [{"name": "pirate", "uri": "https://example.com/a/pirate.gguf"}],
    }
    d = _select(gguf, CPU)
    assert d.backend == "llamacpp"
    c = ENGINES["llamacpp"](d, spec(**gguf), "ib")
    # loaded at scale 0 (a request without a lora field gets the base model); not --lora-init-without-apply, which
    # leaves the server's default scale at 1 in b11312 (tests/runners/test_llamacpp_lora.py)
    assert c.args[c.args.index("--lora-scaled") + 1] == "/adapters/pirate/pirate.gguf:0"
    assert "--lora" not in c.args and "--lora-init-without-apply" not in c.args
    colon = {**gguf, "adapters": [{"name": "pi:rate", "uri": "https://example.com/a/pirate.gguf"}]}
    with pytest.raises(InvalidSpec, match=r"spec.adapters\[0\].*cannot take a path holding ',' or ':'"):
        ENGINES["llamacpp"](_select(colon, CPU), spec(**colon), "ib")
    # llama-server chooses adapters by index (the request's lora field): the decision says which index is which
    assert d.adapters.lora_ids == (("pirate", 0),) and d.to_json()["adapters"]["loraIds"] == {"pirate": 0}
    assert any('pirate: "lora": [{"id": 0, "scale": 1.0}]' in r for r in d.reasons), d.reasons
    bad = {**gguf, "adapters": [{"name": "pirate", "uri": "https://example.com/a/pirate/"}]}
    with pytest.raises(InvalidSpec, match=r"spec.adapters\[0\].uri.*GGUF adapter files"):
        ENGINES["llamacpp"](_select(bad, CPU), spec(**bad), "ib")
    pt = {
        "model": {"modelRef": "qwen-0-5b"},
        "backend": "pytorch",
        "hardware": {"accelerator": "cpu"},
        "adapters": [ADAPTER],
    }
    c = ENGINES["pytorch"](_select(pt, CPU), spec(**pt), "ib")
    assert "--adapter" not in c.args and json.loads(c.adapters_config or "{}")["adapters"][0]["name"] == "sql"
    pt["adapters"] = [{"name": "sql", "uri": "oci://registry.example.com/sql-lora:1"}]  # a volume: given at start
    c = ENGINES["pytorch"](_select(pt, CPU), spec(**pt), "ib")
    assert c.args[c.args.index("--adapter") + 1] == "sql=/adapters/sql" and c.adapters_config is None


# ---- adapter facts from real files ------------------------------------------------------------------------------


def _peft_dir(tmp: Path, rank: int = 8, modules: tuple[str, ...] = ("q_proj", "v_proj"), **cfg: Any) -> Path:
    from safetensors.numpy import save_file

    d = tmp / f"peft-r{rank}"
    d.mkdir()
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 16,
        "target_modules": list(modules),
        "base_model_name_or_path": "acme/tiny-llama",
        "task_type": "CAUSAL_LM",
        **cfg,
    }
    (d / "adapter_config.json").write_text(json.dumps(config))
    tensors = {}
    for layer in range(2):
        for m in modules:
            base = f"base_model.model.model.layers.{layer}.self_attn.{m}"
            tensors[f"{base}.lora_A.weight"] = np.zeros((rank, 64), np.float32)
            tensors[f"{base}.lora_B.weight"] = np.zeros((64, rank), np.float32)
    save_file(tensors, str(d / "adapter_model.safetensors"))
    return d


def _gguf_adapter(tmp: Path, rank: int = 4, general_type: str = "adapter") -> Path:
    import gguf

    path = tmp / "adapter.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.type", general_type)
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 8.0)
    for layer in range(2):
        # numpy (rank, n_embd) is ggml [n_embd, rank] (gguf-py reverses the dimensions)
        w.add_tensor(f"blk.{layer}.attn_q.weight.lora_a", np.zeros((rank, 64), np.float32))
        w.add_tensor(f"blk.{layer}.attn_q.weight.lora_b", np.zeros((64, rank), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_peft_facts_and_limits(tmp_path: Path) -> None:
    d = _peft_dir(tmp_path, 16, auto_mapping={"base_model_class": "LlamaForCausalLM", "parent_library": "x"})
    facts = read_adapter(d)
    assert (facts.format, facts.rank, facts.target_modules) == ("peft", 16, ("q_proj", "v_proj"))
    assert facts.base_architecture == "LlamaForCausalLM" and facts.base_model == "acme/tiny-llama"
    ok = Limits(16, "peft", ("q_proj", "k_proj", "v_proj"), 16, "LlamaForCausalLM", dora=False)
    assert problems(facts, ok) == []
    assert problems(facts, Limits(8, "peft")) == [
        "rank 16 is above the engine's limit 8 (declare it in spec.adapters[].rank so that the limit covers it, "
        "where the engine allows)"
    ]
    found = problems(facts, Limits(64, "gguf", ("q_proj",), 32, "Qwen2ForCausalLM"))
    assert len(found) == 4 and "target modules v_proj" in found[2] and "Qwen2ForCausalLM" in found[3]
    with pytest.raises(InspectError, match="cannot be served: rank 16 is above"):
        check_adapter(d, Limits(8, "peft"))


def test_peft_rank_pattern_and_bad_configs(tmp_path: Path) -> None:
    d = _peft_dir(tmp_path, 8)
    cfg = json.loads((d / "adapter_config.json").read_text())
    (d / "adapter_config.json").write_text(json.dumps({**cfg, "r": 4}))  # a module with rank_pattern 8
    assert read_adapter(d).rank == 8
    (d / "adapter_config.json").write_text(json.dumps({**cfg, "peft_type": "PREFIX_TUNING"}))
    with pytest.raises(InspectError, match="only LoRA adapters"):
        read_adapter(d)
    (d / "adapter_config.json").write_text(json.dumps({**cfg, "use_dora": True}))
    assert problems(read_adapter(d), Limits(64, "peft", dora=False)) == [
        "a DoRA adapter (use_dora), which the engine does not serve"
    ]
    (d / "adapter_model.safetensors").unlink()
    with pytest.raises(InspectError, match="no adapter weights"):
        read_adapter(d)
    assert not is_adapter(tmp_path)


def test_gguf_adapter_facts(tmp_path: Path) -> None:
    path = _gguf_adapter(tmp_path, rank=4)
    facts = read_adapter(path)
    assert (facts.format, facts.rank, facts.target_modules, facts.base_architecture) == (
        "gguf",
        4,
        ("attn_q",),
        "llama",
    )
    assert facts.alpha == 8.0 and is_adapter(path) and is_adapter(tmp_path)
    assert problems(facts, Limits(1024, "peft")) == ["a gguf adapter, and the engine loads peft adapters"]
    (tmp_path / "m").mkdir()
    model = _gguf_adapter(tmp_path / "m", general_type="model")
    with pytest.raises(InspectError, match="not a LoRA adapter"):
        read_adapter(model)
    (tmp_path / "trunc.gguf").write_bytes(path.read_bytes()[:40])
    with pytest.raises(InspectError, match=r"trunc\.gguf"):
        read_adapter(tmp_path / "trunc.gguf")


def test_model_inspect_prints_the_adapter_entry(tmp_path: Path) -> None:
    d = _peft_dir(tmp_path, 32)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "inference_backend.cli",
            "model",
            "inspect",
            str(d),
            "--uri",
            "s3://b/sql/",
            "--name",
            "sql",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout)
    assert doc["adapter"] == {"name": "sql", "uri": "s3://b/sql/", "rank": 32, "targetModules": ["q_proj", "v_proj"]}
    assert doc["facts"]["baseModel"] == "acme/tiny-llama"
    spec(model=L8, adapters=[doc["adapter"]])  # what it prints is a valid spec.adapters entry


def test_adapter_check_command_exit_status(tmp_path: Path) -> None:
    d = _peft_dir(tmp_path, 32)
    cmd = [sys.executable, "-m", "inference_backend.cli", "adapter", "check", str(d), "--adapter-format", "peft"]
    assert subprocess.run([*cmd, "--max-rank", "32"], capture_output=True).returncode == 0
    bad = subprocess.run([*cmd, "--max-rank", "16"], capture_output=True, text=True)
    assert bad.returncode == 1 and "rank 32 is above the engine's limit 16" in bad.stderr
