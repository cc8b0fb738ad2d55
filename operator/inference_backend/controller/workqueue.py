"""A rate-limited work queue with per-key deduplication: the pattern of controller-runtime's workqueue.

- ``add(key)``: a key waiting in the queue is not added twice (triggers fold into one reconcile); a key being
  processed now is marked dirty and queued again once its worker calls ``done``, so two workers never process
  the same key at once and no trigger is lost.
- ``add_after(key, delay)``: added once ``delay`` has passed; a key already waiting keeps the earlier time.
- ``add_rate_limited(key)``: ``add_after`` with the key's own backoff (exponential, capped, with jitter), which
  ``forget(key)`` resets after a success.
- ``run(process, workers)``: the workers and the one timer task, all referenced by the queue; ``shutdown()``
  cancels and awaits every one of them.

controller-runtime: sigs.k8s.io/controller-runtime pkg/internal/controller (processNextWorkItem) over client-go's
util/workqueue (Type: dirty/processing sets; delaying_queue; default_rate_limiters: ItemExponentialFailureRateLimiter).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
log = logging.getLogger(__name__)


@dataclass
class Backoff:
    """Per-key exponential backoff: ``base * 2**(failures-1)`` capped at ``cap``, then jittered by up to
    ``jitter`` of itself (down, so the cap holds), so keys that failed together do not retry together."""

    base: float = 5.0
    cap: float = 300.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    failures: dict[Hashable, int] = field(default_factory=dict)

    def when(self, key: Hashable) -> float:
        """Seconds to wait before retrying ``key``, counting this failure."""
        n = self.failures.get(key, 0) + 1
        self.failures[key] = n
        delay: float = min(self.base * 2.0 ** min(n - 1, 64), self.cap)
        return delay * (1.0 - self.jitter * self.rng.random())

    def retries(self, key: Hashable) -> int:
        return self.failures.get(key, 0)

    def forget(self, key: Hashable) -> None:
        self.failures.pop(key, None)


class WorkQueue(Generic[K]):
    def __init__(self, backoff: Backoff | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff = backoff or Backoff()
        self._clock = clock
        self._queue: deque[K] = deque()
        self._dirty: dict[K, str] = {}
        """Keys waiting to be processed, with the first trigger that asked for each (for metrics and logs)."""
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K, str]] = []
        """The delayed keys: a heap of (due time, sequence, key, trigger)."""
        self._due: dict[K, float] = {}
        self._seq = itertools.count()
        self._ready = asyncio.Event()
        self._timer_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    # -- adding -------------------------------------------------------------------------------------------------
    def add(self, key: K, trigger: str = "") -> None:
        if self._closed or key in self._dirty:
            return
        self._dirty[key] = trigger
        if key not in self._processing:
            self._queue.append(key)
            self._ready.set()

    def add_after(self, key: K, delay: float, trigger: str = "") -> None:
        if delay <= 0:
            self.add(key, trigger)
            return
        if self._closed:
            return
        due = self._clock() + delay
        if key in self._due and self._due[key] <= due:
            return  # already waiting, and due sooner
        self._due[key] = due
        heapq.heappush(self._waiting, (due, next(self._seq), key, trigger))
        self._timer_wake.set()

    def add_rate_limited(self, key: K, trigger: str = "retry") -> float:
        delay = self.backoff.when(key)
        self.add_after(key, delay, trigger)
        return delay

    def forget(self, key: K) -> None:
        """Reset the key's backoff (after a success, or when its object is gone)."""
        self.backoff.forget(key)

    def discard(self, key: K) -> None:
        """Drop everything queued or delayed for ``key`` (its object was deleted)."""
        self.forget(key)
        self._due.pop(key, None)  # its heap entry is skipped when it comes due
        if self._dirty.pop(key, None) is not None and key not in self._processing:
            self._queue.remove(key)

    # -- state, for tests and metrics ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._queue)

    @property
    def delayed(self) -> int:
        return len(self._due)

    @property
    def processing(self) -> frozenset[K]:
        return frozenset(self._processing)

    @property
    def tasks(self) -> tuple[asyncio.Task[None], ...]:
        return tuple(self._tasks)

    # -- taking --------------------------------------------------------------------------------------------------
    async def get(self) -> tuple[K, str]:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        key = self._queue.popleft()
        trigger = self._dirty.pop(key)
        self._processing.add(key)
        return key, trigger

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:  # added again while it was processed
            self._queue.append(key)
            self._ready.set()

    # -- running -------------------------------------------------------------------------------------------------
    def run(self, process: Callable[[K, str], Awaitable[None]], workers: int) -> None:
        """Start ``workers`` workers calling ``process(key, trigger)`` and the timer of the delayed keys. An
        exception escaping ``process`` is logged and the key retried with its backoff: a worker never dies."""
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._timer(), name="workqueue timer"))
        for i in range(workers):
            self._tasks.append(loop.create_task(self._worker(process), name=f"workqueue worker {i}"))

    async def _worker(self, process: Callable[[K, str], Awaitable[None]]) -> None:
        while True:
            key, trigger = await self.get()
            try:
                await process(key, trigger)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("processing %r failed; retrying with backoff", key)
                self.add_rate_limited(key)
            finally:
                self.done(key)

    async def _timer(self) -> None:
        while True:
            now = self._clock()
            while self._waiting and self._waiting[0][0] <= now:
                due, _, key, trigger = heapq.heappop(self._waiting)
                if self._due.get(key) == due:  # not superseded by a sooner add_after, nor discarded
                    del self._due[key]
                    self.add(key, trigger)
            self._timer_wake.clear()
            timeout = self._waiting[0][0] - now if self._waiting else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_wake.wait(), timeout)

    async def shutdown(self) -> None:
        """Stop taking work, cancel every task the queue started and wait for them to end."""
        self._closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
