"""Per-request token choice: greedy (temperature 0) or temperature/top-k/min-p/top-p sampling with an optional
seed, after OpenAI's presence and frequency penalties; with `logprobs`, the chosen token's logprob and the top
alternatives."""

from __future__ import annotations

import torch

from inference_backend.runners.common.engine import SamplingParams, TokenLogprob


class Sampler:
    def __init__(self, params: SamplingParams, device: torch.device) -> None:
        self.params = params
        self.generator: torch.Generator | None = None
        self.penalized = params.presence_penalty != 0 or params.frequency_penalty != 0
        self.counts: torch.Tensor | None = None  # how often each token was generated (penalties only)
        if params.temperature > 0:
            self.generator = torch.Generator(device=device)
            if params.seed is not None:
                self.generator.manual_seed(params.seed % 2**64)
            else:
                self.generator.seed()

    @property
    def plain_greedy(self) -> bool:
        """An argmax of the raw logits picks this request's token (batched greedy, speculative decoding)."""
        return self.params.plain_greedy

    def __call__(self, logits: torch.Tensor) -> int | tuple[int, TokenLogprob]:
        """logits: [vocab] for one position."""
        raw = logits
        if self.penalized:
            if self.counts is None:
                self.counts = torch.zeros(logits.shape[-1], dtype=torch.float32, device=logits.device)
            p = self.params
            logits = logits.float() - p.frequency_penalty * self.counts - p.presence_penalty * (self.counts > 0)
        tok = self._choose(logits)
        if self.counts is not None:
            self.counts[tok] += 1
        if self.params.logprobs is None:
            return tok
        return tok, logprob_of(raw, tok, self.params.logprobs)

    def _choose(self, logits: torch.Tensor) -> int:
        if self.generator is None:
            return int(torch.argmax(logits).item())
        probs = torch.softmax(logits.float() / self.params.temperature, dim=-1)
        if 0 < self.params.top_k < probs.shape[-1]:
            kth = torch.topk(probs, self.params.top_k).values[-1]
            probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
        if self.params.min_p > 0:
            probs = torch.where(probs >= self.params.min_p * probs.max(), probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
        if self.params.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < self.params.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=self.generator).item())


def logprob_of(logits: torch.Tensor, tok: int, top: int) -> TokenLogprob:
    """The model's log probability of `tok` and its `top` most likely tokens (from the raw logits)."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    alts: list[tuple[int, float]] = []
    if top > 0:
        values, ids = torch.topk(lp, min(top, lp.shape[-1]))
        alts = list(zip(ids.tolist(), values.tolist(), strict=True))
    return TokenLogprob(float(lp[tok]), alts)
