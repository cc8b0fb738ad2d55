"""onnxruntime-genai format models (genai_config.json + model.onnx, as genai's model builder writes them and as the
published Phi/Llama ONNX releases ship), served by onnxruntime-genai's Generator under the common scheduler.

One og.Generator per batch (a "group"): the admitted prompts, right-padded with the model's pad id (genai's layout:
it masks the trailing pads), are prefilled by one append_tokens call. At every step the last-position logits are
read (get_logits), each row's token is chosen by our own sampler through Sequence.pick (per-request temperature,
top-p and seed; a failure stays with its request), and the choices are fed back by setting the logits to a one-hot
mask (set_logits) and calling generate_next_token, which appends exactly those tokens; the next get_logits runs
the forward. A one-row group feeds its token with append_tokens (genai's continuation, batch 1 only). A group whose
rows are all greedy skips the logits round trip: genai's own argmax (generate_next_token, get_next_tokens) picks.

genai itself ends a row that appends an end-of-sequence id, and a group at its max_length. A row that must go on
then (ignore_eos; or a row whose prompt + max_tokens outgrows the padded group) moves to a one-row group of its
own, re-prefilled from its tokens so far ("split"; exact, greedy output is unchanged). A generator cannot drop
rows: finished rows are fed the pad id and ignored until the group's last row leaves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime_genai as og

from inference_backend.runners.common.scheduler import Sequence
from inference_backend.runners.onnx.backend import NumpySampler

GENAI_CONFIG = "genai_config.json"


def is_genai_dir(model_dir: Path) -> bool:
    return (model_dir / GENAI_CONFIG).is_file()


@dataclass
class Group:
    gen: og.Generator
    rows: list[Sequence | None]  # None: the row left (finished, failed, cancelled)
    length: int  # tokens per row in the generator: padded prompt + appended tokens
    max_length: int
    greedy: bool  # genai picks (argmax) instead of our sampler


class GenaiBackend:
    def __init__(self, model: og.Model, config: dict[str, Any], context: int, device: str) -> None:
        self.model = model
        m = config["model"]
        self.pad = int(m.get("pad_token_id", 0))
        eos = m.get("eos_token_id", [])
        self.genai_eos = set(eos if isinstance(eos, list) else [eos])  # ids genai ends a row on
        self.vocab = int(m["vocab_size"])
        self.context = context
        self.device = device
        self.groups: list[Group] = []

    # -- groups -------------------------------------------------------------------------------------
    def _start(self, seqs: list[Sequence]) -> tuple[Group, np.ndarray]:
        """A generator holding `seqs` (prefilled from all their tokens so far) and its [rows, vocab] logits, or
        (greedy group) each row's next token."""
        width = max(len(s.tokens) for s in seqs)
        left = max(s.req.params.max_tokens - s.generated for s in seqs)
        max_length = min(self.context, width + max(left, 1))
        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=max_length, batch_size=len(seqs), do_sample=False)
        ids = np.full((len(seqs), width), self.pad, dtype=np.int32)
        for r, s in enumerate(seqs):
            ids[r, : len(s.tokens)] = s.tokens
        gen = og.Generator(self.model, params)
        gen.append_tokens(ids)
        group = Group(gen, list(seqs), width, max_length, all(s.req.params.plain_greedy for s in seqs))
        if group.greedy:
            gen.generate_next_token()
            group.length += 1
            return group, gen.get_next_tokens()
        return group, gen.get_logits().reshape(len(seqs), -1)

    def _step(self, group: Group) -> tuple[list[Sequence], np.ndarray]:
        """Feed each live row's last token; return the rows still in this group and their next logits (greedy:
        tokens)."""
        live = [s for s in group.rows if s is not None]
        if group.length + 1 > group.max_length or group.gen.is_done():
            return [], np.zeros((0, self.vocab), dtype=np.float32)  # every row moves (the caller splits)
        if group.greedy:  # genai appends the tokens it picked (ours), runs the forward and picks again
            group.gen.generate_next_token()
            group.length += 1
            rows = [r for r, s in enumerate(group.rows) if s is not None and not self._ended(s, group)]
            return [group.rows[r] for r in rows], group.gen.get_next_tokens()[rows]  # type: ignore[misc]
        if len(group.rows) == 1:
            group.gen.append_tokens(np.array([[live[0].tokens[-1]]], dtype=np.int32))
        else:
            forced = np.full((len(group.rows), self.vocab), -np.inf, dtype=np.float32)
            for r, s in enumerate(group.rows):
                forced[r, self.pad if s is None else s.tokens[-1]] = 0.0
            group.gen.set_logits(forced)
            group.gen.generate_next_token()
        group.length += 1
        logits = group.gen.get_logits().reshape(len(group.rows), -1)
        rows = [r for r, s in enumerate(group.rows) if s is not None and not self._ended(s, group)]
        return [group.rows[r] for r in rows], logits[rows]  # type: ignore[misc]

    def _ended(self, s: Sequence, group: Group) -> bool:
        """genai ended this row (it appended an end-of-sequence id: in a batch, or as its own pick): it must continue
        elsewhere."""
        return (len(group.rows) > 1 or group.greedy) and s.tokens[-1] in self.genai_eos

    # -- Backend protocol ---------------------------------------------------------------------------
    def prefill(self, seqs: list[Sequence]) -> list[list[int]]:
        group, first = self._start(seqs)  # raises before any state changes (isolation retries one by one)
        self.groups.append(group)
        for s in seqs:
            s.slot = NumpySampler(s.req.params)
        return [self._pick(s, group, first[r]) for r, s in enumerate(seqs)]

    @staticmethod
    def _pick(s: Sequence, group: Group, value: Any) -> list[int]:
        return s.pick(int, value) if group.greedy else s.pick(s.slot, value)

    def decode(self, seqs: list[Sequence]) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for group in list(self.groups):
            kept, values = self._step(group)
            for s, value in zip(kept, values, strict=True):
                out[id(s)] = self._pick(s, group, value)
            moved = [s for s in group.rows if s is not None and id(s) not in out]
            for s in moved:
                group.rows[group.rows.index(s)] = None
                alone, first = self._start([s])
                self.groups.append(alone)
                out[id(s)] = self._pick(s, alone, first[0])
            self._drop_empty()
        return [out[id(s)] for s in seqs]

    def release(self, seqs: list[Sequence]) -> None:
        gone = {id(s) for s in seqs}
        for group in self.groups:
            group.rows = [None if s is not None and id(s) in gone else s for s in group.rows]
        self._drop_empty()

    def _drop_empty(self) -> None:
        self.groups = [g for g in self.groups if any(s is not None for s in g.rows)]

    def device_error(self) -> str | None:
        if self.device != "cuda":
            return None
        try:  # a CUDA error can leave the context unusable: one tiny forward tells
            params = og.GeneratorParams(self.model)
            params.set_search_options(max_length=2)
            og.Generator(self.model, params).append_tokens(np.array([[self.pad]], dtype=np.int32))
        except Exception as exc:
            return f"CUDA device unusable: {exc}"
        return None


def read_config(model_dir: Path) -> dict[str, Any]:
    return dict(json.loads((model_dir / GENAI_CONFIG).read_text()))
