"""The interpreter's cyclic garbage collector, paced as the Go runtime paces the kubelet's.

CPython frees an object when its last reference goes; objects in a reference cycle wait for the
cyclic collector. Its oldest generation is collected only once the objects promoted into it
since the last full collection exceed a quarter of the long-lived ones, and the agent holds tens
of thousands of long-lived objects from its start (modules, functions, managers). Under steady
work a full collection then comes an hour or more apart, and the cycles asyncio leaves
meanwhile pile up: a closed probe connection (transport, protocol, stream writer, socket
object), a cancelled probe worker's task and frame. The 3-node soak measured the agent's RSS
growing by 9 MiB an hour, in Python's small-object allocator; one ``gc.collect()`` then found
4,549 unreachable objects and gave back 14,500 blocks, the growth of the previous 15 minutes.

So :func:`pace` runs a full collection as the managers start and then every ``period``: 2
minutes, the Go runtime's ``forcegcperiod``. One costs about 40 ms on a soak node (2 cores,
~90,000 tracked objects). The start's objects are not frozen out of it with ``gc.freeze()``:
the proxy's ``paused_gc`` moves every tracked object into the oldest generation with
``freeze`` + ``unfreeze`` after each burst of rules, which would thaw them again. What the
collections find is in ``python_gc_objects_collected_total`` and
``python_gc_collections_total`` (the Prometheus client's collector, on ``/metrics``) and in a
V(4) log line.
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
    log: Logger | None = None,
) -> NoReturn:
    """Collect now, then every ``period`` seconds of loop time."""
    log = log or get_logger("gc")
    while True:
        began = time.perf_counter()
        found = collect()
        took = f"{(time.perf_counter() - began) * 1000:.1f}ms"
        log.v(4).info("Collected garbage", unreachable=found, duration=took)
        await asyncio.sleep(period)
