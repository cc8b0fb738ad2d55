"""The operator's state lives in one object (kopf's memo), not in module globals; passes fan out through the queue;
closing cancels every task. The reconcile itself is proven on the real control plane (e2e/test_operator.py)."""

from __future__ import annotations

import asyncio
import logging
import types

from inference_backend.controller import handlers, state
from inference_backend.controller.config import Config
from inference_backend.controller.state import ALL, Indexes, OperatorState

SHARED_CONSTANTS = {"MANAGED"}  # kopf's label filter: read by its decorators at import, never written


def test_handlers_and_state_keep_no_mutable_module_globals() -> None:
    for module in (handlers, state):
        for name, value in vars(module).items():
            if name.startswith("__") or name in SHARED_CONSTANTS or name == "annotations":
                continue
            if isinstance(value, (types.ModuleType, types.FunctionType, type, logging.Logger)):
                continue
            if getattr(value, "__module__", "") == "typing" or type(value).__module__ == "typing":
                continue  # Key = tuple[str, str] and the like
            assert isinstance(value, (str, int, float, tuple, frozenset, types.GenericAlias)), (
                f"{module.__name__}.{name} is a module-level {type(value).__name__}: state belongs in OperatorState"
            )


def _state(backends: dict[tuple[str, str], list[dict]]) -> OperatorState:  # type: ignore[type-arg]
    indexes = Indexes(models={}, deployments={}, services={}, pdbs={}, backends=backends)
    st = OperatorState(indexes, Config(debounce=0.05))
    st.nodes.ready.set()
    st.indexed.set()
    return st


def test_a_pass_fans_out_to_the_backends_of_its_namespace_once_however_often_it_is_asked() -> None:
    async def with_timer() -> list[tuple[tuple[str, str], str]]:
        st = _state({("a", "x"): [], ("a", "y"): [], ("b", "z"): []})
        seen: list[tuple[tuple[str, str], str]] = []

        async def process(key: tuple[str, str], trigger: str) -> None:
            seen.append((key, trigger))
            await OperatorState.process(st, key, trigger)

        st.queue.run(process, workers=2)
        for _ in range(50):
            st.reconcile_all_soon("model", "a")
        await asyncio.sleep(0.3)
        await st.queue.shutdown()
        return seen

    seen = asyncio.run(with_timer())
    assert seen[0] == ((ALL, "a"), "model")
    assert sorted(seen[1:]) == [(("a", "x"), "model"), (("a", "y"), "model")]


def test_a_pass_is_timed_and_the_next_one_waits_pass_duty_times_as_long() -> None:
    async def main() -> tuple[float, float]:
        st = _state({("a", "x"): [], ("a", "y"): []})
        st.queue.run(st.process, workers=1)
        st.reconcile_all_soon("node")
        await asyncio.sleep(0.3)
        seconds = st.pass_seconds[ALL]
        st.pass_seconds[ALL] = 10.0  # as if the last pass took 10 s
        loop = asyncio.get_running_loop()
        before = loop.time()
        st.reconcile_all_soon("node")
        due = st.queue._due[(ALL, ALL)] - before  # the monotonic clock the queue uses is the loop's here
        await st.queue.shutdown()
        return seconds, due

    seconds, due = asyncio.run(main())
    assert 0 <= seconds < 0.3
    assert 39 < due <= 40.5  # PASS_DUTY (4) x 10 s


def test_close_cancels_the_node_watch_and_every_worker() -> None:
    async def main() -> None:
        st = _state({})

        async def forever() -> None:
            await asyncio.Event().wait()

        st._tasks.append(asyncio.get_running_loop().create_task(forever(), name="node watch"))
        st.queue.run(st.process, workers=3)
        tasks = st.tasks
        assert len(tasks) == 5
        await st.close()
        assert all(t.done() for t in tasks) and st.tasks == ()

    asyncio.run(main())
