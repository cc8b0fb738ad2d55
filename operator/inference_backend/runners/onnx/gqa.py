"""onnxruntime-genai format models run on ONNX Runtime directly (CPU): continuous batching and a prefix cache.

genai's model builder writes decoders whose attention is ONNX Runtime's GroupQueryAttention with
`past_present_share_buffer` (genai_config.json): the KV inputs and outputs are one buffer per layer,
[rows, kv_heads, capacity, head_dim], and each run writes its new positions in place. Each row's length comes from
its attention mask (seqlens_k = sum(mask) - 1; rotary positions too), so rows of different lengths share a batch
with right padding. That is all the state a row has, which is what genai's Generator does not let us touch: here
a row is a slot of our own buffer, so

- continuous batching: new prompts are prefilled into free slots (one right-padded run from an empty cache) and
  join the running decode steps; a finished row's slot is filled by moving the last row into it;
- prefix cache: a prompt whose block-aligned prefix is cached gets that KV copied into its slot and only the rest
  is run (GroupQueryAttention continues a row from its cached length: `sequence_length` > 1 over a past);
- the forward releases the GIL (onnxruntime's binding does; genai's does not), so the event loop's HTTP work runs
  beside it on another core.

The tokens are genai's: the same graph on the same onnxruntime (genai loads the installed libonnxruntime), fed the
same ids; tests compare them with genai's Generator and with transformers. The buffer's capacity is the longest
reservation (prompt + max_tokens) of its rows rounded up to 32 positions, grown (copied) when a longer one joins,
and its rows the batch size rounded up to 8; it is reused from batch to batch while the size fits, and made to fit
when the rows need less than half of it or a new batch needs a different size (a long request's buffer does not
outlive it). Because every row is as long as the longest, the scheduler admits
rows x longest reservation within the KV budget (`padded_kv`), not the sum of the reservations. CPU only: the
buffers are host arrays (on CUDA genai's Generator runs the model, genai.py).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from inference_backend.runners.common.prefix_cache import PrefixCache
from inference_backend.runners.common.scheduler import Sequence
from inference_backend.runners.onnx.backend import NumpySampler

log = logging.getLogger(__name__)
_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}
ROWS_STEP = 8  # buffer rows grow in steps of this many
LENGTH_STEP = 32  # buffer capacity grows in steps of this many positions (a longer buffer slows attention)
# onnxruntime: where a model loaded from bytes finds its external data (onnxruntime_session_options_config_keys.h)
EXTERNAL_DATA_DIR = "session.model_external_initializers_file_folder_path"


def gqa_unfit(model_file: Path, config: dict[str, Any]) -> str | None:
    """Why this genai model cannot run here (None: it can): its decoder must take only input_ids, attention_mask and
    the KV, attend with GroupQueryAttention in every layer and share the past and present buffers."""
    decoder = config["model"]["decoder"]
    names = decoder["inputs"]
    layers = int(decoder["num_hidden_layers"])
    if not config.get("search", {}).get("past_present_share_buffer", False):
        return "genai_config.json search.past_present_share_buffer is off"
    if set(config["model"]) & {"vision", "speech", "embedding", "encoder"}:
        return "a multimodal model (genai_config.json has more than a decoder)"
    graph = onnx.load(str(model_file), load_external_data=False).graph
    kv = {names[kind] % i for i in range(layers) for kind in ("past_key_names", "past_value_names")}
    expected = kv | {names.get("input_ids", "input_ids"), names.get("attention_mask", "attention_mask")}
    extra = sorted({i.name for i in graph.input} - expected)
    if extra:
        return f"the decoder takes inputs this runner does not feed: {', '.join(extra)}"
    gqa = sum(n.op_type == "GroupQueryAttention" for n in graph.node)
    if gqa != layers:
        return f"{gqa} GroupQueryAttention nodes for {layers} layers"
    return None


def open_session(model_dir: Path, filename: str, graph: bytes | None, threads: int) -> ort.InferenceSession:
    """A CPU session on the decoder: `graph` (rewritten in memory) with its weights read from model_dir, or the file
    as it ships."""
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if graph is None:
        return ort.InferenceSession(str(model_dir / filename), opts, providers=["CPUExecutionProvider"])
    opts.add_session_config_entry(EXTERNAL_DATA_DIR, str(model_dir))
    return ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])


class GqaBackend:
    padded_kv = True  # the scheduler admits rows x the longest reservation within the KV budget

    def __init__(
        self, session: ort.InferenceSession, decoder: dict[str, Any], prefix_cache: PrefixCache | None
    ) -> None:
        self.session = session
        names = decoder["inputs"]
        outs = decoder["outputs"]
        layers = range(int(decoder["num_hidden_layers"]))
        self.past = [names[k] % i for i in layers for k in ("past_key_names", "past_value_names")]
        self.present = [outs[k] % i for i in layers for k in ("present_key_names", "present_value_names")]
        self.ids_name = names.get("input_ids", "input_ids")
        self.mask_name = names.get("attention_mask", "attention_mask")
        self.logits_name = outs.get("logits", "logits")
        types = {i.name: i.type for i in session.get_inputs()}
        self.ids_type, self.mask_type = _NUMPY[types[self.ids_name]], _NUMPY[types[self.mask_name]]
        self.kv_type = _NUMPY[types[self.past[0]]]
        self.kv_heads = int(decoder.get("num_key_value_heads") or decoder["num_attention_heads"])
        self.head_dim = int(decoder["head_size"])
        self.prefix_cache = prefix_cache
        self.rows: list[Sequence] = []  # row r lives in slot r of the buffers
        self.kv: list[np.ndarray] = []  # per past input: [slots, kv_heads, capacity, head_dim]
        out = next(o for o in session.get_outputs() if o.name == self.logits_name)
        self.vocab = out.shape[-1] if isinstance(out.shape[-1], int) else None
        self.logits_type = _NUMPY[out.type]
        self._decode_io: tuple[tuple[int, int], Any, np.ndarray] | None = None  # (rows, buffer id), binding, logits

    # -- buffers ------------------------------------------------------------------------------------
    def _reserve(self, rows: int, length: int) -> None:
        """Buffers with at least `rows` slots and `length` positions, the running rows kept (copied). Grown when
        too small; made to fit when more than twice as long as needed, or longer or wider than needed while no row
        runs (a long request's buffer does not outlive it: attention and memory follow the buffer's size)."""
        want_rows = -(-rows // ROWS_STEP) * ROWS_STEP
        want_len = -(-length // LENGTH_STEP) * LENGTH_STEP
        n = len(self.rows)
        if self.kv:
            have_rows, have_len = self.kv[0].shape[0], self.kv[0].shape[2]
            fits = rows <= have_rows and length <= have_len
            oversized = have_len > 2 * want_len or (n == 0 and (have_len, have_rows) != (want_len, want_rows))
            if fits and not oversized:
                return
            if n:  # rows are running: keep the wider of the two, so that a shrink never drops a slot
                want_rows = max(want_rows, have_rows) if fits else want_rows
                want_len = want_len if oversized else max(want_len, have_len)
        shape = (want_rows, self.kv_heads, want_len, self.head_dim)
        fresh = [np.zeros(shape, dtype=self.kv_type) for _ in self.past]
        keep = min(want_len, self.kv[0].shape[2]) if self.kv else 0
        for old, new in zip(self.kv, fresh, strict=False):
            new[:n, :, :keep] = old[:n, :, :keep]
        self.kv = fresh
        self._decode_io = None

    def _bind_kv(self, io: Any, rows: slice) -> None:
        for past, present, buf in zip(self.past, self.present, self.kv, strict=True):
            value = ort.OrtValue.ortvalue_from_numpy(buf[rows])  # a view: the run reads and writes the buffer
            io.bind_ortvalue_input(past, value)
            io.bind_ortvalue_output(present, value)

    def _run(self, first: int, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """One forward over slots [first, first + len(ids)) (their KV written in place); each row's logits at its
        last input position."""
        io = self.session.io_binding()
        self._bind_kv(io, slice(first, first + len(ids)))
        io.bind_cpu_input(self.ids_name, ids.astype(self.ids_type, copy=False))
        io.bind_cpu_input(self.mask_name, mask.astype(self.mask_type, copy=False))
        io.bind_output(self.logits_name)
        self.session.run_with_iobinding(io)
        logits = io.get_outputs()[-1].numpy()  # [rows, 1 (last position head) or seq, vocab]
        last = np.minimum(mask.sum(axis=1) - 1, logits.shape[1] - 1)  # genai_graph.py's index, for a full head
        return np.asarray(logits[np.arange(len(ids)), last if logits.shape[1] > 1 else 0])

    # -- Backend protocol ---------------------------------------------------------------------------
    def prefill(self, seqs: list[Sequence]) -> list[list[int]]:
        """Runs on the free slots after the running rows; they join only when every run succeeded (a failure
        changes nothing, and the scheduler retries the prompts one by one)."""
        base = len(self.rows)
        self._reserve(base + len(seqs), max([s.reserved for s in seqs + self.rows] + [len(s.tokens) for s in seqs]))
        hits: dict[int, tuple[int, Any]] = {}
        if self.prefix_cache is not None:
            for r, s in enumerate(seqs):
                start, kv = self.prefix_cache.lookup(s.tokens)
                if start:
                    hits[r] = (start, kv)
        logits: dict[int, np.ndarray] = {}
        fresh = [r for r in range(len(seqs)) if r not in hits]
        if fresh:
            logits.update(zip(fresh, self._prefill_fresh(base, [seqs[r] for r in fresh]), strict=True))
        for k, (r, (start, kv)) in enumerate(hits.items()):
            logits[r] = self._prefill_cached(base + len(fresh) + k, seqs[r].tokens, start, kv)
        order = fresh + list(hits)  # slot order
        joined = [seqs[r] for r in order]
        if self.prefix_cache is not None:
            for k, s in enumerate(joined):
                self.prefix_cache.store(
                    s.tokens, [buf[base + k : base + k + 1, :, : len(s.tokens)].copy() for buf in self.kv]
                )
        self.rows.extend(joined)
        for s in seqs:
            s.slot = NumpySampler(s.req.params)
        return [self._pick(s, logits[r]) for r, s in enumerate(seqs)]

    def _prefill_fresh(self, first: int, seqs: list[Sequence]) -> np.ndarray:
        width = max(len(s.tokens) for s in seqs)
        ids = np.zeros((len(seqs), width), dtype=np.int64)
        for r, s in enumerate(seqs):
            ids[r, : len(s.tokens)] = s.tokens
        lengths = np.array([len(s.tokens) for s in seqs])
        return self._run(first, ids, (np.arange(width) < lengths[:, None]).astype(np.int64))

    def _prefill_cached(self, slot: int, tokens: list[int], start: int, kv: list[np.ndarray]) -> np.ndarray:
        for buf, cached in zip(self.kv, kv, strict=True):
            buf[slot, :, :start] = cached[0, :, :start]
        ids = np.array([tokens[start:]], dtype=np.int64)
        return np.asarray(self._run(slot, ids, np.ones((1, len(tokens)), dtype=np.int64))[0])

    @staticmethod
    def _pick(s: Sequence, logits: np.ndarray) -> list[int]:
        return [int(np.argmax(logits))] if s.req.params.plain_greedy else s.pick(s.slot, logits)

    def _step(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """A decode run over every row: the binding (KV views, a logits array of our own) is kept from step to step
        while the rows and buffers stay the same; only the ids and mask are bound anew."""
        key = (len(ids), id(self.kv[0]))
        if self.vocab is None:
            return self._run(0, ids, mask)
        if self._decode_io is None or self._decode_io[0] != key:
            io = self.session.io_binding()
            self._bind_kv(io, slice(0, len(ids)))
            logits = np.empty((len(ids), 1, self.vocab), dtype=self.logits_type)
            io.bind_output(self.logits_name, "cpu", 0, self.logits_type, list(logits.shape), logits.ctypes.data)
            self._decode_io = (key, io, logits)
        _, io, logits = self._decode_io
        io.bind_cpu_input(self.ids_name, ids.astype(self.ids_type, copy=False))
        io.bind_cpu_input(self.mask_name, mask.astype(self.mask_type, copy=False))
        self.session.run_with_iobinding(io)
        return logits[:, 0]

    def decode(self, seqs: list[Sequence]) -> list[list[int]]:
        lengths = np.array([len(s.tokens) for s in self.rows])  # the fed token goes to position length - 1
        ids = np.array([[s.tokens[-1]] for s in self.rows], dtype=np.int64)
        mask = (np.arange(int(lengths.max())) < lengths[:, None]).astype(np.int64)
        logits = self._step(ids, mask)
        greedy = logits.argmax(axis=-1)
        out = {
            id(s): [int(greedy[r])] if s.req.params.plain_greedy else s.pick(s.slot, logits[r])
            for r, s in enumerate(self.rows)
        }
        return [out[id(s)] for s in seqs]

    def release(self, seqs: list[Sequence]) -> None:
        """Drop rows; the last row moves into each freed slot (its cached positions only)."""
        gone = {id(s) for s in seqs}
        for r in sorted((r for r, s in enumerate(self.rows) if id(s) in gone), reverse=True):
            last = len(self.rows) - 1
            if r != last:
                n = len(self.rows[last].tokens)
                for buf in self.kv:
                    buf[r, :, :n] = buf[last, :, :n]
                self.rows[r] = self.rows[last]
            self.rows.pop()
        if self.rows:
            self._reserve(len(self.rows), max(s.reserved for s in self.rows))

    def device_error(self) -> str | None:
        return None  # CPU only
