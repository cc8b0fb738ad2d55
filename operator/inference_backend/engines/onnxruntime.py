"""Our ONNX Runtime server (`ib-onnxruntime-server`, ghcr.io/inference-backend/onnxruntime-server:<package version>).

Flags: runners/common/args.py (shared) and runners/onnx/args.py (--providers) of this repository. No speculative
decoding (the selection already reports it off).
"""

from __future__ import annotations

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.engines import artifacts, runners
from inference_backend.engines.base import ArgBuilder, EngineContainer, placement
from inference_backend.selection.decision import Decision

ENGINE = "onnxruntime"
VERSION = runners.VERSION
IMAGE = f"ghcr.io/inference-backend/onnxruntime-server:{VERSION}"
COMMAND = ("ib-onnxruntime-server",)
STRATEGIES = ("static", "dynamic")  # onnx/args.py add_common_flags(batching modes)


def _extra(decision: Decision, a: ArgBuilder, notes: list[str]) -> artifacts.Artifact | None:
    # onnx/args.py --providers: execution providers in order of preference
    gpu = placement(decision).gpu is not None
    providers = "CUDAExecutionProvider,CPUExecutionProvider" if gpu else "CPUExecutionProvider"
    a.add("--providers", providers, source="the decision's placement")
    return None


def container(decision: Decision, spec: InferenceBackendSpec, name: str) -> EngineContainer:
    return runners.container(decision, spec, name, engine=ENGINE, image=IMAGE, command=COMMAND,
                             strategies=STRATEGIES, extra=_extra)  # fmt: skip
