"""common/handoff.py: the engine thread's events reach the requests' coroutines with one event-loop wakeup per
engine step, in order; a non-eager inbox (a whole reply) is woken only by its last event, and gets them all."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from inference_backend.runners.common import handoff
from inference_backend.runners.common.engine import TokenEvent


def on_engine_thread(work: Callable[[], None]) -> None:
    t = threading.Thread(target=work)
    t.start()
    t.join()


def test_one_wakeup_per_step_in_order() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        wakeups = 0
        real = loop.call_soon_threadsafe

        def counting(callback, *args):  # type: ignore[no-untyped-def]
            nonlocal wakeups
            wakeups += 1
            return real(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        inboxes = [handoff.Inbox(eager=True) for _ in range(16)]
        for step in range(3):  # one event per running request, as the scheduler emits them

            def emit_step(step: int = step) -> None:
                for i, box in enumerate(inboxes):
                    box.put(TokenEvent([step * 100 + i]), last=False)

            on_engine_thread(emit_step)
            got = [await box.take() for box in inboxes]
            assert [[ev.token_ids for ev in events] for events in got] == [[[step * 100 + i]] for i in range(16)]
        assert wakeups == 3

    asyncio.run(main())


def test_whole_reply_wakes_at_its_last_event_only() -> None:
    async def main() -> None:
        whole, live = handoff.Inbox(eager=False), handoff.Inbox(eager=True)

        def engine() -> None:
            for tok in range(5):
                whole.put(TokenEvent([tok]), last=False)
                live.put(TokenEvent([tok]), last=False)

        on_engine_thread(engine)
        assert [ev.token_ids for ev in await live.take()] == [[0], [1], [2], [3], [4]]
        await asyncio.sleep(0.01)
        assert not whole.ready.is_set()  # five tokens in, no wakeup for the whole reply
        on_engine_thread(lambda: whole.put(TokenEvent([5], "length"), last=True))
        events = await whole.take()
        assert [ev.token_ids for ev in events] == [[0], [1], [2], [3], [4], [5]]
        assert events[-1].finish_reason == "length"

    asyncio.run(main())


def test_deadline_wakes_a_whole_reply_with_what_it_has() -> None:
    async def main() -> None:
        box = handoff.Inbox(eager=False)
        on_engine_thread(lambda: box.put(TokenEvent([7]), last=False))
        asyncio.get_running_loop().call_later(0.01, box.put_here, None)
        events = await box.take()
        assert events[0].token_ids == [7] and events[1] is None

    asyncio.run(main())


def test_wakeup_for_items_already_taken_is_skipped() -> None:
    async def main() -> None:
        box = handoff.Inbox(eager=True)
        on_engine_thread(lambda: box.put(TokenEvent([1]), last=False))
        await asyncio.sleep(0)  # delivered: ready
        on_engine_thread(lambda: box.put(TokenEvent([2]), last=False))  # a second wakeup is on its way
        assert [ev.token_ids for ev in await box.take()] == [[1], [2]]  # takes both before that wakeup runs
        await asyncio.sleep(0)  # the second wakeup: ready, nothing left to read
        on_engine_thread(lambda: box.put(TokenEvent([3], "stop"), last=True))
        assert [ev.token_ids for ev in await box.take()] == [[3]]

    asyncio.run(main())
