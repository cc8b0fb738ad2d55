"""CPU matmuls with weights repacked once for oneDNN (--prepack-weights, the default on CPU in float32).

torch's default CPU Linear calls MKL's sgemm, which repacks the weight matrix into panels on every call; with the
few rows of a decode step (one per sequence) that packing costs about as much as the multiplication, and more on
AMD CPUs (MKL's generic path). oneDNN's linear takes a weight reordered once into its blocked layout: measured on
this project's 2-core AMD EPYC host, one thread, a 30M Llama: decode step 8.7 -> 6.1 ms at batch 1, 23 -> 14 ms at
batch 16; a 60-token prefill 36 -> 20 ms. This is the op torch's inductor uses for frozen float32 CPU linears with
dynamic batch sizes (mkldnn._reorder_linear_weight + mkldnn._linear_pointwise).

Results differ from MKL's in the last bits (another summation order), as any two batch sizes do.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)
BATCH_HINT = 16  # rows the blocked layout is chosen for (any row count works)


class PackedLinear(torch.nn.Module):
    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), BATCH_HINT)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return out


def available(device: torch.device, dtype: torch.dtype) -> bool:
    mkldnn = bool(torch.backends.mkldnn.is_available())  # type: ignore[no-untyped-call]
    return device.type == "cpu" and dtype == torch.float32 and mkldnn


def prepack(model: Any) -> int:
    """Replace every float32 nn.Linear of `model` by a PackedLinear; returns how many were replaced."""
    n = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear and child.weight.dtype == torch.float32:
                setattr(module, name, PackedLinear(child))
                n += 1
    log.info("prepacked %d linear layers for oneDNN", n)
    return n
