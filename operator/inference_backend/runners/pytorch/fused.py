"""A lean forward pass for Llama-shaped models (--fused-forward, the default where the model allows it).

transformers' modeling code runs q, k and v (and gate and up) as separate matmuls and dispatches many small ops per
layer; with the few rows of a decode step that overhead and the small matmuls dominate on a CPU. Here each layer's
q/k/v weights are one matrix and gate/up another (as vLLM's QKVParallelLinear and MergedColumnParallelLinear do), so
a layer is four matmuls instead of seven, and the layer's glue is a handful of torch ops (torch's fused rms_norm,
scaled_dot_product_attention with grouped KV heads). The math is transformers' own, op for op: the model's rotary
embedding module computes cos/sin (every RoPE scaling type), RMSNorm normalises in float32 as LlamaRMSNorm does, and
float32 logits match transformers' to rounding (exactly, without biases) in this project's tests.

Only architectures whose decoder layer is exactly Llama's are taken (ELIGIBLE_TYPES, and the modules' shapes are
checked); anything else - sliding-window attention, q/k norms, another activation - runs transformers' forward.
The caller owns the keys and values: forward() hands each layer's new ones to an `attend` callback, which stores them
(the running batch's slab; each prompt's own buffers when several prompts are prefilled packed into one row, so their
matmuls run once over all their tokens while attention stays per prompt) and attends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)
ELIGIBLE_TYPES = ("llama", "mistral", "qwen2")  # decoder layer = Llama's (Qwen2: q/k/v biases, same code path)
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
PROJ_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
PROJ_MLP = ("gate_proj", "up_proj", "down_proj")
PACK_ROWS = 16  # the row count oneDNN's blocked layout is chosen for (any row count works)


def ineligible(model: Any) -> str | None:
    """Why `model` cannot take the fused forward (None: it can)."""
    config = model.config
    if config.model_type not in ELIGIBLE_TYPES:
        return f"model type {config.model_type!r} is not one of {', '.join(ELIGIBLE_TYPES)}"
    if getattr(config, "hidden_act", None) != "silu":
        return f"activation {getattr(config, 'hidden_act', None)!r} (only silu)"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "rotary_emb") or not hasattr(model, "lm_head"):
        return "no model.rotary_emb / lm_head"
    for layer in inner.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if getattr(attn, "sliding_window", None) is not None or getattr(config, "sliding_window", None):
            return "sliding-window attention"
        if any(hasattr(attn, n) for n in ("q_norm", "k_norm")) or not hasattr(mlp, "gate_proj"):
            return "the decoder layer is not Llama's (q/k norms or another MLP)"
        linears = [getattr(attn, n, None) for n in PROJ_ATTN] + [getattr(mlp, n, None) for n in PROJ_MLP]
        if any(type(lin) is not torch.nn.Linear for lin in linears):  # quantized or wrapped layers: not plain matrices
            return "projections that are not plain torch Linear layers"
        if abs(getattr(attn, "scaling", 0.0) - attn.head_dim**-0.5) > 1e-12:
            return "attention scaling is not 1/sqrt(head_dim)"
    return None


def _norm(module: Any) -> tuple[torch.Tensor, float]:
    return module.weight.detach(), float(module.variance_epsilon)


def _cat(*linears: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    w = torch.cat([lin.weight.detach() for lin in linears])
    if all(lin.bias is None for lin in linears):
        return w, None
    zero = w.new_zeros  # a matrix without bias next to one with: zeros for its rows
    return w, torch.cat([zero(lin.out_features) if lin.bias is None else lin.bias.detach() for lin in linears])


@dataclass
class Weight:
    """One (fused) matrix: its plain [out, in] tensor (MKL's sgemm/sgemv), its oneDNN-packed form, or both."""

    plain: torch.Tensor | None
    packed: Any
    bias: torch.Tensor | None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and (self.plain is None or x.numel() != x.shape[-1]):
            out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
            return out
        return F.linear(x, self.plain, self.bias)  # a single row (when kept), or unpacked weights


@dataclass
class Layer:
    ln1: tuple[torch.Tensor, float]
    ln2: tuple[torch.Tensor, float]
    qkv: Weight
    o: Weight
    gate_up: Weight
    down: Weight


class FusedLlama:
    """The model's weights, regrouped; forward() runs one step for a block of rows over caller-owned KV buffers.

    pack: matrices also reordered once for oneDNN (packed.py says why). Both forms are kept (single-row steps use
    the plain one) unless the loader calls drop_plain() after single_row_speedup()."""

    def __init__(self, model: Any, pack: bool) -> None:
        _own_storage(model)  # before any tensor is captured below
        c = model.config
        inner = model.model
        attn0 = inner.layers[0].self_attn
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = attn0.head_dim
        self.inter = c.intermediate_size
        self.rotary = inner.rotary_emb
        self.embed = inner.embed_tokens.weight.detach()
        self.model = model
        self.pack = pack
        self.layers: list[Layer] = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            qkv, qkv_b = _cat(a.q_proj, a.k_proj, a.v_proj)
            gu, gu_b = _cat(m.gate_proj, m.up_proj)
            _share(qkv, a.q_proj, a.k_proj, a.v_proj)  # transformers' modules now use views of the fused matrices
            _share(gu, m.gate_proj, m.up_proj)
            self.layers.append(
                Layer(
                    ln1=_norm(layer.input_layernorm),
                    ln2=_norm(layer.post_attention_layernorm),
                    qkv=self._weight(qkv, qkv_b),
                    o=self._weight(a.o_proj.weight.detach(), _bias(a.o_proj)),
                    gate_up=self._weight(gu, gu_b),
                    down=self._weight(m.down_proj.weight.detach(), _bias(m.down_proj)),
                )
            )
        self.norm = _norm(inner.norm)
        self.head = self._weight(model.lm_head.weight.detach(), _bias(model.lm_head))

    def _weight(self, w: torch.Tensor, bias: torch.Tensor | None) -> Weight:
        w = w.contiguous()
        packed = torch.ops.mkldnn._reorder_linear_weight(w, PACK_ROWS) if self.pack else None
        return Weight(w, packed, bias)

    def weights(self) -> list[Weight]:
        return [w for layer in self.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [self.head]

    def plain_bytes(self) -> int:
        return sum(w.plain.numel() * w.plain.element_size() for w in self.weights() if w.plain is not None)

    def single_row_speedup(self, reps: int = 7) -> float:
        """How much faster one layer's matmuls run for a single row on the plain matrices than on the packed ones
        (best of `reps`, interleaved). MKL's sgemv streams a plain matrix; oneDNN's kernels for the blocked layout
        are built for several rows: on some CPUs the plain form wins for one row (decoding a single request)."""
        ws = [self.layers[0].qkv, self.layers[0].o, self.layers[0].gate_up, self.layers[0].down]
        xs = [torch.randn(1, w.plain.shape[1], dtype=w.plain.dtype) for w in ws if w.plain is not None]
        best = {"plain": float("inf"), "packed": float("inf")}
        with torch.inference_mode():
            for _ in range(reps):
                for form in best:
                    t = time.perf_counter()
                    for w, x in zip(ws, xs, strict=True):
                        if form == "plain":
                            F.linear(x, w.plain, w.bias)
                        else:
                            torch.ops.mkldnn._linear_pointwise(x, w.packed, w.bias, "none", [], "")
                    best[form] = min(best[form], time.perf_counter() - t)
        return best["packed"] / best["plain"]

    def drop_plain(self) -> None:
        """Packed matrices only: free the plain ones (transformers' forward cannot run the model after this)."""
        for w in self.weights():
            w.plain = None
        drop_linears(self.model)

    def forward(
        self, ids: torch.Tensor, pos: torch.Tensor, attend: Attend, last: list[int] | None = None
    ) -> torch.Tensor:
        """ids, pos: [rows, q]. attend(layer index, q, k, v) stores this step's keys and values where the caller
        keeps them and returns the attention output (all [rows, heads, q, head dim], rotary applied). Returns the
        logits of each row's last position, [rows, vocab], or with `last` (one row of packed prompts), of those
        positions, [len(last), vocab]."""
        rows, q = ids.shape
        h = F.embedding(ids, self.embed)
        cos, sin = self.rotary(h, pos)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        nq = self.heads * self.head_dim
        for i, layer in enumerate(self.layers):
            x = _rms_norm(h, layer.ln1)
            qkv = layer.qkv(x).view(rows, q, self.heads + 2 * self.kv_heads, self.head_dim).transpose(1, 2)
            qk = _rope(qkv[:, : self.heads + self.kv_heads], cos, sin)  # queries and keys rotated in one go
            o = attend(i, qk[:, : self.heads], qk[:, self.heads :], qkv[:, self.heads + self.kv_heads :])
            h = h + layer.o(o.transpose(1, 2).reshape(rows, q, nq))
            x = _rms_norm(h, layer.ln2)
            gate, up = layer.gate_up(x).split([self.inter, self.inter], -1)
            h = h + layer.down(F.silu(gate) * up)
        final = h[:, -1] if last is None else h[0, last]
        final = _rms_norm(final, self.norm)
        return self.head(final)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """transformers' sdpa attention for these shapes (mask None: causal, q and k the same positions)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True)


def _rms_norm(x: torch.Tensor, norm: tuple[torch.Tensor, float]) -> torch.Tensor:
    weight, eps = norm
    if x.dtype == torch.float32:  # torch's fused kernel: the same values as transformers' ops, in one call
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    y = x.float()  # transformers' LlamaRMSNorm: normalised in float32, cast back, then scaled in the model's dtype
    return weight * (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin  # transformers' rotate_half


def _bias(linear: Any) -> torch.Tensor | None:
    return None if linear.bias is None else linear.bias.detach()


def _share(fused: torch.Tensor, *linears: Any) -> None:
    """Point each Linear's weight at its rows of the fused matrix."""
    start = 0
    for lin in linears:
        n = lin.weight.shape[0]
        lin.weight = torch.nn.Parameter(fused[start : start + n], requires_grad=False)
        start += n


def _own_storage(model: Any) -> None:
    """Copy every tensor that fusing does not replace (o and down projections, embedding, head, norms, biases) into
    memory of its own. A model loaded from safetensors holds views of one memory-mapped file: while any of them
    lives, the whole mapping stays, and every page read to build the fused matrices stays resident beside them."""
    fused = {id(m.weight) for layer in model.model.layers for m in _fused_inputs(layer)}
    with torch.no_grad():
        for module in model.modules():
            for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
                if id(t) not in fused and t.numel():
                    t.data = t.data.clone()


def _fused_inputs(layer: Any) -> list[Any]:
    a, m = layer.self_attn, layer.mlp
    return [a.q_proj, a.k_proj, a.v_proj, m.gate_proj, m.up_proj]


def drop_linears(model: Any) -> None:
    """Packed weights are the only copy needed: free transformers' (its forward is not used then)."""
    for layer in model.model.layers:
        for mod, names in ((layer.self_attn, PROJ_ATTN), (layer.mlp, PROJ_MLP)):
            for name in names:
                getattr(mod, name).weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
    if model.lm_head.weight is not model.model.embed_tokens.weight:  # tied: the embedding still needs it
        model.lm_head.weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
