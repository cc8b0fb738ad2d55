"""Per-engine flag mapping (table-driven), escape-hatch collisions, artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ib_testkit.factories import cluster, node, spec
from ib_testkit.golden import INPUTS, ROOT, decide
from inference_backend.api import InferenceBackend
from inference_backend.decision import InvalidSpec, ResolvedModel
from inference_backend.engines import ENGINES, artifacts, card, llamacpp, vllm
from inference_backend.engines.base import EngineContainer
from inference_backend.selection import select


def _container(name: str, **spec_changes: Any) -> EngineContainer:
    ib, decision = decide(INPUTS / f"{name}.yaml")
    assert isinstance(ib, InferenceBackend)
    spec = ib.spec.model_copy(update=spec_changes) if spec_changes else ib.spec
    assert decision.backend is not None
    return ENGINES[decision.backend](decision, spec, ib.metadata.name)


def _value(args: tuple[str, ...], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


# (golden input, flag, expected value; None = present without value, "ABSENT" = not emitted)
MAPPING = [
    ("vllm-gpu-draft", "--max-num-seqs", "64"),
    ("vllm-gpu-draft", "--max-num-batched-tokens", "8192"),
    ("vllm-gpu-draft", "--gpu-memory-utilization", "0.9"),
    ("vllm-gpu-draft", "--block-size", "16"),
    ("vllm-gpu-draft", "--max-model-len", "8192"),
    ("vllm-gpu-draft", "--served-model-name", "llama-3.1-8b"),
    ("vllm-gpu-draft", "--enable-prefix-caching", None),
    ("vllm-replicas-noprefix", "--disable-prefix-caching", None),
    ("vllm-replicas-noprefix", "--no-enable-prefix-caching", "ABSENT"),
    ("vllm-tp4", "--tensor-parallel-size", "4"),
    ("vllm-tp8-fp8", "--tensor-parallel-size", "8"),
    ("vllm-tp8-fp8", "--quantization", "fp8"),
    ("vllm-awq-l4", "--quantization", "ABSENT"),
    ("vllm-awq-l4", "--dtype", "float16"),
    ("vllm-ngram-kvfp8-offload", "--kv-cache-dtype", "fp8"),
    ("vllm-ngram-kvfp8-offload", "--kv-offloading-size", "32"),
    ("vllm-ngram-kvfp8-offload", "--kv-offloading-backend", "native"),
    ("vllm-ngram-kvfp8-offload", "--swap-space", "ABSENT"),
    ("tgi-ngram", "--speculate", "3"),
    ("tgi-ngram", "--cuda-memory-fraction", "0.85"),
    ("tgi-ngram", "--max-total-tokens", "4096"),
    ("tgi-ngram", "--max-input-tokens", "4095"),
    ("tgi-ngram", "--port", "8000"),
    ("tgi-ngram", "-p", "ABSENT"),
    ("tgi-ngram", "--prometheus-port", "ABSENT"),
    ("tgi-tp2", "--num-shard", "2"),
    ("tgi-tp2", "--kv-cache-dtype", "fp8_e4m3fn"),
    ("tgi-tp2", "--max-batch-size", "48"),
    ("tgi-tp2", "--max-batch-prefill-tokens", "8192"),
    ("tgi-gptq-noprefix", "--quantize", "gptq"),
    ("tgi-gptq-noprefix", "--dtype", "ABSENT"),
    ("tgi-gptq-noprefix", "--max-concurrent-requests", "200"),
    ("llamacpp-cpu-draft", "-np", "4"),
    ("llamacpp-cpu-draft", "-c", str(8192 * 4)),
    ("llamacpp-cpu-draft", "-ctk", "q8_0"),
    ("llamacpp-cpu-draft", "-ctv", "q8_0"),
    ("llamacpp-cpu-draft", "--flash-attn", "on"),
    ("llamacpp-cpu-draft", "-ngl", "0"),
    ("llamacpp-cpu-draft", "--spec-draft-n-max", "8"),
    ("llamacpp-cpu-draft", "--spec-type", "draft-simple"),
    ("llamacpp-cpu-draft", "--draft-max", "ABSENT"),
    ("llamacpp-cpu-draft", "-cb", None),
    ("llamacpp-cpu-draft", "--cache-prompt", None),
    ("llamacpp-cpu-draft", "--metrics", None),
    ("llamacpp-gpu-static-pvc", "--no-cont-batching", None),
    ("llamacpp-gpu-static-pvc", "-ngl", "999"),
    ("llamacpp-gpu-static-pvc", "-m", "/models/qwen2.5-7b-instruct-q8_0.gguf"),
    ("llamacpp-gpu-static-pvc", "--no-cache-prompt", None),
    ("llamacpp-gpu-static-pvc", "--cache-reuse", "0"),
    ("llamacpp-gpu-static-pvc", "-a", "qwen-7b"),
    ("llamacpp-gpu-static-pvc", "-b", "2048"),
    ("llamacpp-gpu-static-pvc", "-ub", "512"),
    ("llamacpp-multigpu", "-sm", "layer"),
    ("onnxruntime-gpu-s3", "--batching", "dynamic"),
    ("onnxruntime-gpu-s3", "--max-wait-ms", "10"),
    ("onnxruntime-cpu-gs-static", "--batching", "static"),
    ("onnxruntime-cpu-gs-static", "--no-enable-prefix-caching", None),
    ("onnxruntime-cpu-gs-static", "--providers", "CPUExecutionProvider"),
    ("pytorch-cpu-draft-oci", "--draft-model", "/draft-models"),
    ("pytorch-cpu-draft-oci", "--num-speculative-tokens", "4"),
    ("pytorch-gpu-hf-continuous", "--batching", "continuous"),
    ("pytorch-gpu-hf-continuous", "--max-batch-tokens", "4096"),
    ("pytorch-gpu-hf-continuous", "--device", "cuda"),
]


@pytest.mark.parametrize(("case", "flag", "expected"), MAPPING, ids=[f"{c}:{f}" for c, f, _ in MAPPING])
def test_flag_mapping(case: str, flag: str, expected: str | None) -> None:
    args = _container(case).args
    if expected == "ABSENT":
        assert flag not in args
    elif expected is None:
        assert flag in args
    else:
        assert _value(args, flag) == expected


def test_every_engine_has_explicit_command_pinned_image_and_probes() -> None:
    for path in sorted(INPUTS.glob("*.yaml")):
        c = _container(path.stem)
        assert c.command, path.name
        assert ":" in c.image.rsplit("/", 1)[-1] and not c.image.endswith(":latest"), c.image
        assert c.readiness_probe.path == "/health"
        assert c.ports[0]["containerPort"] == 8000


def test_vllm_speculative_config_draft_and_ngram() -> None:
    draft = _value(_container("vllm-gpu-draft").args, "--speculative-config")
    assert draft == '{"method":"draft_model","model":"meta-llama/Llama-3.2-1B-Instruct","num_speculative_tokens":5}'
    ngram = _value(_container("vllm-ngram-kvfp8-offload").args, "--speculative-config")
    assert ngram is not None and '"method":"ngram"' in ngram and '"prompt_lookup_max":4' in ngram


def test_tgi_prefix_cache_env() -> None:
    env = {e["name"]: e.get("value") for e in _container("tgi-gptq-noprefix").env}
    assert env["PREFIX_CACHING"] == "0"
    assert {e["name"]: e.get("value") for e in _container("tgi-ngram").env}["PREFIX_CACHING"] == "1"


def test_llamacpp_build_is_one_constant() -> None:
    assert llamacpp.IMAGE_CPU.endswith(f"server-b{llamacpp.LLAMA_CPP_BUILD}")
    assert llamacpp.IMAGE_CUDA.endswith(f"server-cuda-b{llamacpp.LLAMA_CPP_BUILD}")


def test_llamacpp_build_matches_the_contract_pin() -> None:
    """The images and the binary the contract tests boot are the same build (hack/llama-cpp.version)."""
    pins = dict(
        line.split("=", 1)
        for line in (ROOT / "hack" / "llama-cpp.version").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert int(pins["LLAMA_CPP_BUILD"]) == llamacpp.LLAMA_CPP_BUILD
    assert f"b{pins['LLAMA_CPP_BUILD']}" == llamacpp.VERSION


def test_bitsandbytes_never_goes_to_vllm() -> None:
    """vLLM 0.33.0 has no bitsandbytes method: auto picks TGI; a forced vllm is refused; the renderer refuses."""
    nodes = cluster(node("g", "h100"))
    model = {
        "uri": "hf://x/y",
        "parameters": "8B",
        "dtype": "bfloat16",
        "contextLength": 4096,
        "quantization": "bitsandbytes",
    }
    auto = select(spec(model=model), nodes, {})
    assert auto.backend == "tgi"
    forced = select(spec(model=model, backend="vllm"), nodes, {})
    assert not forced.satisfiable
    assert "quantization bitsandbytes is not one it runs" in forced.reasons[-1]
    with pytest.raises(InvalidSpec, match="bitsandbytes"):
        vllm.container(auto, spec(model=model), "x")


def test_multi_gpu_gets_dev_shm() -> None:
    c = _container("vllm-tp4")
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in c.volumes
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c.volume_mounts
    assert not any(v["name"] == "dshm" for v in _container("vllm-gpu-draft").volumes)


def test_gpu_resources_and_mig() -> None:
    assert _container("vllm-tp4").resources["limits"]["nvidia.com/gpu"] == 4
    assert _container("vllm-mig").resources["limits"]["nvidia.com/mig-1g.10gb"] == 1


def test_spec_resources_override() -> None:
    assert _container("vllm-replicas-noprefix").resources["requests"]["cpu"] == "8"


# ---- collisions -------------------------------------------------------------------------------------------------

COLLISIONS = [
    ("vllm-gpu-draft", "--max-num-seqs=8", "--max-num-seqs", "spec.batching.maxBatchSize"),
    ("vllm-gpu-draft", "--max_num_seqs", "--max_num_seqs (same flag as --max-num-seqs)", "maxBatchSize"),
    ("vllm-tp4", "-tp", "-tp (same flag as --tensor-parallel-size)", "placement"),
    (
        "vllm-gpu-draft",
        "--no-enable-prefix-caching",
        "--no-enable-prefix-caching (same flag as --enable-prefix-caching)",
        "spec.prefixCache.enabled",
    ),
    ("tgi-ngram", "-p", "-p (same flag as --port)", "port 8000"),
    ("tgi-ngram", "--speculate=2", "--speculate", "spec.speculativeDecoding.numSpeculativeTokens"),
    ("llamacpp-cpu-draft", "--ctx-size", "--ctx-size (same flag as -c)", "spec.model.contextLength"),
    ("llamacpp-cpu-draft", "--draft-max", "--draft-max (same flag as --spec-draft-n-max)", "numSpeculativeTokens"),
    ("llamacpp-cpu-draft", "--parallel=2", "--parallel (same flag as -np)", "spec.batching.maxBatchSize"),
    ("llamacpp-gpu-static-pvc", "-cb", "-cb (same flag as --no-cont-batching)", "spec.batching.strategy"),
    ("pytorch-gpu-pvc", "--max-batch-size", "--max-batch-size", "spec.batching.maxBatchSize"),
]


@pytest.mark.parametrize(("case", "extra", "shown", "source"), COLLISIONS, ids=[c[1] for c in COLLISIONS])
def test_extra_arg_collision_names_the_field(case: str, extra: str, shown: str, source: str) -> None:
    ib, _ = decide(INPUTS / f"{case}.yaml")
    assert isinstance(ib, InferenceBackend)
    engine = ib.spec.engine.model_copy(update={"extra_args": ["--some-unrelated-flag", extra]})
    with pytest.raises(InvalidSpec) as err:
        _container(case, engine=engine)
    assert err.value.field == "spec.engine.extraArgs"
    assert f"{shown} is set by the operator from" in err.value.message
    assert source in err.value.message


def test_env_collision_names_the_field() -> None:
    ib, _ = decide(INPUTS / "tgi-ngram.yaml")
    assert isinstance(ib, InferenceBackend)
    from inference_backend.api.common import EnvVar

    for name in ("PREFIX_CACHING", "MAX_TOTAL_TOKENS"):
        engine = ib.spec.engine.model_copy(update={"env": [EnvVar(name=name, value="0")]})
        with pytest.raises(InvalidSpec) as err:
            _container("tgi-ngram", engine=engine)
        assert err.value.field == "spec.engine.env[0]"


def test_overrides_applied_last() -> None:
    c = _container("vllm-overrides")
    assert c.image == "registry.example.com/vllm-openai:v0.33.0-patched"
    assert c.args[-3:] == ("--enable-auto-tool-choice", "--tool-call-parser=hermes", "--trust-remote-code")
    assert c.env[-1] == {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}


# ---- artifacts --------------------------------------------------------------------------------------------------


def _model(uri: str, secret: str | None = "creds") -> ResolvedModel:
    return ResolvedModel(uri, "safetensors", 1, "bfloat16", "none", 2048, 1, 1, 1, "test", credentials_secret=secret)


def test_artifacts_per_scheme() -> None:
    hf = artifacts.resolve(_model("hf://org/repo/file.gguf"), card("llamacpp").own_hf_loader)
    assert (hf.hf_repo, hf.hf_file) == ("org/repo", "file.gguf")
    assert hf.env[0]["valueFrom"]["secretKeyRef"] == {"name": "creds", "key": "HF_TOKEN"}
    hf_runner = artifacts.resolve(_model("hf://org/repo"), card("pytorch").own_hf_loader)
    assert hf_runner.init_containers[0]["command"] == ["inference-backend", "fetch", "hf://org/repo", "/models"]
    pvc = artifacts.resolve(_model("pvc://claim/dir/sub"), card("vllm").own_hf_loader)
    assert pvc.local_path == "/models/dir/sub"
    assert pvc.volumes[0]["persistentVolumeClaim"] == {"claimName": "claim", "readOnly": True}
    s3 = artifacts.resolve(_model("s3://bucket/m/model.onnx"), card("onnxruntime").own_hf_loader)
    assert s3.local_path == "/models/model.onnx" and s3.directory == "/models"
    keys = [e["name"] for e in s3.init_containers[0]["env"]]
    assert keys == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"]
    assert all("value" not in e for e in s3.init_containers[0]["env"])  # never inline
    oci = artifacts.resolve(_model("oci://reg/img:v1"), card("vllm").own_hf_loader, "draft")
    assert oci.volumes[0]["image"] == {"reference": "reg/img:v1", "pullPolicy": "IfNotPresent"}
    assert oci.mounts[0]["mountPath"] == "/draft-models"


def test_unsupported_scheme_names_the_field() -> None:
    with pytest.raises(InvalidSpec) as err:
        artifacts.resolve(_model("ftp://x/y"), card("vllm").own_hf_loader)
    assert err.value.field == "spec.model.uri"


def test_all_inputs_are_files() -> None:
    assert all(isinstance(p, Path) for p in INPUTS.glob("*.yaml"))
