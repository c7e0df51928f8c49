"""Run a manager's ``run()`` in the background for the length of a ``with`` block."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Protocol, TypeVar


class Runs(Protocol):
    def run(self) -> Coroutine[Any, Any, Any]: ...


R = TypeVar("R", bound=Runs)


@contextlib.asynccontextmanager
async def running(manager: R) -> AsyncIterator[R]:
    """``async with running(m):`` — ``m.run()`` as a task, cancelled and awaited at the end."""
    task = asyncio.create_task(manager.run())
    try:
        yield manager
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
