"""Time, injected.

Durations come from the event loop (``loop.time()`` and ``asyncio.sleep``) so tests can
virtualise them with looptime. Wall-clock stamps (Lease renewTime, condition times) come from
a ``Clock.now()`` that tests replace; managers never call ``time.time()`` or ``datetime.now()``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Protocol, final


class Clock(Protocol):
    def now(self) -> dt.datetime:
        """Current wall-clock time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on the event loop's monotonic clock."""
        ...


@final
class RealClock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()


@final
class FrozenClock:
    """A wall clock that only moves when told; monotonic time still follows the loop."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = start or dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def now(self) -> dt.datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += dt.timedelta(seconds=seconds)

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()
