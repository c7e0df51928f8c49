"""The agent's garbage collection: a full one as it starts, then every two minutes."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from nodeagent.gcpacing import FORCE_PERIOD, pace


@pytest.mark.looptime
async def test_a_full_collection_at_the_start_then_every_period() -> None:
    loop = asyncio.get_running_loop()
    calls: list[tuple[float, str]] = []

    def collect() -> int:
        calls.append((loop.time(), "collect"))
        return 0

    task = asyncio.create_task(pace(collect=collect))
    await asyncio.sleep(3 * FORCE_PERIOD + 1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    assert FORCE_PERIOD == 120  # the Go runtime's forcegcperiod
    assert calls == [(0, "collect"), (120, "collect"), (240, "collect"), (360, "collect")]


class Node:
    """An object in a reference cycle, as a closed stream's transport and protocol are."""

    def __init__(self) -> None:
        self.peer: Node | None = None


@pytest.fixture
def automatic_collection_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.looptime
@pytest.mark.usefixtures("automatic_collection_off")
async def test_a_reference_cycle_is_gone_after_the_next_collection() -> None:
    task = asyncio.create_task(pace(period=10))
    await asyncio.sleep(1)  # the collection of the start is done
    a, b = Node(), Node()
    a.peer, b.peer = b, a
    gone = weakref.ref(a)
    del a, b
    await asyncio.sleep(8)
    assert gone() is not None  # reference counting alone never frees a cycle
    assert gone() is not None
    await asyncio.sleep(2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert gone() is None
