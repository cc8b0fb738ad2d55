"""The PyTorch backend: a left-padded batch KV cache that sequences join (prefill) and leave at any step.

Each sequence is prefilled on its own (optionally continuing from a prefix-cache hit), then its KV is
left-padded into the running batch; per-row position ids and a 2-D attention mask keep every row's math
identical to running it alone, so greedy output does not depend on the batch. Greedy sequences with a
draft model configured run speculative steps on their own (batch of one) caches instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from inference_backend.runners.common.metrics import Metrics
from inference_backend.runners.common.prefix_cache import PrefixCache
from inference_backend.runners.common.scheduler import Sequence
from inference_backend.runners.pytorch import kv as kvh
from inference_backend.runners.pytorch.sampling import Sampler


@dataclass
class Slot:
    sampler: Sampler
    spec: Any = None  # SpecState for speculative sequences


@dataclass
class SpecState:
    target: Any  # DynamicCache holding tokens[:tlen]
    draft: Any
    tlen: int
    dlen: int


class TorchBackend:
    def __init__(
        self,
        model: Any,
        device: torch.device,
        metrics: Metrics,
        prefix_cache: PrefixCache | None = None,
        draft: Any = None,
        num_speculative_tokens: int = 4,
    ) -> None:
        self.model = model
        self.config = model.config
        self.device = device
        self.metrics = metrics
        self.prefix_cache = prefix_cache
        self.draft = draft
        self.k = num_speculative_tokens
        self.rows: list[Sequence] = []  # batched (non-speculative) sequences, in cache row order
        self.cache: Any = None
        self.mask: torch.Tensor | None = None  # [rows, T] 1 = real token, 0 = left padding

    # -- prefill ------------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, seqs: list[Sequence]) -> list[list[int]]:
        firsts, joining = [], []
        for seq in seqs:
            sampler = Sampler(seq.req.params, self.device)
            seq.slot = Slot(sampler)
            kv, logits = self._prefill_one(seq.tokens)
            firsts.append(seq.pick(sampler, logits))
            if self.draft is not None and sampler.greedy:
                target = kvh.from_list(kv, self.config)
                dcache, _ = self._forward(self.draft, seq.tokens, 0, None)
                n = len(seq.tokens)
                seq.slot.spec = SpecState(target, dcache, n, n)
            else:
                joining.append((seq, kv))
        if joining:
            self._join(joining)
        return firsts

    def _forward(self, model: Any, tokens: list[int], start: int, cache: Any) -> tuple[Any, torch.Tensor]:
        ids = torch.tensor([tokens[start:]], device=self.device)
        pos = torch.arange(start, len(tokens), device=self.device).unsqueeze(0)
        out = model(
            input_ids=ids,
            position_ids=pos,
            attention_mask=torch.ones(1, len(tokens), dtype=torch.long, device=self.device),
            cache=cache,
            use_cache=True,
        )
        return out.cache, out.logits[0]

    def _prefill_one(self, tokens: list[int]) -> tuple[kvh.KV, torch.Tensor]:
        start, prefix = 0, None
        if self.prefix_cache is not None:
            start, hit = self.prefix_cache.lookup(tokens)
            if hit is not None:
                prefix = kvh.from_list(hit, self.config)
        cache, logits = self._forward(self.model, tokens, start, prefix)
        kv = kvh.to_list(cache)
        if self.prefix_cache is not None:
            self.prefix_cache.store(tokens, kv)
        return kv, logits[-1]

    def _join(self, joining: list[tuple[Sequence, kvh.KV]]) -> None:
        old_len = 0 if self.mask is None else self.mask.shape[1]
        length = max([old_len] + [len(s.tokens) for s, _ in joining])
        parts, masks = [], []
        if self.cache is not None and self.mask is not None:
            parts.append(kvh.left_pad(kvh.to_list(self.cache), length))
            masks.append(torch.nn.functional.pad(self.mask, (length - old_len, 0)))
        for seq, kv in joining:
            n = len(seq.tokens)
            parts.append(kvh.left_pad(kv, length))
            row = torch.zeros(1, length, dtype=torch.long, device=self.device)
            row[0, length - n :] = 1
            masks.append(row)
        cache, mask = kvh.from_list(kvh.cat_rows(parts), self.config), torch.cat(masks)
        self.cache, self.mask = cache, mask  # nothing changes unless all of it worked (scheduler isolation)
        self.rows.extend(seq for seq, _ in joining)

    # -- decode -------------------------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, seqs: list[Sequence]) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        if self.rows:
            assert self.mask is not None
            last = torch.tensor([[s.tokens[-1]] for s in self.rows], device=self.device)
            pos = torch.tensor([[len(s.tokens) - 1] for s in self.rows], device=self.device)
            self.mask = torch.nn.functional.pad(self.mask, (0, 1), value=1)
            res = self.model(
                input_ids=last, position_ids=pos, attention_mask=self.mask, cache=self.cache, use_cache=True
            )
            self.cache = res.cache
            logits = res.logits[:, -1]
            for i, s in enumerate(self.rows):
                out[id(s)] = s.pick(s.slot.sampler, logits[i])
        for s in seqs:
            if s.slot.spec is not None:
                out[id(s)] = self._spec_step_isolated(s)
        return [out[id(s)] for s in seqs]

    def _spec_step_isolated(self, seq: Sequence) -> list[int]:
        """A speculative sequence runs on caches of its own: whatever it raises fails it alone."""
        try:
            return self._spec_step(seq)
        except Exception as exc:
            if self.device_error() is not None:
                raise  # a broken device is everyone's problem (the scheduler stops the engine)
            seq.error = f"speculative step failed: {exc}"
            return []

    def _spec_step(self, seq: Sequence) -> list[int]:
        st: SpecState = seq.slot.spec
        toks = seq.tokens
        n = len(toks)
        k = max(0, min(self.k, seq.req.params.max_tokens - seq.generated - 1))
        drafts: list[int] = []
        if k:
            st.draft, logits = self._forward(self.draft, toks, st.dlen, st.draft)
            drafts.append(int(torch.argmax(logits[-1])))
            for _ in range(k - 1):
                st.draft, logits = self._forward(self.draft, toks + drafts, n + len(drafts) - 1, st.draft)
                drafts.append(int(torch.argmax(logits[-1])))
            st.dlen = n + k - 1
        st.target, logits = self._forward(self.model, toks + drafts, st.tlen, st.target)
        verify = torch.argmax(logits[-(k + 1) :], dim=-1).tolist()
        accepted = 0
        while accepted < k and drafts[accepted] == verify[accepted]:
            accepted += 1
        new = [*drafts[:accepted], verify[accepted]]
        st.tlen = n + accepted
        kvh.truncate(st.target, st.tlen)
        st.dlen = min(st.dlen, st.tlen)
        kvh.truncate(st.draft, st.dlen)
        if k:
            self.metrics.spec_drafts.inc()
            self.metrics.spec_draft_tokens.inc(k)
            self.metrics.spec_accepted.inc(accepted)
        return new

    def device_error(self) -> str | None:
        if self.device.type != "cuda":
            return None
        try:  # a CUDA error (device-side assert, illegal access) is sticky: every later call raises too
            torch.cuda.synchronize(self.device)
            (torch.ones(1, device=self.device) + 1).item()
        except Exception as exc:
            return f"CUDA device unusable: {exc}"
        return None

    # -- leave --------------------------------------------------------------------------------------
    def release(self, seqs: list[Sequence]) -> None:
        gone = {id(s) for s in seqs}
        for s in seqs:
            if s.slot is not None:
                s.slot.spec = None
        keep = [i for i, s in enumerate(self.rows) if id(s) not in gone]
        if len(keep) == len(self.rows):
            return
        self.rows = [self.rows[i] for i in keep]
        if not keep or self.mask is None:
            self.cache, self.mask = None, None
            return
        idx = torch.tensor(keep, device=self.device)
        mask = self.mask[idx]
        start = int((mask.sum(0) > 0).nonzero()[0])  # drop columns that are padding in every row
        self.cache = kvh.from_list(kvh.select_rows(kvh.to_list(self.cache), idx, start), self.config)
        self.mask = mask[:, start:]
