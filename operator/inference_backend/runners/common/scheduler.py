"""Request scheduling shared by both runners: queueing, batching policies, KV admission control, metrics.

One engine thread owns the model. Policies:
  static     - wait until --max-batch-size requests are queued (or the oldest waited --max-wait-ms), run that
               batch to completion; nothing joins a running batch.
  dynamic    - once the first request of a batch arrives, collect until --max-wait-ms pass with no new
               arrival (the window restarts at each arrival, so a burst that takes longer than the window to
               come in is one batch, not two), the first has waited DYNAMIC_HOLD_CAP x --max-wait-ms, or
               --max-batch-size / --max-batch-tokens is reached; run to completion. Requests that queued while
               the previous batch ran start at once.
  continuous - at every decode step, finished sequences leave and queued ones are prefilled and join.
Admission: a request reserves prompt + max_tokens KV tokens; it waits while the reservation would exceed the
KV budget (--kv-cache-memory-fraction).
Isolation: a request that fails fails alone. Backends choose tokens through Sequence.pick, which records a
sampling error on that sequence only; a failed batched prefill is retried one sequence at a time (backends
change no state unless a prefill succeeds), so only the request that raises gets an error. A failed decode step
is not any one request's fault: it fails the running batch. After any failure the backend's device is checked:
a broken device (a CUDA error poisons the context) marks the engine fatal, every request gets an error, /health
turns 503 and the pod is restarted.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from inference_backend.runners.common.engine import EngineUnavailable, GenRequest, QueueFull, TokenEvent, TokenLogprob
from inference_backend.runners.common.metrics import Metrics

log = logging.getLogger(__name__)
DYNAMIC_HOLD_CAP = 4  # dynamic: a steady trickle holds the first request at most this many windows


@dataclass
class Sequence:
    req: GenRequest
    tokens: list[int]
    prompt_len: int
    reserved: int
    finish: str | None = None
    slot: Any = None  # backend-owned state (row index, caches, sampler)
    t_last: float = 0.0
    t_first: float = 0.0  # when the first token came (vLLM's time per output token excludes it)
    generated: int = 0
    scheduled: float = field(default_factory=time.monotonic)
    error: str | None = None  # set by pick(): this request failed (the others go on)
    picked_logprobs: list[TokenLogprob] = field(default_factory=list)  # by pick(), for the tokens not yet emitted

    def pick(self, choose: Callable[[Any], int | tuple[int, TokenLogprob]], logits: Any) -> list[int]:
        """choose(logits) as a one-token list (a sampler asked for logprobs returns (token, logprob): kept for the
        event); on an exception, the sequence fails alone (returns [])."""
        try:
            picked = choose(logits)
        except Exception as exc:
            log.warning("request %s: sampling failed: %s", self.req.request_id, exc)
            self.error = f"sampling failed: {exc}"
            return []
        if isinstance(picked, tuple):
            self.picked_logprobs.append(picked[1])
            return [picked[0]]
        return [picked]


class Backend(Protocol):
    def prefill(self, seqs: list[Sequence]) -> list[list[int]]:
        """Compute the prompts' KV, add them to the running batch, return each one's first token(s)."""
        ...

    def decode(self, seqs: list[Sequence]) -> list[list[int]]:
        """One step for every running sequence (same order); speculative steps may return several tokens."""
        ...

    def release(self, seqs: list[Sequence]) -> None:
        """Drop finished sequences from the running batch."""
        ...

    def device_error(self) -> str | None:
        """After a failure: why the device is unusable now, or None when it still works."""
        ...


class Scheduler:
    def __init__(
        self,
        backend: Backend,
        *,
        policy: str,
        max_batch_size: int,
        max_batch_tokens: int,
        max_wait_ms: float,
        max_queue: int,
        kv_capacity_tokens: int,
        max_model_len: int,
        eos_token_ids: set[int],
        metrics: Metrics,
    ) -> None:
        self.backend = backend
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.kv_capacity = kv_capacity_tokens
        self.max_model_len = max_model_len
        self.eos = eos_token_ids
        self.metrics = metrics
        self.waiting: collections.deque[GenRequest] = collections.deque()
        self.running: list[Sequence] = []
        self.reserved = 0
        self.fatal: str | None = None  # set when the device broke: the engine serves no more
        self._free_since = 0.0  # when the last batch ended (static/dynamic): requests older than this waited it out
        self._cond = threading.Condition()
        self._stop = False
        self._calls: list[tuple[Callable[[], Any], Callable[[], bool], Future[Any]]] = []
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)

    # -- called from the HTTP side -------------------------------------------------------------------
    def submit(self, req: GenRequest) -> None:
        with self._cond:
            if self.fatal is not None or self._stop:
                raise EngineUnavailable(self.fatal or "the server is shutting down")
            if len(self.waiting) >= self.max_queue:
                raise QueueFull(self.max_queue)
            self.waiting.append(req)
            self.metrics.waiting.set(len(self.waiting))
            self._cond.notify()

    def cancel(self, req: GenRequest) -> None:
        """Drop a request (client gone, deadline passed); wakes the engine so a queued one leaves at once."""
        req.cancelled.set()
        with self._cond:
            self._cond.notify()

    def call(self, fn: Callable[[], Any], when: Callable[[], bool] = lambda: True) -> Future[Any]:
        """Run ``fn`` on the engine thread between two steps, once ``when()`` holds (checked under the queue's lock,
        at every step): a change of the backend's state while it serves (a LoRA adapter loaded or unloaded at run
        time). Its result or exception comes in the future."""
        fut: Future[Any] = Future()
        with self._cond:
            if self.fatal is not None or self._stop:
                raise EngineUnavailable(self.fatal or "the server is shutting down")
            self._calls.append((fn, when, fut))
            self._cond.notify()
        return fut

    def uses(self, pred: Callable[[GenRequest], bool]) -> bool:
        """Whether a waiting or running request satisfies ``pred`` (call it under ``when``: the lock is held)."""
        return any(pred(r) for r in self.waiting) or any(pred(s.req) for s in self.running)

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def alive(self) -> bool:
        """False once the device broke or the engine thread ended (then /health answers 503)."""
        return self.fatal is None and self._thread.is_alive()

    # -- engine thread --------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            admitted = self._next_admissions()
            if admitted is None:
                return
            self._run_calls()
            try:
                if admitted:
                    self._prefill(admitted)
                if self.running:
                    self._decode()
            except Exception as exc:  # not one request's fault (a bug, OOM): fail the running batch, go on
                log.exception("engine step failed")
                self._fail_running(f"engine step failed: {exc}")
            if not self.running:
                self._free_since = time.monotonic()
            if self.fatal is not None:
                self._fail_everything()
                return

    def _run_calls(self) -> None:
        """The calls whose condition holds now, in order (engine thread, outside the lock)."""
        with self._cond:
            ready = [c for c in self._calls if c[1]()]
            self._calls = [c for c in self._calls if c not in ready]
        for fn, _, fut in ready:
            try:
                fut.set_result(fn())
            except Exception as exc:
                fut.set_exception(exc)

    def _check_device(self) -> None:
        try:
            err = self.backend.device_error()
        except Exception as exc:
            err = f"device check failed: {exc}"
        if err is not None:
            log.error("device unusable, the engine stops (health turns 503): %s", err)
            self.fatal = err

    def _next_admissions(self) -> list[Sequence] | None:
        """Block as the policy says; return the requests to prefill now (None: shutting down)."""
        with self._cond:
            while True:
                if self._stop:
                    for _, _, fut in self._calls:
                        fut.set_exception(EngineUnavailable("the server is shutting down"))
                    self._calls = []
                    return None
                self._drop_cancelled_waiting()
                if any(when() for _, when, _ in self._calls):
                    return []  # run them first (_loop)
                if self.policy == "continuous":
                    if self.running or self.waiting:
                        return self._take(self.max_batch_size - len(self.running))
                elif self.running:
                    return []  # static/dynamic: nothing joins a running batch
                elif self.waiting:
                    now, first = time.monotonic(), self.waiting[0].arrival
                    ready = len(self.waiting) >= self.max_batch_size
                    if self.policy == "dynamic":
                        ready = ready or first < self._free_since or self._queued_tokens() >= self.max_batch_tokens
                        until = min(self.waiting[-1].arrival + self.max_wait, first + DYNAMIC_HOLD_CAP * self.max_wait)
                    else:
                        until = first + self.max_wait
                    if ready or now >= until:
                        return self._take(self.max_batch_size)
                    self._cond.wait(timeout=until - now)
                    continue
                self._cond.wait(timeout=1.0)

    def _queued_tokens(self) -> int:
        return sum(len(r.prompt_ids) for r in self.waiting)

    def _drop_cancelled_waiting(self) -> None:
        gone = [r for r in self.waiting if r.cancelled.is_set()]
        for req in gone:
            self.waiting.remove(req)
            self.metrics.finished("abort")
            req.emit(TokenEvent([], "abort"))
        if gone:
            self.metrics.waiting.set(len(self.waiting))

    def _take(self, slots: int) -> list[Sequence]:
        taken: list[Sequence] = []
        tokens = 0
        while self.waiting and len(taken) < slots:
            req = self.waiting[0]
            need = min(len(req.prompt_ids) + req.params.max_tokens, self.max_model_len)
            if taken and tokens + len(req.prompt_ids) > self.max_batch_tokens:
                break
            if self._kv_over(taken, need) and (self.running or taken):
                break  # wait for KV budget; a lone request always runs (max_model_len fits the budget)
            self.waiting.popleft()
            tokens += len(req.prompt_ids)
            self.reserved += need
            now = time.monotonic()
            self.metrics.queue_time.observe(now - req.arrival)
            taken.append(Sequence(req, list(req.prompt_ids), len(req.prompt_ids), need, scheduled=now))
        self.metrics.waiting.set(len(self.waiting))
        return taken

    def _kv_over(self, taken: list[Sequence], need: int) -> bool:
        """Would one more sequence needing `need` positions exceed the KV budget? A backend whose KV is one padded
        buffer (padded_kv: every row as long as the longest reservation, onnx/gqa.py) counts rows x longest."""
        if not getattr(self.backend, "padded_kv", False):
            return self.reserved + need > self.kv_capacity
        longest = max([s.reserved for s in self.running] + [s.reserved for s in taken] + [need])
        return (len(self.running) + len(taken) + 1) * longest > self.kv_capacity

    def _prefill(self, seqs: list[Sequence]) -> None:
        try:
            first = self.backend.prefill(seqs)
        except Exception as exc:
            self._check_device()
            if self.fatal is not None:
                self._fail(seqs, self.fatal)
                return
            if len(seqs) == 1:
                log.warning("request %s: prefill failed: %s", seqs[0].req.request_id, exc)
                self._fail(seqs, f"prefill failed: {exc}")
                return
            for seq in seqs:  # find the culprit(s): the backend changed nothing, so retry one at a time
                if self.fatal is None:
                    self._prefill([seq])
                else:
                    self._fail([seq], self.fatal)
            return
        self.metrics.prompt_tokens.inc(sum(s.prompt_len for s in seqs))
        self.running.extend(seqs)
        self._gauges()
        self._advance(seqs, first)

    def _fail(self, seqs: list[Sequence], message: str) -> None:
        """Requests that never joined the running batch: error them, give back their KV reservation."""
        for s in seqs:
            self.reserved -= s.reserved
            self.metrics.finished("error")
            s.req.emit(TokenEvent([], "error", error=message))
        self._gauges()

    def _decode(self) -> None:
        for s in self.running:
            if s.req.cancelled.is_set():
                s.finish = "abort"
        self._retire()
        if self.running:
            self._advance(list(self.running), self.backend.decode(list(self.running)))

    def _advance(self, seqs: list[Sequence], new: list[list[int]]) -> None:
        now = time.monotonic()
        for seq, toks in zip(seqs, new, strict=True):
            out: list[int] = []
            if seq.error is not None:
                seq.finish = "error"
            for tok in toks if seq.finish is None else ():
                if tok in self.eos and not seq.req.params.ignore_eos:
                    seq.finish = "stop"
                    break
                out.append(tok)
                seq.tokens.append(tok)
                seq.generated += 1
                if seq.generated >= seq.req.params.max_tokens or len(seq.tokens) >= self.max_model_len:
                    seq.finish = "length"
                    break
            if seq.finish == "error":
                continue  # _retire tells the client
            if seq.t_last == 0.0:
                seq.t_first = now
                self.metrics.ttft.observe(now - seq.req.arrival)
            elif out:
                for _ in out:
                    self.metrics.itl.observe((now - seq.t_last) / len(out))
            seq.t_last = now
            self.metrics.generation_tokens.inc(len(out))
            lps = None
            if seq.req.params.logprobs is not None:  # one per picked token; the emitted ones are a prefix
                lps, seq.picked_logprobs = seq.picked_logprobs[: len(out)], []
            seq.req.emit(TokenEvent(out, seq.finish, logprobs=lps))
        self._retire()

    def _retire(self) -> None:
        done = [s for s in self.running if s.finish is not None]
        if not done:
            return
        now = time.monotonic()
        for s in done:
            self.running.remove(s)
            self.reserved -= s.reserved
            self.metrics.e2e.observe(now - s.req.arrival)
            if s.generated > 1:  # vLLM: decode time / (generation tokens - 1)
                self.metrics.tpot.observe((s.t_last - s.t_first) / (s.generated - 1))
            self.metrics.finished(s.finish or "stop")
            if s.finish == "abort":
                s.req.emit(TokenEvent([], "abort"))
            elif s.finish == "error":
                s.req.emit(TokenEvent([], "error", error=s.error))
        self.backend.release(done)
        self._gauges()

    def _fail_running(self, message: str) -> None:
        self._check_device()
        running, self.running = self.running, []
        for s in running:
            s.finish = "error"
            self.reserved -= s.reserved
            self.metrics.finished("error")
            s.req.emit(TokenEvent([], "error", error=message))
        try:
            self.backend.release(running)
        except Exception:
            log.exception("releasing the failed batch failed")
            self._check_device()
        self._gauges()

    def _fail_everything(self) -> None:
        """The device broke: every running and waiting request gets the error; nothing more is admitted."""
        message = f"the engine stopped after a device error: {self.fatal}"
        for s in self.running:
            self.metrics.finished("error")
            s.req.emit(TokenEvent([], "error", error=message))
        self.running = []
        with self._cond:
            waiting, self.waiting = list(self.waiting), collections.deque()
        for req in waiting:
            self.metrics.finished("error")
            req.emit(TokenEvent([], "error", error=message))
        self.reserved = 0
        self.metrics.waiting.set(0)
        self._gauges()

    def _gauges(self) -> None:
        self.metrics.running.set(len(self.running))
        if self.metrics.lora_info is not None:  # the adapters running and waiting, each named once, in order
            running = dict.fromkeys(s.req.adapter for s in self.running if s.req.adapter)
            with self._cond:  # the HTTP side appends to it (an RLock: callers may hold it already)
                waiting = dict.fromkeys(r.adapter for r in self.waiting if r.adapter)
            self.metrics.lora_requests(list(running), list(waiting))
        self.metrics.kv_usage.set(self.reserved / self.kv_capacity if self.kv_capacity else 0.0)
