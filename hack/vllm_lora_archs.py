#!/usr/bin/env python3
"""Print the model architectures vLLM serves LoRA adapters on, from vLLM itself (no GPU, no model).

Run with the vLLM venv's python (hack/vllm-venv): VLLM_TARGET_DEVICE=cpu $IB_CACHE/venv-vllm-0.33.0/bin/python
hack/vllm_lora_archs.py [--write]. For every architecture of vLLM's model registry (ModelRegistry), vLLM's own
interfaces.supports_lora on its model class (what registry.py _ModelInfo.supports_lora records) says whether LoRA
applies. --write rewrites operator/inference_backend/engines/vllm_lora.py;
tests/contracts/test_vllm_lora.py runs this and compares.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "operator" / "inference_backend" / "engines" / "vllm_lora.py"
HEADER = '''"""The model architectures vLLM {version} serves LoRA adapters on: the classes of its model registry that
implement SupportsLoRA (vllm/model_executor/models/interfaces.py; registry.py _ModelInfo.supports_lora). Generated
from the pinned vLLM by hack/vllm_lora_archs.py --write; tests/contracts/test_vllm_lora.py fails when they differ."""

from __future__ import annotations

'''


def supported() -> tuple[str, list[str], list[str]]:
    """(vLLM's version, the architectures whose model class supports LoRA, those whose module cannot be imported
    here). The classes are loaded in this process (vLLM's registry inspects each in a subprocess of its own, minutes
    apiece on a small machine) and asked with vLLM's own interfaces.supports_lora, what _ModelInfo.supports_lora is."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm
    from vllm.model_executor.models.interfaces import supports_lora
    from vllm.model_executor.models.registry import ModelRegistry

    yes, failed = [], []
    for arch in sorted(ModelRegistry.get_supported_archs()):
        try:
            cls = ModelRegistry.models[arch].load_model_cls()
        except Exception:  # a model whose module needs an optional dependency absent here
            failed.append(arch)
            continue
        if supports_lora(cls):
            yes.append(arch)
    return vllm.__version__, yes, failed


def main() -> None:
    version, archs, failed = supported()
    if "--write" in sys.argv:
        body = "".join(f'        "{a}",\n' for a in archs)  # as ruff format lays it out
        table = f"LORA_ARCHITECTURES: frozenset[str] = frozenset(\n    {{\n{body}    }}\n)\n"
        OUT.write_text(HEADER.format(version=version) + table)
    print(json.dumps({"version": version, "architectures": archs, "uninspectable": failed}))


if __name__ == "__main__":
    main()
