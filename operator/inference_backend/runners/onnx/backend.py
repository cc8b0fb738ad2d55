"""The ONNX Runtime backend: batched prefill and decode through IO binding, KV kept on the device.

Presents of one run are bound, as OrtValues, as the pasts of the next run, so on a GPU provider the KV never
leaves the device while a batch decodes; only the last position's logits are copied to the host to choose
tokens. Rows that finish are compacted out of the batch (through the host). With prefix caching, prompts are
prefilled one by one (continuing from the cached prefix KV, kept in host memory) and then left-padded into
one batch; without it, the whole batch is prefilled in a single left-padded run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

from inference_backend.runners.common.engine import SamplingParams, TokenLogprob
from inference_backend.runners.common.prefix_cache import PrefixCache
from inference_backend.runners.common.scheduler import Sequence

KV = list[np.ndarray]  # flat [k0, v0, k1, v1, ...], each [batch, heads, seq, head_dim]


class NumpySampler:
    """Greedy or temperature/top-k/min-p/top-p sampling with an optional seed, after OpenAI's presence and frequency
    penalties; with `logprobs`, the chosen token's logprob (from the raw logits) and the top alternatives."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        seed = None if params.seed is None else params.seed % 2**64
        self.rng = np.random.default_rng(seed) if params.temperature > 0 else None
        self.penalized = params.presence_penalty != 0 or params.frequency_penalty != 0
        self.counts: np.ndarray | None = None  # how often each token was generated (penalties only)

    def __call__(self, logits: np.ndarray) -> int | tuple[int, TokenLogprob]:
        raw = logits
        if self.penalized:
            if self.counts is None:
                self.counts = np.zeros(logits.shape[-1], dtype=np.float32)
            p, seen = self.params, self.counts > 0
            logits = logits.astype(np.float32) - p.frequency_penalty * self.counts - p.presence_penalty * seen
        tok = self._choose(logits)
        if self.counts is not None:
            self.counts[tok] += 1
        if self.params.logprobs is None:
            return tok
        return tok, logprob_of(raw, tok, self.params.logprobs)

    def _choose(self, logits: np.ndarray) -> int:
        if self.rng is None:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / self.params.temperature
        p = np.exp(z - z.max())
        p /= p.sum()
        if 0 < self.params.top_k < len(p):
            p = np.where(p >= np.partition(p, -self.params.top_k)[-self.params.top_k], p, 0.0)
        if self.params.min_p > 0:
            p = np.where(p >= self.params.min_p * p.max(), p, 0.0)
        p /= p.sum()
        if self.params.top_p < 1.0:
            order = np.argsort(-p)
            keep = np.cumsum(p[order]) - p[order] < self.params.top_p
            mask = np.zeros_like(p)
            mask[order[keep]] = 1.0
            p = p * mask / (p * mask).sum()
        return int(self.rng.choice(len(p), p=p))


def logprob_of(logits: np.ndarray, tok: int, top: int) -> TokenLogprob:
    """The model's log probability of `tok` and its `top` most likely tokens (from the raw logits)."""
    z = logits.astype(np.float64)
    lp = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
    alts: list[tuple[int, float]] = []
    if top > 0:
        k = min(top, lp.shape[-1])
        ids = np.argpartition(-lp, k - 1)[:k]
        ids = ids[np.argsort(-lp[ids], kind="stable")]
        alts = [(int(i), float(lp[i])) for i in ids]
    return TokenLogprob(float(lp[tok]), alts)


def slice_kv(kv: KV, n: int) -> KV:
    return [a[:, :, :n, :] for a in kv]


class OnnxBackend:
    def __init__(
        self,
        session: ort.InferenceSession,
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        kv_dtype: Any,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self.session = session
        self.device = "cuda" if session.get_providers()[0] == "CUDAExecutionProvider" else "cpu"
        self.kv_names = [f"past_{kind}_{i}" for i in range(num_layers) for kind in ("key", "value")]
        self.out_names = [o.name for o in session.get_outputs()]
        self.kv_heads, self.head_dim, self.kv_dtype = kv_heads, head_dim, kv_dtype
        self.prefix_cache = prefix_cache
        self.rows: list[Sequence] = []
        self.past: list[ort.OrtValue] | None = None  # device-resident KV of the running batch
        self.mask: np.ndarray | None = None

    def _value(self, arr: np.ndarray) -> ort.OrtValue:
        return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr), self.device, 0)

    def _run(self, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray, past: list[Any]) -> tuple[np.ndarray, list[Any]]:
        """One forward (`past`: OrtValues or arrays). Returns last-position logits and present OrtValues."""
        io = self.session.io_binding()
        io.bind_ortvalue_input("input_ids", self._value(ids.astype(np.int64)))
        io.bind_ortvalue_input("attention_mask", self._value(mask.astype(np.int64)))
        io.bind_ortvalue_input("position_ids", self._value(pos.astype(np.int64)))
        for name, value in zip(self.kv_names, past, strict=True):
            io.bind_ortvalue_input(name, value if isinstance(value, ort.OrtValue) else self._value(value))
        for name in self.out_names:
            io.bind_output(name, self.device, 0)
        self.session.run_with_iobinding(io)
        outs = io.get_outputs()
        logits = outs[0].numpy()[:, -1, :]
        return logits, list(outs[1:])

    def _empty_past(self, batch: int) -> KV:
        shape = (batch, self.kv_heads, 0, self.head_dim)
        return [np.zeros(shape, dtype=self.kv_dtype) for _ in self.kv_names]

    # -- prefill ------------------------------------------------------------------------------------
    def prefill(self, seqs: list[Sequence]) -> list[list[int]]:
        for s in seqs:
            s.slot = NumpySampler(s.req.params)
        if self.prefix_cache is None and not self.rows:
            return self._prefill_batched(seqs)
        firsts, parts = [], []
        for s in seqs:
            kv, logits = self._prefill_one(s.tokens)
            firsts.append(s.pick(s.slot, logits))
            parts.append(kv)
        self._join(seqs, parts)
        return firsts

    def _prefill_batched(self, seqs: list[Sequence]) -> list[list[int]]:
        length = max(len(s.tokens) for s in seqs)
        ids = np.zeros((len(seqs), length), dtype=np.int64)
        mask = np.zeros_like(ids)
        pos = np.zeros_like(ids)
        for r, s in enumerate(seqs):
            n = len(s.tokens)
            ids[r, length - n :] = s.tokens
            mask[r, length - n :] = 1
            pos[r, length - n :] = np.arange(n)
        logits, self.past = self._run(ids, mask, pos, self._empty_past(len(seqs)))
        self.rows, self.mask = list(seqs), mask
        return [s.pick(s.slot, logits[r]) for r, s in enumerate(seqs)]

    def _prefill_one(self, tokens: list[int]) -> tuple[KV, np.ndarray]:
        start, past = 0, None
        if self.prefix_cache is not None:
            start, past = self.prefix_cache.lookup(tokens)
        ids = np.array([tokens[start:]])
        pos = np.arange(start, len(tokens))[None, :]
        logits, present = self._run(ids, np.ones((1, len(tokens))), pos, past or self._empty_past(1))
        kv = [v.numpy() for v in present]
        if self.prefix_cache is not None:
            self.prefix_cache.store(tokens, kv)
        return kv, logits[0]

    def _join(self, seqs: list[Sequence], parts: list[KV]) -> None:
        old = [] if self.past is None else [v.numpy() for v in self.past]
        old_len = 0 if self.mask is None else self.mask.shape[1]
        length = max([old_len] + [len(s.tokens) for s in seqs])
        blocks, masks = [], []
        if old:
            assert self.mask is not None
            blocks.append([_left_pad(a, length) for a in old])
            masks.append(np.pad(self.mask, ((0, 0), (length - old_len, 0))))
        for s, kv in zip(seqs, parts, strict=True):
            blocks.append([_left_pad(a, length) for a in kv])
            row = np.zeros((1, length), dtype=np.int64)
            row[0, length - len(s.tokens) :] = 1
            masks.append(row)
        past = [self._value(np.concatenate([b[i] for b in blocks])) for i in range(len(self.kv_names))]
        self.past, self.mask = past, np.concatenate(masks)  # assigned together: a failed join changes nothing
        self.rows.extend(seqs)

    # -- decode / leave -----------------------------------------------------------------------------
    def decode(self, seqs: list[Sequence]) -> list[list[int]]:
        assert self.past is not None and self.mask is not None
        ids = np.array([[s.tokens[-1]] for s in self.rows])
        pos = np.array([[len(s.tokens) - 1] for s in self.rows])
        self.mask = np.pad(self.mask, ((0, 0), (0, 1)), constant_values=1)
        logits, self.past = self._run(ids, self.mask, pos, self.past)
        out = {id(s): s.pick(s.slot, logits[r]) for r, s in enumerate(self.rows)}
        return [out[id(s)] for s in seqs]

    def device_error(self) -> str | None:
        if self.device != "cuda":
            return None
        try:  # a CUDA error in the execution provider can leave the context unusable
            self._value(np.ones(1, dtype=np.float32)).numpy()
        except Exception as exc:
            return f"CUDA device unusable: {exc}"
        return None

    def release(self, seqs: list[Sequence]) -> None:
        gone = {id(s) for s in seqs}
        keep = [r for r, s in enumerate(self.rows) if id(s) not in gone]
        if len(keep) == len(self.rows):
            return
        self.rows = [self.rows[r] for r in keep]
        if not keep or self.past is None or self.mask is None:
            self.past, self.mask = None, None
            return
        mask = self.mask[keep]
        start = int(np.nonzero(mask.sum(0))[0][0])
        self.past = [self._value(v.numpy()[keep][:, :, start:, :]) for v in self.past]
        self.mask = mask[:, start:]


def _left_pad(a: np.ndarray, length: int) -> np.ndarray:
    pad = length - a.shape[2]
    return np.pad(a, ((0, 0), (0, 0), (pad, 0), (0, 0))) if pad else a
