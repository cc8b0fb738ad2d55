"""Our ONNX Runtime server (`ib-onnxruntime-server`, ghcr.io/inference-backend/onnxruntime-server:<package version>;
on NVIDIA GPUs its CUDA build, tag <package version>-cuda: images/onnxruntime-server/Dockerfile --build-arg
DEVICE=cuda, onnxruntime-gpu + onnxruntime-genai-cuda).

Flags: runners/common/args.py (shared) and runners/onnx/args.py (--providers) of this repository. No speculative
decoding (the selection already reports it off).
"""

from __future__ import annotations

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Decision
from inference_backend.engines import artifacts, lora, runners
from inference_backend.engines.base import ArgBuilder, EngineContainer, device_image, placement
from inference_backend.engines.card import (
    FITTED,
    NOT_MEASURED_ON_GPU,
    Efficiency,
    EngineCard,
    Performance,
    Platforms,
    Profile,
)
from inference_backend.engines.profiles_7b import measured_rows
from inference_backend.engines.profiles_measured import MEASURED_CPU

ENGINE = "onnxruntime"
VERSION = runners.VERSION
IMAGE = f"ghcr.io/inference-backend/onnxruntime-server:{VERSION}"
IMAGE_CUDA = f"{IMAGE}-cuda"
COMMAND = ("ib-onnxruntime-server",)
STRATEGIES = ("static", "continuous", "dynamic")  # onnx/args.py add_common_flags(batching modes)


def _extra(decision: Decision, a: ArgBuilder, notes: list[str]) -> artifacts.Artifact | None:
    # onnx/args.py --providers: execution providers in order of preference
    gpu = placement(decision).gpu is not None
    providers = "CUDAExecutionProvider,CPUExecutionProvider" if gpu else "CPUExecutionProvider"
    a.add("--providers", providers, source="the decision's placement")
    return None


def container(decision: Decision, spec: InferenceBackendSpec, name: str) -> EngineContainer:
    image = device_image(decision, {"nvidia": IMAGE_CUDA}, IMAGE)
    return runners.container(
        decision, spec, name, engine=ENGINE, image=image, command=COMMAND, strategies=STRATEGIES, extra=_extra
    )


# Our ONNX Runtime server: dynamic, static and continuous batching (continuous: new requests join at each step;
# on a GPU genai's Generator runs onnxruntime-genai format models and a joining group runs its own forward), prefix
# cache (on CPU; on a GPU our exporter's format only), one device per replica. `batching.strategy: auto` is continuous
# on CPU, where joining rows share one forward (onnx/gqa.py, and our exporter's format), and dynamic on a GPU, where
# each joining group would add a forward per step: at the 7B shape on 2 cores, 8 requests sent at once made 7.1-7.3
# tok/s with continuous batching and 5.3-6.4 with dynamic, whose 10 ms window split the burst in two
# (docs/engine-profiles.md).
PERFORMANCE = Performance(
    efficiency={
        "nvidia": Efficiency(
            0.75,
            0.90,
            0.5,
            150.0,
            10.0,
            "prefill, decode and step_ms " + FITTED + " (ONNX Runtime CUDA, fp16: the Mistral-7B ONNX model card's "
            "prompt latencies on an A100, 32 to 2,048 tokens: the short prompts' steps read the weights at 0.9 of "
            "the bandwidth, clipped mean |log2| 0.51 -> 0.20); the rest an estimate: onnxruntime-genai CUDA graphs "
            "off, one step per token, a launch floor per layer; " + NOT_MEASURED_ON_GPU.strip(),
            150.0,
        ),
    },
    max_sequences=16,
    max_sequences_source="the runner's --max-batch-size default 16 (runners/common/args.py)",
)

CARD = EngineCard(
    name=ENGINE,
    title="ONNX Runtime",
    version=VERSION,
    formats=frozenset({"onnx"}),
    accelerators=frozenset({"gpu", "cpu"}),
    batching=("dynamic", "static", "continuous"),
    prefix_cache=True,
    speculative=frozenset(),
    quantizations=frozenset({"none", "int8", "int4"}),
    kv_dtypes=frozenset(),
    multi_gpu=False,
    multi_node=False,
    min_compute=(6, 0),
    bf16_min_compute=(8, 0),
    own_hf_loader=False,
    kv_offload=False,
    float32_on_gpu="float32",
    images={"gpu": IMAGE_CUDA, "cpu": IMAGE},
    devices={"nvidia": IMAGE_CUDA},
    endpoints=runners.ENDPOINTS,
    platforms={IMAGE: runners.PLATFORMS, IMAGE_CUDA: Platforms(frozenset({"amd64"}), runners.ONNX_CUDA_PLATFORMS)},
    profiles={
        "gpu": Profile(90, 300, 15.0, 2, NOT_MEASURED_ON_GPU + "eager-like decode with dynamic batches"),
        "cpu": Profile(**MEASURED_CPU[ENGINE], measured=measured_rows(ENGINE)),
    },
    performance=PERFORMANCE,
    summary="ONNX models (onnxruntime-genai format, or our exporter's) on CPU or one GPU: dynamic, static and "
    "continuous batching, prefix cache",
    render=container,
    layer_split=False,
    slots=False,
    run_as_user=10001,
    run_as="images/onnxruntime-server/Dockerfile: USER 10001",
    autoscaling=runners.autoscaling(
        "seconds for the models it serves: one ONNX Runtime session is created from the file, no compile step"
    ),
    prefix_cache_caveat="on a GPU, our exporter's ONNX format only: there onnxruntime-genai's Generator runs an "
    "onnxruntime-genai format model (genai_config.json), without it, and the server logs so",
    auto_batching={"cpu": "continuous"},
    flag_bounds={},  # Python ints: no bounded flag
    lora=lora.no_lora(
        "our ONNX Runtime server runs one exported graph: it loads no LoRA adapters (merge the adapter "
        "into the weights before exporting, or choose another backend)",
        "runners/onnx/ of this repository",
    ),
)
