"""Our PyTorch eager runner (`ib-pytorch-runner`, ghcr.io/inference-backend/pytorch-runner:<package version>).

Flags: runners/common/args.py (shared) and runners/pytorch/args.py (--device, --draft-model,
--num-speculative-tokens) of this repository.
"""

from __future__ import annotations

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Decision
from inference_backend.engines import artifacts, runners
from inference_backend.engines.base import ArgBuilder, EngineContainer, placement
from inference_backend.engines.card import (
    FITTED,
    NOT_MEASURED_ON_GPU,
    Efficiency,
    EngineCard,
    Lora,
    Performance,
    Profile,
)
from inference_backend.engines.profiles_7b import measured_rows
from inference_backend.engines.profiles_measured import MEASURED_CPU

ENGINE = "pytorch"
VERSION = runners.VERSION
TORCH_COMPILE = "torch.compile"
"""The variant of PyTorch serving that published rows measured (gpt-fast, PyTorch 2.1 with torch.compile: compiled
graphs with CUDA graphs), not our eager runner: Performance.variants."""
IMAGE = f"ghcr.io/inference-backend/pytorch-runner:{VERSION}"
COMMAND = ("ib-pytorch-runner",)
STRATEGIES = ("static", "dynamic", "continuous")  # pytorch/args.py add_common_flags(batching modes)


def _extra(decision: Decision, a: ArgBuilder, notes: list[str]) -> artifacts.Artifact | None:
    # pytorch/args.py --device {auto,cpu,cuda}
    a.add("--device", "cuda" if placement(decision).gpu is not None else "cpu", source="the decision's placement")
    s = decision.speculation
    if not s.enabled or s.draft is None:
        return None
    assert decision.model is not None
    art = artifacts.resolve(
        artifacts.draft_model(decision.model, s.draft), False, "draft"
    )  # our runners take a local directory
    assert art.directory is not None
    # pytorch/args.py --draft-model PATH (a directory sharing the target's tokenizer), --num-speculative-tokens N
    a.add("--draft-model", art.directory, source="spec.speculativeDecoding.draftModelRef")
    a.add("--num-speculative-tokens", s.num_tokens, source="spec.speculativeDecoding.numSpeculativeTokens")
    return art


def container(decision: Decision, spec: InferenceBackendSpec, name: str) -> EngineContainer:
    return runners.container(
        decision,
        spec,
        name,
        engine=ENGINE,
        image=IMAGE,
        command=COMMAND,
        strategies=STRATEGIES,
        extra=_extra,
        lora_card=LORA,
    )


LORA = Lora(
    serves=True,
    how="the OpenAI model field names the adapter (--adapter NAME=PATH); rows of one batch may run different "
    "adapters and the base model",
    formats=frozenset({"peft"}),
    max_rank=1024,
    rank_choices=(),
    default_rank=1024,
    architectures=frozenset(),
    target_modules=frozenset(),
    runtime="POST /v1/load_lora_adapter and /v1/unload_lora_adapter, vLLM's bodies "
    "(VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)",
    prefix_cache=True,
    speculative=frozenset(),
    dora=True,
    source="runners/pytorch/adapters.py of this repository: PEFT's LoraModel on the Transformers model (any "
    "architecture and module PEFT adapts, DoRA included); the prefix cache is kept per adapter; "
    "runners/common/lora_updates.py: the run-time endpoints",
    info_metric="vllm:lora_requests_info",
    runtime_switch="VLLM_ALLOW_RUNTIME_LORA_UPDATING",
    info_metric_source="runners/common/metrics.py of this repository, vLLM 0.33.0's name and labels "
    "(v1/metrics/loggers.py); max_lora is --max-batch-size (each row may run its own adapter)",
)


# Our PyTorch eager runner: every batching strategy, prefix cache, assisted generation with a draft.
PERFORMANCE = Performance(
    efficiency={
        # transformers' eager forward, one Python step per token; not the calibration set's gpt-fast rows
        # (torch.compile with CUDA graphs, 3-4x faster per token on an A100)
        "nvidia": Efficiency(
            0.35,
            0.60,
            5.0,
            400.0,
            10.0,
            "estimate: transformers' eager forward, kernels launched "
            "per layer from Python (~10 per layer at ~40 us); " + NOT_MEASURED_ON_GPU.strip(),
            400.0,
        ),
    },
    max_sequences=16,
    max_sequences_source="the runner's --max-batch-size default 16 (runners/common/args.py)",
    variants=(
        (
            "nvidia",
            TORCH_COMPILE,
            Efficiency(
                0.75,
                0.80,
                2.0,
                400.0,
                40.0,
                FITTED + " (gpt-fast on A100, PyTorch 2.1 torch.compile on A100: the gpt-fast and Mistral ONNX model "
                "card rows; not our runner, which these factors never rate)",
                0.0,
            ),
        ),
        (
            "amd",
            TORCH_COMPILE,
            Efficiency(
                0.75, 0.80, 2.0, 400.0, 40.0, "assumed as on NVIDIA (one gpt-fast MI250X row, too few to fit)", 0.0
            ),
        ),
    ),
)

CARD = EngineCard(
    name=ENGINE,
    title="PyTorch",
    version=VERSION,
    formats=frozenset({"safetensors", "pytorch"}),
    accelerators=frozenset({"gpu", "cpu"}),
    batching=("continuous", "dynamic", "static"),
    prefix_cache=True,
    speculative=frozenset({"draft"}),
    quantizations=frozenset({"none"}),
    kv_dtypes=frozenset({"float16", "bfloat16"}),
    multi_gpu=False,
    multi_node=False,
    min_compute=(6, 0),
    bf16_min_compute=(8, 0),
    own_hf_loader=False,
    kv_offload=False,
    float32_on_gpu="float32",
    images={"gpu": IMAGE, "cpu": IMAGE},
    devices={"nvidia": IMAGE},
    endpoints=runners.ENDPOINTS,
    platforms={IMAGE: runners.PLATFORMS},
    profiles={
        "gpu": Profile(80, 110, 15.0, 2, NOT_MEASURED_ON_GPU + "HF generate, 1/24 of vLLM per the vLLM blog"),
        "cpu": Profile(**MEASURED_CPU[ENGINE], measured=measured_rows(ENGINE)),
    },
    performance=PERFORMANCE,
    summary="the research fallback: any Transformers model in eager PyTorch, every batching strategy",
    render=container,
    layer_split=False,
    slots=False,
    run_as_user=10001,
    run_as="images/pytorch-runner/Dockerfile: USER 10001",
    autoscaling=runners.autoscaling(
        "seconds to a minute for the small models it is the fallback for: Transformers loads the safetensors, "
        "no compile or graph capture"
    ),
    prefix_cache_caveat="",
    auto_batching={},
    flag_bounds={},  # Python ints: no bounded flag
    lora=LORA,
)
