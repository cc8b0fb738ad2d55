"""The PyTorch backend: a left-padded batch KV cache that sequences join (prefill) and leave at any step.

Each sequence is prefilled on its own (optionally continuing from a prefix-cache hit; only the last position's
logits are computed), then its KV is copied into a free row of the running batch's preallocated cache (slab.py),
right-aligned; per-row position ids and a 2-D attention mask keep every row's math identical to running it alone,
so greedy output does not depend on the batch. A decode step writes its keys and values in place. Plain greedy
sequences (no penalties, no logprobs) with a draft model configured run speculative steps on their own (batch of
one) caches instead. With `fused` (fused.py: Llama-shaped CPU float32 models, no draft model) decode runs its lean
forward over the same buffers, and the prompts joining in one step are prefilled together, packed into one row.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from inference_backend.runners.common.metrics import Metrics
from inference_backend.runners.common.prefix_cache import PrefixCache
from inference_backend.runners.common.scheduler import Sequence
from inference_backend.runners.pytorch import adapters as lora
from inference_backend.runners.pytorch import kv as kvh
from inference_backend.runners.pytorch.adapters import AdapterError, base_forward
from inference_backend.runners.pytorch.fused import FusedLlama, attention
from inference_backend.runners.pytorch.sampling import Sampler
from inference_backend.runners.pytorch.slab import Slab

BASE = "__base__"
"""PEFT's name for the base model in a mixed-adapter batch (peft tuners_utils: rows named so skip every adapter)."""


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
        max_batch_size: int | None = None,
        fused: FusedLlama | None = None,
        adapters: tuple[str, ...] = (),
    ) -> None:
        self.model = model
        self.config = model.config
        self.device = device
        self.metrics = metrics
        self.prefix_cache = prefix_cache
        self.draft = draft
        self.k = num_speculative_tokens
        self.rows: list[Sequence] = []  # batched (non-speculative) sequences, in cache row order
        self.slab = Slab(device, max_batch_size)
        self.keep = "logits_to_keep" in inspect.signature(base_forward(model)).parameters
        self.fused = fused
        # LoRA adapters (runners/pytorch/adapters.py: `model` is then a PeftModel holding them all): each forward
        # names every row's adapter (PEFT's mixed-batch `adapter_names`, BASE for the base model's rows), and the
        # prefix cache keeps each adapter's KV apart.
        self.adapters = {name: i + 1 for i, name in enumerate(adapters)}
        self._spaces = len(adapters)  # prefix-cache key spaces handed out: a reloaded adapter never reuses one

    # -- LoRA adapters loaded and unloaded at run time (engine thread: Scheduler.call) ---------------------
    def load_adapter(self, name: str, path: str) -> None:
        if name in self.adapters:
            raise AdapterError(f"The lora adapter '{name}' has already been loaded.")
        if self.draft is not None:
            raise AdapterError("speculative decoding with LoRA adapters is not supported (--draft-model)")
        self.model = lora.add(self.model, name, path)
        self._spaces += 1
        self.adapters[name] = self._spaces

    def unload_adapter(self, name: str) -> None:
        if name not in self.adapters:
            raise AdapterError(f"The lora adapter '{name}' cannot be found.")
        self.model = lora.remove(self.model, name)
        del self.adapters[name]

    # -- prefill ------------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, seqs: list[Sequence]) -> list[list[int]]:
        for seq in seqs:  # before any change: an adapter unloaded since the request came fails that request alone
            if seq.req.adapter is not None and seq.req.adapter not in self.adapters:
                raise AdapterError(f"the LoRA adapter {seq.req.adapter!r} is not loaded (unloaded at run time)")
        for seq in seqs:
            seq.slot = Slot(Sampler(seq.req.params, self.device))
        if self.fused is not None:
            return self._prefill_fused(self.fused, seqs)
        firsts, joining = [], []
        for seq in seqs:
            sampler = seq.slot.sampler
            kv, logits = self._prefill_one(seq.tokens, seq.req.adapter)
            firsts.append(seq.pick(sampler, logits))
            if self.draft is not None and sampler.plain_greedy:
                target = kvh.from_list(kv, self.config)
                dcache, _ = self._forward(self.draft, seq.tokens, 0, None, 1)
                n = len(seq.tokens)
                seq.slot.spec = SpecState(target, dcache, n, n)
            else:
                joining.append((seq, kv))
        if joining:
            self._join(joining)
        return firsts

    def _prefill_fused(self, fused: FusedLlama, seqs: list[Sequence]) -> list[list[int]]:
        firsts: dict[int, list[int]] = {}
        joining = []
        for wave in self._waves(seqs):
            for seq, (kv, logits) in zip(wave, self._fused_prefill(fused, [s.tokens for s in wave]), strict=True):
                firsts[id(seq)] = seq.pick(seq.slot.sampler, logits)
                joining.append((seq, kv))
        self._join(joining)
        return [firsts[id(s)] for s in seqs]

    def _waves(self, seqs: list[Sequence]) -> list[list[Sequence]]:
        """Prompts prefilled together, in order. With a prefix cache, a prompt starting with the same block as one
        already in the wave waits for the next wave, so it finds that one's KV in the cache."""
        if self.prefix_cache is None:
            return [seqs]
        block = self.prefix_cache.block
        waves: list[list[Sequence]] = [[]]
        firsts: set[tuple[int, ...]] = set()
        for seq in seqs:
            head = tuple(seq.tokens[:block])
            if len(seq.tokens) > block and head in firsts:
                waves.append([])
                firsts = set()
            firsts.add(head)
            waves[-1].append(seq)
        return waves

    def _named(self, rows: list[str | None]) -> dict[str, Any]:
        """The forward's `adapter_names` for these rows' adapters, when adapters are loaded."""
        return {"adapter_names": [r or BASE for r in rows]} if self.adapters else {}

    def _forward(
        self, model: Any, tokens: list[int], start: int, cache: Any, keep: int, adapter: str | None = None
    ) -> tuple[Any, torch.Tensor]:
        """The logits of the last `keep` positions only (the language-model head is skipped for the others)."""
        ids = torch.tensor([tokens[start:]], device=self.device)
        pos = torch.arange(start, len(tokens), device=self.device).unsqueeze(0)
        extra: dict[str, Any] = {"logits_to_keep": keep} if self.keep else {}
        if model is self.model:
            extra |= self._named([adapter])
        out = model(
            input_ids=ids,
            position_ids=pos,
            attention_mask=torch.ones(1, len(tokens), dtype=torch.long, device=self.device),
            cache=cache,
            use_cache=True,
            **extra,
        )
        return out.cache, out.logits[0, -keep:]

    def _prefill_one(self, tokens: list[int], adapter: str | None = None) -> tuple[kvh.KV, torch.Tensor]:
        start, prefix = 0, None
        space = self.adapters.get(adapter or "", 0)
        if self.prefix_cache is not None:
            start, hit = self.prefix_cache.lookup(tokens, space)
            if hit is not None:
                prefix = kvh.from_list(hit, self.config)
        cache, logits = self._forward(self.model, tokens, start, prefix, 1, adapter)
        kv = kvh.to_list(cache)
        if self.prefix_cache is not None:
            self.prefix_cache.store(tokens, kv, space)
        return kv, logits[-1]

    def _fused_prefill(self, fused: FusedLlama, prompts: list[list[int]]) -> list[tuple[kvh.KV, torch.Tensor]]:
        """Prompts packed into one row: the matmuls run once over all their tokens, attention per prompt. Each
        prompt gets KV buffers of its own ([1, kv heads, n, head dim] per layer; a prefix-cache hit is copied into
        its first columns and only the rest is computed). Returns each prompt's KV and last-position logits."""
        starts, kvs, masks = [], [], []
        for tokens in prompts:
            n, start, hit = len(tokens), 0, None
            if self.prefix_cache is not None:
                start, hit = self.prefix_cache.lookup(tokens)  # (0, None) on a miss
            shape = (1, fused.kv_heads, n, fused.head_dim)
            kv = [(fused.embed.new_empty(shape), fused.embed.new_empty(shape)) for _ in fused.layers]
            mask = None
            if hit is not None:  # start < n: the prefix cache always leaves the last token to compute
                for (k, v), (pk, pv) in zip(kv, hit, strict=True):
                    k[:, :, :start], v[:, :, :start] = pk[:, :, :start], pv[:, :, :start]
                cols = torch.arange(n, device=self.device)
                mask = (cols[None, :] <= cols[start:, None])[None, None]  # query at position p sees keys 0..p
            starts.append(start)
            kvs.append(kv)
            masks.append(mask)
        offsets = [0]
        for tokens, start in zip(prompts, starts, strict=True):
            offsets.append(offsets[-1] + len(tokens) - start)
        ids = torch.tensor([[t for p, s in zip(prompts, starts, strict=True) for t in p[s:]]], device=self.device)
        pos = torch.tensor(
            [[i for p, s in zip(prompts, starts, strict=True) for i in range(s, len(p))]], device=self.device
        )

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            outs = []
            for j, start in enumerate(starts):
                a, b = offsets[j], offsets[j + 1]
                keys, values = kvs[j][layer]
                keys[:, :, start:] = k[:, :, a:b]
                values[:, :, start:] = v[:, :, a:b]
                outs.append(attention(q[:, :, a:b], keys, values, masks[j]))
            return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

        logits = fused.forward(ids, pos, attend, last=[b - 1 for b in offsets[1:]])
        if self.prefix_cache is not None:
            for tokens, kv in zip(prompts, kvs, strict=True):
                self.prefix_cache.store(tokens, kv)
        return [(kv, logits[j]) for j, kv in enumerate(kvs)]

    def _join(self, joining: list[tuple[Sequence, kvh.KV]]) -> None:
        joining = sorted(joining, key=lambda j: -j[1][0][0].shape[-2])  # longest first: see Slab.groups
        self.slab.join([kv for _, kv in joining])  # after every prefill worked (scheduler isolation)
        self.rows.extend(seq for seq, _ in joining)

    # -- decode -------------------------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, seqs: list[Sequence]) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        if self.rows:
            last = torch.tensor([[s.tokens[-1]] for s in self.rows], device=self.device)
            pos = torch.tensor([[len(s.tokens) - 1] for s in self.rows], device=self.device)
            mask = self.slab.step()
            if self.fused is not None:
                logits = self._fused_decode(self.fused, last, pos, mask)
            else:
                named = self._named([s.req.adapter for s in self.rows])
                res = self.model(
                    input_ids=last,
                    position_ids=pos,
                    attention_mask=mask,
                    cache=self.slab.cache.bind(),
                    use_cache=True,
                    **named,
                )
                logits = res.logits[:, -1]
            self.slab.advance()
            top = logits.argmax(-1).tolist()  # greedy rows: one argmax for the batch
            for i, s in enumerate(self.rows):
                sampler = s.slot.sampler
                out[id(s)] = [top[i]] if sampler.plain_greedy else s.pick(sampler, logits[i])
        for s in seqs:
            if s.slot.spec is not None:
                out[id(s)] = self._spec_step_isolated(s)
        return [out[id(s)] for s in seqs]

    def _fused_decode(
        self, fused: FusedLlama, last: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        sl, n = self.slab, len(self.rows)
        kv = [(k[:n], v[:n]) for k, v in zip(sl.keys, sl.values, strict=True)]
        mask4 = mask[:, None, None, :]
        end = sl.end
        # each group of rows attends over its own window (Slab.groups): columns before it are padding in its rows
        groups = [(a, b, slice(col, end + 1), mask4[a:b, :, :, col - sl.start :]) for a, b, col in sl.groups()]

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = kv[layer]
            keys[:, :, end : end + 1] = k
            values[:, :, end : end + 1] = v
            outs = [attention(q[a:b], keys[a:b, :, w], values[a:b, :, w], m) for a, b, w, m in groups]
            return outs[0] if len(outs) == 1 else torch.cat(outs)

        return fused.forward(last, pos, attend)

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
            st.draft, logits = self._forward(self.draft, toks, st.dlen, st.draft, 1)
            drafts.append(int(torch.argmax(logits[-1])))
            for _ in range(k - 1):
                st.draft, logits = self._forward(self.draft, toks + drafts, n + len(drafts) - 1, st.draft, 1)
                drafts.append(int(torch.argmax(logits[-1])))
            st.dlen = n + k - 1
        st.target, logits = self._forward(self.model, toks + drafts, st.tlen, st.target, k + 1)
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
    @torch.inference_mode()
    def release(self, seqs: list[Sequence]) -> None:
        gone = {id(s) for s in seqs}
        for s in seqs:
            if s.slot is not None:
                s.slot.spec = None
        leaving = [i for i, s in enumerate(self.rows) if id(s) in gone]
        if not leaving:
            return
        self.slab.remove(leaving)
        for r in sorted(leaving, reverse=True):  # the slab moved its last row into each hole: so do we
            last = self.rows.pop()
            if r < len(self.rows):
                self.rows[r] = last
