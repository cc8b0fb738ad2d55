"""Models larger than any one node: the smallest layout of whole nodes that would hold one replica.

Tensor parallel inside a node (the widest width the node's allocatable GPUs and the attention heads allow), pipeline
parallel across nodes (vLLM and SGLang split layers over nodes: ``--pipeline-parallel-size``); the memory of one
replica is the same fit as on one node (weights + overhead per GPU + one full-context sequence <= memoryFraction x
the GPUs' memory). Reported with its numbers, never rendered yet (the multi-node issue turns it into a
LeaderWorkerSet), and never replaced by a CPU placement. Pure: no I/O.
"""

from __future__ import annotations

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import MultiNode, ResolvedModel
from inference_backend.engines import card
from inference_backend.memory import gpu_fit, tensor_parallel_options
from inference_backend.selection.hardware import UsableClass
from inference_backend.selection.options import MIB, kv_per_token, model_bytes, serving_dtype

MAX_NODES = 64


def _engine_for(candidates: list[str], vendor: str) -> str | None:
    """The first candidate (registry order) that runs on the vendor across nodes, else the first that runs on it."""
    on_vendor = [e for e in candidates if "gpu" in card(e).accelerators and vendor in card(e).devices]
    return next((e for e in on_vendor if card(e).multi_node), on_vendor[0] if on_vendor else None)


def multi_node_layout(spec: InferenceBackendSpec, model: ResolvedModel, candidates: list[str],
                      gpu_classes: list[UsableClass]) -> MultiNode | None:  # fmt: skip
    """The layout with the fewest nodes (then GPUs, then product) over the usable GPU classes, or None."""
    fraction = spec.kv_cache.memory_fraction
    best: tuple[tuple[int, int, str], MultiNode] | None = None
    for usable in gpu_classes:
        for gpu in usable.hardware.gpus:
            if gpu.count <= 0 or gpu.mig:
                continue
            engine = _engine_for(candidates, gpu.vendor)
            if engine is None:
                continue
            caps = card(engine)
            if gpu.compute is not None and gpu.compute < caps.min_compute:
                continue
            widths, _ = tensor_parallel_options(gpu.count, False, model.attention_heads, model.kv_heads,
                                                caps.layer_split)  # fmt: skip
            if not widths:
                continue
            tp = widths[-1]
            dtype, _ = serving_dtype(engine, model, gpu)
            weights = model_bytes(model, dtype)
            min_kv = kv_per_token(engine, model, dtype, spec.kv_cache.dtype, tp) * model.context_length
            if gpu_fit(weights, min_kv, gpu.memory_mib * MIB, fraction, tp).fits:
                continue  # one node holds it: something other than size kept it off (host, compute)
            for nodes in range(2, MAX_NODES + 1):
                fit = gpu_fit(weights, min_kv, gpu.memory_mib * MIB, fraction, tp * nodes)
                if fit.fits:
                    per_node = fraction * gpu.memory_mib * MIB * tp
                    layout = MultiNode(engine, gpu, tp, nodes, fit.required, per_node, usable.nodes)
                    key = (nodes, nodes * tp, gpu.product)
                    if best is None or key < best[0]:
                        best = (key, layout)
                    break
    return best[1] if best else None
