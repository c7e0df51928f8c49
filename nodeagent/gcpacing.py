"""The interpreter's cyclic garbage collector, paced as the Go runtime paces the kubelet's.

CPython frees an object when its last reference goes; objects in a reference cycle wait for the
cyclic collector. Its oldest generation is collected only once the objects promoted into it
since the last full collection exceed a quarter of the long-lived ones, and the agent holds some
350,000 long-lived objects from its start (modules, functions, managers). Under steady work a
full collection then comes an hour or more apart, and the cycles asyncio leaves meanwhile pile
up: a closed probe connection (transport, protocol, stream writer, socket object), a cancelled
probe worker's task and frame. The 3-node soak measured the agent's RSS growing by 9 MiB an
hour, in Python's small-object allocator; one ``gc.collect()`` then found 4,549 unreachable
objects and gave back 14,500 blocks, the growth of the previous 15 minutes.

So :func:`pace` makes the collections regular. As the managers start, one full collection and
``gc.freeze()``: what the imports and the wiring made (nearly all of those long-lived objects)
moves to the permanent generation and is never scanned again, so a full collection costs what
the work since has made, not 60 ms. No pod exists yet then, so no pod's objects are frozen (a
frozen cycle is never freed). Then a full collection every ``period``: 2 minutes, the Go
runtime's ``forcegcperiod``. What the collections find is in
``python_gc_objects_collected_total`` and ``python_gc_collections_total`` (the Prometheus
client's collector, on ``/metrics``) and in a V(4) log line.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Final, NoReturn

from nodeagent.log import Logger, get_logger

FORCE_PERIOD: Final = 120.0  # seconds; the Go runtime's forcegcperiod


async def pace(
    *,
    period: float = FORCE_PERIOD,
    collect: Callable[[], int] = gc.collect,
    freeze: Callable[[], None] = gc.freeze,
    frozen: Callable[[], int] = gc.get_freeze_count,
    log: Logger | None = None,
) -> NoReturn:
    """Collect and freeze now, then collect every ``period`` seconds of loop time."""
    log = log or get_logger("gc")
    _collect(collect, log)
    freeze()
    log.v(2).info("Froze the objects of the start", objects=frozen())
    while True:
        await asyncio.sleep(period)
        _collect(collect, log)


def _collect(collect: Callable[[], int], log: Logger) -> None:
    began = time.perf_counter()
    found = collect()
    took = f"{(time.perf_counter() - began) * 1000:.1f}ms"
    log.v(4).info("Collected garbage", unreachable=found, duration=took)
