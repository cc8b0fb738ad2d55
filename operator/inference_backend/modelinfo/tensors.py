"""Arithmetic on a checkpoint's tensor list (name, shape, dtype), the same for every format.

- parameters: the sum of the tensors' element counts, with quantization packing undone (GPTQ/AWQ pack 32/bits
  weights in one int32; bitsandbytes 4-bit packs two in one uint8) and quantization bookkeeping left out (scales,
  zero points, group indices, fp8 scales), so the count is the model's, not the file's;
- dtype: the dtype holding the most elements;
- routed-expert parameters: per-expert tensors (``.experts.N.`` in Hugging Face names, ``*_exps`` in GGUF, one
  leading dimension of ``experts``), so active parameters = total - routed + routed x active experts / experts.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from inference_backend.modelinfo.errors import InspectError


@dataclass(frozen=True)
class Tensor:
    """One stored tensor: its name, its logical shape and its dtype (a DType value, or int32/uint8 for packing)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


# Quantization bookkeeping: not model parameters (GPTQ/AWQ qzeros/scales/g_idx, fp8 weight/input scales,
# bitsandbytes quant states).
_BOOKKEEPING = re.compile(
    r"\.(qzeros|scales|g_idx|weight_scale|weight_scale_inv|input_scale|absmax|quant_map|nested_absmax|"
    r"nested_quant_map|quant_state\.[A-Za-z0-9_]+|SCB|weight_format)$"
)
_PER_EXPERT = re.compile(r"\.experts\.\d+\.")  # Mixtral block_sparse_moe.experts.3.w1, Qwen-MoE mlp.experts.3.up_proj
_FUSED_EXPERTS = re.compile(r"(\.experts\.[A-Za-z_]+(\.weight)?$)|(_exps\.weight$)")  # fused [experts, ...] tensors


def count_parameters(tensors: Iterable[Tensor], quant_method: str | None = None, bits: int = 4) -> int:
    """Parameters of the model the tensors store, packing undone and bookkeeping tensors left out."""
    total = 0
    for t in tensors:
        total += _parameters_of(t, quant_method, bits)
    return total


def _parameters_of(t: Tensor, quant_method: str | None, bits: int) -> int:
    if quant_method and _BOOKKEEPING.search(t.name):
        return 0
    if quant_method in ("gptq", "awq") and t.name.endswith(".qweight"):
        return t.numel * (32 // bits)
    if quant_method == "bitsandbytes" and t.dtype == "uint8" and bits == 4:
        return t.numel * 2
    return t.numel


def weight_dtype(tensors: Iterable[Tensor]) -> str | None:
    """The dtype that holds the most elements (ties to the first seen); None without tensors."""
    by_dtype: Counter[str] = Counter()
    for t in tensors:
        by_dtype[t.dtype] += t.numel
    return by_dtype.most_common(1)[0][0] if by_dtype else None


def routed_expert_parameters(
    tensors: Sequence[Tensor], experts: int, quant_method: str | None = None, bits: int = 4
) -> int:
    """Parameters in the routed experts (per-expert or fused tensors); 0 for a dense model."""
    routed = 0
    for t in tensors:
        if _PER_EXPERT.search(t.name) or (_FUSED_EXPERTS.search(t.name) and experts in t.shape):
            routed += _parameters_of(t, quant_method, bits)
    return routed


def active_parameters(total: int, routed: int, experts: int, active_experts: int, where: str) -> int:
    """Parameters one token uses: the dense part plus ``active_experts`` of the ``experts`` routed experts."""
    if routed % experts:
        raise InspectError(f"{where}: {routed} routed-expert parameters do not split into {experts} equal experts")
    return total - routed + routed // experts * active_experts


_SCALES = (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3))


def parameters_text(count: int) -> str:
    """An exact parameter count in the Model's notation: 8030261248 -> 8.030261248B (parses back to the count)."""
    for suffix, scale in _SCALES:
        if count >= scale or suffix == "K":
            text = format((Decimal(count) / scale).normalize(), "f")
            return text + suffix
    raise AssertionError("unreachable")  # pragma: no cover
