"""The work queue's contract (controller-runtime's): dedup, one worker per key, no lost trigger, delays, backoff,
and a shutdown that leaves no task behind. Real asyncio, real time (short delays)."""

from __future__ import annotations

import asyncio
import random

import pytest
from inference_backend.controller.workqueue import Backoff, WorkQueue


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_keys_added_while_waiting_fold_into_one_and_keep_the_first_trigger() -> None:
    async def main() -> list[tuple[str, str]]:
        q: WorkQueue[str] = WorkQueue()
        for trigger in ("node", "model", "node"):
            q.add("a", trigger)
        q.add("b", "listing")
        assert len(q) == 2
        return [await q.get(), await q.get()]

    assert run(main()) == [("a", "node"), ("b", "listing")]


def test_a_key_is_never_processed_by_two_workers_and_a_readd_during_processing_runs_again() -> None:
    async def main() -> tuple[int, int]:
        q: WorkQueue[str] = WorkQueue()
        active = 0
        most = 0
        runs = 0
        release = asyncio.Event()

        async def process(key: str, trigger: str) -> None:
            nonlocal active, most, runs
            active += 1
            most = max(most, active)
            runs += 1
            if runs == 1:
                await release.wait()
            active -= 1

        q.add("a")
        q.run(process, workers=4)
        await asyncio.sleep(0.05)
        for _ in range(5):
            q.add("a")  # while "a" is processed: marked dirty once, not handed to the idle workers
        await asyncio.sleep(0.05)
        assert q.processing == {"a"} and len(q) == 0
        release.set()
        await asyncio.sleep(0.05)
        await q.shutdown()
        return most, runs

    most, runs = run(main())
    assert most == 1
    assert runs == 2  # the first run, then one more for the five adds made during it


def test_add_after_keeps_the_sooner_time_and_delivers_once() -> None:
    async def main() -> list[tuple[str, float]]:
        q: WorkQueue[str] = WorkQueue()
        seen: list[tuple[str, float]] = []
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def process(key: str, trigger: str) -> None:
            seen.append((trigger, loop.time() - start))

        q.run(process, workers=1)
        q.add_after("a", 0.6, "late")
        q.add_after("a", 0.1, "soon")
        q.add_after("a", 0.4, "later")  # already due sooner: ignored
        await asyncio.sleep(0.9)
        await q.shutdown()
        return seen

    seen = run(main())
    assert [t for t, _ in seen] == ["soon"]
    assert 0.08 <= seen[0][1] < 0.5


def test_discard_drops_a_delayed_or_queued_key() -> None:
    async def main() -> list[str]:
        q: WorkQueue[str] = WorkQueue()
        seen: list[str] = []

        async def process(key: str, trigger: str) -> None:
            seen.append(key)

        q.add("a")
        q.add_after("b", 0.1)
        q.discard("a")
        q.discard("b")
        q.add("c")
        q.run(process, workers=2)
        await asyncio.sleep(0.3)
        await q.shutdown()
        return seen

    assert run(main()) == ["c"]


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(1, 5.0), (2, 10.0), (3, 20.0), (6, 160.0), (7, 300.0), (200, 300.0)],
    ids=lambda v: str(v),
)
def test_backoff_is_5s_doubling_capped_at_300s_then_jittered_down_by_at_most_a_fifth(
    failures: int, expected: float
) -> None:
    b = Backoff(rng=random.Random(1))
    delays = [b.when("k") for _ in range(failures)]
    assert expected * 0.8 <= delays[-1] <= expected
    assert b.retries("k") == failures
    b.forget("k")
    assert b.retries("k") == 0 and b.when("k") <= 5.0


def test_jitter_spreads_keys_that_failed_together() -> None:
    b = Backoff(rng=random.Random(7))
    assert len({round(b.when(f"k{i}"), 3) for i in range(20)}) > 10


def test_a_failing_process_is_retried_with_backoff_and_the_worker_survives() -> None:
    async def main() -> list[str]:
        q: WorkQueue[str] = WorkQueue(backoff=Backoff(base=0.05, cap=0.05, jitter=0.0))
        seen: list[str] = []

        async def process(key: str, trigger: str) -> None:
            seen.append(f"{key}:{trigger}")
            if key == "bad" and len(seen) < 3:
                raise RuntimeError("boom")

        q.add("bad", "listing")
        q.run(process, workers=1)
        await asyncio.sleep(0.05)
        q.add("good", "listing")
        await asyncio.sleep(0.3)
        await q.shutdown()
        return seen

    seen = run(main())
    assert seen[0] == "bad:listing"
    assert "good:listing" in seen
    assert "bad:retry" in seen


def test_shutdown_cancels_every_task_and_refuses_new_work() -> None:
    async def main() -> None:
        q: WorkQueue[str] = WorkQueue()
        hold = asyncio.Event()

        async def process(key: str, trigger: str) -> None:
            await hold.wait()

        q.add("a")
        q.add_after("b", 30)
        q.run(process, workers=3)
        await asyncio.sleep(0.05)
        tasks = q.tasks
        assert len(tasks) == 4  # three workers and the timer
        await q.shutdown()
        assert all(t.done() for t in tasks) and q.tasks == ()
        q.add("c")
        assert len(q) == 0
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("workqueue")]

    run(main())
