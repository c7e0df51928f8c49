"""A clock whose wall time and monotonic time move only when told."""

from __future__ import annotations

import datetime as dt


class ManualClock:
    def __init__(self, start: dt.datetime = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) -> None:
        self._now = start
        self._mono = 1000.0

    def now(self) -> dt.datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += dt.timedelta(seconds=seconds)
        self._mono += seconds
