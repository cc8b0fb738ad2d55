"""TokenEvents from the engine thread to the requests' coroutines, with one event-loop wakeup per engine step.

The engine emits one TokenEvent per request per step, from its own thread. One loop.call_soon_threadsafe per event
costs a self-pipe write, a loop wakeup and a callback per request per token, and every wakeup makes the event loop
take the GIL from the engine thread (onnxruntime-genai holds the GIL through a forward, so the loop's work never
overlaps the model's: it adds to every step). Here the engine thread only appends the event to its request's
Inbox; an inbox that should be looked at now joins its loop's ready list, and the loop is woken once for all the
inboxes that became ready since its last wakeup.

An inbox is `eager` when its reader needs each event as it comes (streaming; stop strings, which end the generation
early); otherwise (a whole reply) it becomes ready only at its last event, so the loop does nothing for that request
while it generates.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import weakref
from typing import Any


class Postman:
    """One per event loop: wakes the loop once for every inbox that became ready since its last wakeup."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._ready: list[Inbox] = []

    def post(self, inbox: Inbox) -> None:
        """Engine thread: `inbox` has something to read."""
        with self._lock:
            wake = not self._ready
            self._ready.append(inbox)
        if wake:
            with contextlib.suppress(RuntimeError):  # event loop gone (shutdown)
                self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for inbox in ready:
            inbox.ready.set()


_postmen: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Postman] = weakref.WeakKeyDictionary()


def postman() -> Postman:
    """The running event loop's Postman."""
    loop = asyncio.get_running_loop()
    man = _postmen.get(loop)
    if man is None:
        man = _postmen[loop] = Postman(loop)
    return man


class Inbox:
    """One request's events: put() from the engine thread, take() on the event loop (created there)."""

    def __init__(self, eager: bool) -> None:
        self.eager = eager
        self.ready = asyncio.Event()
        self._postman = postman()
        self._items: collections.deque[Any] = collections.deque()

    def put(self, item: Any, last: bool) -> None:
        """Engine thread. `last`: no more items follow (the inbox then becomes ready even if not eager)."""
        self._items.append(item)
        if self.eager or last:
            self._postman.post(self)

    def put_here(self, item: Any) -> None:
        """On the event loop itself (a deadline): ready at once."""
        self._items.append(item)
        self.ready.set()

    async def take(self) -> list[Any]:
        """Everything put so far (at least one item), once the inbox is ready."""
        while True:
            await self.ready.wait()
            self.ready.clear()
            if self._items:  # else: a wakeup for items an earlier take() already returned
                break
        items = []
        while self._items:
            items.append(self._items.popleft())
        return items
