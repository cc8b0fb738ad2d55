"""onnxruntime-genai format models (genai_config.json + model.onnx, as genai's model builder writes them and as the
published Phi/Llama ONNX releases ship), served by onnxruntime-genai's Generator under the common scheduler.

One og.Generator per batch (a "group"): the admitted prompts, right-padded with the model's pad id (genai's layout:
it masks the trailing pads), are prefilled by one append_tokens call. At every step the last-position logits are
read (get_logits), each row's token is chosen by our own sampler through Sequence.pick (per-request temperature,
top-p and seed; a failure stays with its request), and the choices are fed back by setting the logits to a one-hot
mask (set_logits) and calling generate_next_token, which appends exactly those tokens; the next get_logits runs
the forward. A one-row group feeds its token with append_tokens (genai's continuation, batch 1 only).

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
    length: int  # tokens per row in the generator: padded prompt + fed steps
    max_length: int


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
        """A generator holding `seqs` (prefilled from all their tokens so far) and its [rows, vocab] logits."""
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
        logits = gen.get_logits().reshape(len(seqs), -1)
        return Group(gen, list(seqs), width, max_length), logits

    def _step(self, group: Group) -> tuple[list[Sequence], np.ndarray]:
        """Feed each live row's last token; return the rows still in this group and their next logits."""
        live = [s for s in group.rows if s is not None]
        if group.length + 1 > group.max_length or group.gen.is_done():
            return [], np.zeros((0, self.vocab), dtype=np.float32)  # every row moves (the caller splits)
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
        """genai ended this row (an end-of-sequence id appended in a batch): it must continue elsewhere."""
        return len(group.rows) > 1 and s.tokens[-1] in self.genai_eos

    # -- Backend protocol ---------------------------------------------------------------------------
    def prefill(self, seqs: list[Sequence]) -> list[list[int]]:
        group, logits = self._start(seqs)  # raises before any state changes (isolation retries one by one)
        self.groups.append(group)
        for s in seqs:
            s.slot = NumpySampler(s.req.params)
        return [s.pick(s.slot, logits[r]) for r, s in enumerate(seqs)]

    def decode(self, seqs: list[Sequence]) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for group in list(self.groups):
            kept, logits = self._step(group)
            for s, row in zip(kept, logits, strict=True):
                out[id(s)] = s.pick(s.slot, row)
            moved = [s for s in group.rows if s is not None and id(s) not in out]
            for s in moved:
                group.rows[group.rows.index(s)] = None
                alone, first = self._start([s])
                self.groups.append(alone)
                out[id(s)] = s.pick(s.slot, first[0])
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
