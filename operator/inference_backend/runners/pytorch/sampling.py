"""Per-request token choice: greedy (temperature 0) or temperature/top-p sampling with an optional seed."""

from __future__ import annotations

import torch

from inference_backend.runners.common.engine import SamplingParams


class Sampler:
    def __init__(self, params: SamplingParams, device: torch.device) -> None:
        self.params = params
        self.generator: torch.Generator | None = None
        if params.temperature > 0:
            self.generator = torch.Generator(device=device)
            if params.seed is not None:
                self.generator.manual_seed(params.seed % 2**64)
            else:
                self.generator.seed()

    @property
    def greedy(self) -> bool:
        return self.generator is None

    def __call__(self, logits: torch.Tensor) -> int:
        """logits: [vocab] for one position."""
        if self.generator is None:
            return int(torch.argmax(logits).item())
        probs = torch.softmax(logits.float() / self.params.temperature, dim=-1)
        if self.params.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < self.params.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=self.generator).item())
