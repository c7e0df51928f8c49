"""Exponential backoff as a small value object: ``next()`` gives the delay to sleep now."""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """Delays ``initial, initial*factor, ...`` capped at ``cap``; ``jitter`` adds up to
    ``jitter * delay`` on top (``rand`` in [0, 1) is injected so tests are exact)."""

    def __init__(
        self,
        *,
        initial: float,
        cap: float,
        factor: float = 2.0,
        jitter: float = 0.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if initial <= 0 or cap < initial or factor < 1:
            raise ValueError("need 0 < initial <= cap and factor >= 1")
        self._initial = initial
        self._cap = cap
        self._factor = factor
        self._jitter = jitter
        self._rand = rand
        self._current = initial

    def next(self) -> float:
        delay = self._current
        self._current = min(self._cap, self._current * self._factor)
        return delay + delay * self._jitter * self._rand() if self._jitter else delay

    def reset(self) -> None:
        self._current = self._initial


def jittered(period: float, factor: float, rand: float) -> float:
    """``wait.Jitter``: ``period`` plus up to ``factor * period`` (``rand`` in [0, 1))."""
    return period + period * factor * rand
