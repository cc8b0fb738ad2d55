"""Builders of v1 Node dicts and specs for the tests (what `kubectl get nodes -o json` returns)."""

from __future__ import annotations

from typing import Any

from inference_backend.api import InferenceBackendSpec
from inference_backend.api.model import ModelSpec
from inference_backend.facts import group_nodes

GPUS = {
    "h100": ("NVIDIA-H100-80GB-HBM3", 81559, 9, 0),
    "a100-40": ("NVIDIA-A100-SXM4-40GB", 40960, 8, 0),
    "l4": ("NVIDIA-L4", 23034, 8, 9),
    "a10g": ("NVIDIA-A10G", 23028, 8, 6),
    "t4": ("Tesla-T4", 15360, 7, 5),
    "v100": ("Tesla-V100-SXM2-16GB", 16384, 7, 0),
}


def node(
    name: str,
    gpu: str | None = None,
    count: int = 1,
    *,
    cpu: str = "16",
    memory: str = "64Gi",
    gfd: bool = True,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    arch: str = "amd64",
    mig: str | None = None,
) -> dict[str, Any]:
    lab = {"kubernetes.io/arch": arch, "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}
    alloc: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpu is not None:
        product, mem, major, minor = GPUS[gpu]
        if mig is None:
            alloc["nvidia.com/gpu"] = str(count)
        if gfd:
            lab |= {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(mem),
                "nvidia.com/gpu.count": str(count),
                "nvidia.com/cuda.compute.major": str(major),
                "nvidia.com/cuda.compute.minor": str(minor),
            }
        if mig == "single":
            alloc["nvidia.com/gpu"] = str(count * 7)
            lab |= {
                "nvidia.com/mig.strategy": "single",
                "nvidia.com/gpu.product": f"{product}-MIG-1g.10gb",
                "nvidia.com/gpu.memory": "9728",
                "nvidia.com/gpu.count": str(count * 7),
            }
        elif mig == "mixed":
            alloc["nvidia.com/mig-3g.40gb"] = str(count * 2)
            lab |= {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-3g.40gb.memory": "40192"}
    lab |= labels or {}
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": lab},
        "spec": spec,
        "status": {
            "allocatable": alloc,
            "capacity": dict(alloc),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def cluster(*nodes: dict[str, Any]) -> dict[Any, tuple[str, ...]]:
    return group_nodes(nodes)


def spec(**fields: Any) -> InferenceBackendSpec:
    return InferenceBackendSpec.model_validate(fields)


LLAMA3_TOKENIZER = {"family": "llama3", "vocabSize": 128256}
MODELS: dict[str, ModelSpec] = {
    name: ModelSpec.model_validate(body)
    for name, body in {
        "llama-3-1-8b": {
            "uri": "hf://meta-llama/Llama-3.1-8B-Instruct",
            "architecture": "LlamaForCausalLM",
            "parameters": "8.03B",
            "dtype": "bfloat16",
            "contextLength": 8192,
            "tokenizer": LLAMA3_TOKENIZER,
            "layers": 32,
            "kvHeads": 8,
            "headDim": 128,
        },
        "llama-3-2-1b": {
            "uri": "hf://meta-llama/Llama-3.2-1B-Instruct",
            "architecture": "LlamaForCausalLM",
            "parameters": "1.24B",
            "dtype": "bfloat16",
            "contextLength": 8192,
            "tokenizer": LLAMA3_TOKENIZER,
            "layers": 16,
            "kvHeads": 8,
            "headDim": 64,
        },
        "llama-2-7b": {
            "uri": "hf://meta-llama/Llama-2-7b-hf",
            "architecture": "LlamaForCausalLM",
            "parameters": "6.74B",
            "dtype": "float16",
            "contextLength": 4096,
            "tokenizer": {"family": "llama2", "vocabSize": 32000},
            "layers": 32,
            "kvHeads": 32,
            "headDim": 128,
        },
        "qwen-0-5b": {
            "uri": "hf://Qwen/Qwen2.5-0.5B-Instruct",
            "architecture": "Qwen2ForCausalLM",
            "parameters": "494M",
            "dtype": "bfloat16",
            "contextLength": 8192,
            "tokenizer": {"family": "qwen2", "vocabSize": 151936},
        },
        "llama-3-1-70b": {
            "uri": "hf://meta-llama/Llama-3.1-70B-Instruct",
            "architecture": "LlamaForCausalLM",
            "parameters": "70.6B",
            "dtype": "bfloat16",
            "contextLength": 8192,
            "tokenizer": LLAMA3_TOKENIZER,
            "layers": 80,
            "kvHeads": 8,
            "headDim": 128,
        },
        "llama-3-2-3b-gguf": {
            "uri": "hf://bartowski/Llama-3.2-3B-Instruct-GGUF/Llama-3.2-3B-Instruct-Q4_K_M.gguf",
            "architecture": "LlamaForCausalLM",
            "parameters": "3.21B",
            "contextLength": 8192,
            "tokenizer": LLAMA3_TOKENIZER,
        },
        "llama-3-2-1b-gguf": {
            "uri": "hf://bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q8_0.gguf",
            "architecture": "LlamaForCausalLM",
            "parameters": "1.24B",
            "contextLength": 8192,
            "tokenizer": LLAMA3_TOKENIZER,
        },
        "llama-3-2-1b-otherarch": {
            "uri": "hf://x/draft",
            "architecture": "MistralForCausalLM",
            "parameters": "1B",
            "tokenizer": LLAMA3_TOKENIZER,
        },
        "llama-3-2-1b-notok": {"uri": "hf://x/draft2", "architecture": "LlamaForCausalLM", "parameters": "1B"},
    }.items()
}


def backend(
    name: str = "chat",
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    *,
    generation: int = 1,
    namespace: str = "ns",
    uid: str | None = None,
) -> dict[str, Any]:
    """An InferenceBackend as the operator's index holds it (the body a reconcile takes)."""
    return {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"u-{name}", "generation": generation},
        "spec": spec or {},
        "status": status or {},
    }
