"""Time, injected.

Durations come from the event loop (``loop.time()`` and ``asyncio.sleep``) so tests can
virtualise them with looptime. Wall-clock stamps (Lease renewTime, condition times) come from
a ``Clock.now()`` that tests replace; managers never call ``time.time()`` or ``datetime.now()``.
:class:`TokenBucket` limits a rate on whatever time it is given.
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


class TokenBucket:
    """``burst`` tokens, one more every ``refill`` seconds of loop time."""

    def __init__(self, *, burst: int, refill: float) -> None:
        self._burst = burst
        self._refill = refill
        self._tokens = float(burst)
        self._at: float | None = None

    def take(self, now: float) -> bool:
        if self._at is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._at) / self._refill)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False
