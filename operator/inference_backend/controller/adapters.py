"""The LoRA adapters a reconcile loads and unloads on the serving replicas while they serve (engines whose card has
run-time loading: vLLM, our PyTorch runner): pure, like controller.actions; controller.execute makes the calls.

Not called by the reconcile yet (docs/adapters.md, "What the operator has for run-time loading").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inference_backend import status

Json = dict[str, Any]


LOAD_ADAPTER = "/v1/load_lora_adapter"
UNLOAD_ADAPTER = "/v1/unload_lora_adapter"


@dataclass(frozen=True)
class EngineCall:
    """A POST to one serving pod's engine: a LoRA adapter loaded or unloaded while it serves (vLLM 0.33.0's endpoints
    and bodies, vllm/entrypoints/serve/lora; our PyTorch runner serves the same, runners/common/lora_updates.py)."""

    pod: str
    url: str
    path: str
    body: Json


def adapter_calls(wanted: Mapping[str, str], replicas: Sequence[status.Replica]) -> tuple[EngineCall, ...]:
    """The loads and unloads that bring every replica to ``wanted`` (adapter name -> its path on the pod), pod by pod,
    unloads first (they free the engine's adapter slots): a served name ``wanted`` lacks is unloaded, a wanted name a
    replica lacks is loaded, one it serves from another path is loaded in place (``load_inplace``)."""
    calls: list[EngineCall] = []
    for r in sorted(replicas, key=lambda r: r.pod):
        calls += [
            EngineCall(r.pod, r.url, UNLOAD_ADAPTER, {"lora_name": n}) for n in sorted(r.adapters) if n not in wanted
        ]
        for name, path in sorted(wanted.items()):
            if r.adapters.get(name) == path:
                continue
            body: Json = {"lora_name": name, "lora_path": path}
            if name in r.adapters:
                body["load_inplace"] = True
            calls.append(EngineCall(r.pod, r.url, LOAD_ADAPTER, body))
    return tuple(calls)
