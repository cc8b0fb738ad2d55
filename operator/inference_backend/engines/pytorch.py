"""Our PyTorch eager runner (`ib-pytorch-runner`, ghcr.io/inference-backend/pytorch-runner:<package version>).

Flags: runners/common/args.py (shared) and runners/pytorch/args.py (--device, --draft-model,
--num-speculative-tokens) of this repository.
"""

from __future__ import annotations

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.engines import artifacts, runners
from inference_backend.engines.base import ArgBuilder, EngineContainer, placement
from inference_backend.selection.decision import Decision

ENGINE = "pytorch"
VERSION = runners.VERSION
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
    art = artifacts.resolve(artifacts.draft_model(decision.model, s.draft), ENGINE, "draft")
    assert art.directory is not None
    # pytorch/args.py --draft-model PATH (a directory sharing the target's tokenizer), --num-speculative-tokens N
    a.add("--draft-model", art.directory, source="spec.speculativeDecoding.draftModelRef")
    a.add("--num-speculative-tokens", s.num_tokens, source="spec.speculativeDecoding.numSpeculativeTokens")
    return art


def container(decision: Decision, spec: InferenceBackendSpec, name: str) -> EngineContainer:
    return runners.container(decision, spec, name, engine=ENGINE, image=IMAGE, command=COMMAND,
                             strategies=STRATEGIES, extra=_extra)  # fmt: skip
