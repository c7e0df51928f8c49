"""Synchronous work done while subprocesses run: the nft calls of a full sync and the Python
around them overlap instead of taking turns.

:func:`alongside` starts the awaitables as tasks and lets each run its first step, which is as
far as starting its subprocess (``nodeagent.nft.runner`` hands nft its script as a file, so nft
then needs nothing more from the event loop until it exits); then it does the work and collects
the results. On the 2-core machine a 10,000-service full sync builds its rules while nft lists
the table, and indexes them while nft loads them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

R = TypeVar("R")
T = TypeVar("T")


async def alongside(work: Callable[[], R], *aws: Awaitable[T]) -> tuple[R, list[T]]:
    """``work()`` while the awaitables run; their results in order. If anything fails, the
    tasks still running are cancelled (killing their subprocesses) before the error is raised."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.sleep(0)  # each task's first step: its subprocess starts
        done = work()
        results = [await t for t in tasks]
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.wait(tasks)
        for t in tasks:
            if not t.cancelled():
                t.exception()  # retrieved: the error raised here is the one that matters
        raise
    return done, results
