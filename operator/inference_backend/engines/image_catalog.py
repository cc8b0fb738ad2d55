"""Every image the operator renders on its own (the engines' pinned images and the fetch init container's), by the
key of its override in the operator's image policy (inference_backend.images; the chart's ``engineImages.<key>``).
"""

from __future__ import annotations

from inference_backend.engines import artifacts, llamacpp, onnxruntime, pytorch, sglang, tgi, vllm

PICKER_VERSION = "v1.5.0"
"""The Gateway API Inference Extension release of the endpoint picker and its CRDs (e2e/gomod/gie/go.mod; a test
keeps them equal): the last release whose module holds the scoring picker, cmd/epp (picker.py)."""
PICKER_IMAGE = f"registry.k8s.io/gateway-api-inference-extension/epp:{PICKER_VERSION}"
"""The EPP image of that release (config/charts/inferencepool/values.yaml: registry registry.k8s.io, repository
gateway-api-inference-extension/epp, tag v1.5.0; built from the module's Dockerfile: cmd/epp on distroless
static:nonroot), which routing.py renders."""

CATALOG: dict[str, str] = {
    "vllm": vllm.IMAGE,
    "vllmRocm": vllm.ROCM_IMAGE,
    "sglang": sglang.IMAGE,
    "tgi": tgi.IMAGE,
    "llamacppCpu": llamacpp.IMAGE_CPU,
    "llamacppCuda": llamacpp.IMAGE_CUDA,
    "llamacppRocm": llamacpp.IMAGE_ROCM,
    "pytorch": pytorch.IMAGE,
    "onnxruntime": onnxruntime.IMAGE,
    "onnxruntimeCuda": onnxruntime.IMAGE_CUDA,
    "fetch": artifacts.OPERATOR_IMAGE,
    "endpointPicker": PICKER_IMAGE,
}
"""Every image the operator renders on its own, by the key of its override (Helm ``engineImages.<key>``)."""
DESCRIPTIONS: dict[str, str] = {
    "vllm": "vLLM on NVIDIA GPUs (CUDA)",
    "vllmRocm": "vLLM on AMD GPUs (ROCm)",
    "sglang": "SGLang on NVIDIA GPUs",
    "tgi": "Text Generation Inference on NVIDIA GPUs",
    "llamacppCpu": "llama.cpp server on CPU",
    "llamacppCuda": "llama.cpp server on NVIDIA GPUs",
    "llamacppRocm": "llama.cpp server on AMD GPUs",
    "pytorch": "our PyTorch runner (CPU and NVIDIA GPUs)",
    "onnxruntime": "our ONNX Runtime server on CPU",
    "onnxruntimeCuda": "our ONNX Runtime server on NVIDIA GPUs (onnxruntime-gpu, onnxruntime-genai-cuda)",
    "fetch": "the init container downloading s3://, gs://, hf:// and http(s):// weights",
    "endpointPicker": "the Gateway API Inference Extension's endpoint picker (spec.routing.inferencePool)",
}
