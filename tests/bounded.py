"""Deterministic work and memory bounds for unit tests, instead of wall-clock budgets.

Speed is measured by the benchmarks under ``bench/``; a unit test asserts that the work stays
bounded, counted so that the answer does not depend on how loaded the machine is:

- :func:`call_budget` counts the Python function calls made inside the block (``sys.setprofile``)
  and stops the block with :class:`WorkExceeded` at the first call past the budget, so a removed
  guard fails the test instead of hanging it;
- :func:`memory_peak` measures the block's peak traced allocation (``tracemalloc``).
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any


class WorkExceeded(AssertionError):
    """More Python calls than the budget: the guarded work is not bounded."""


@dataclass
class Work:
    limit: int
    calls: int = 0

    @property
    def exceeded(self) -> bool:
        return self.calls > self.limit


@contextmanager
def call_budget(limit: int) -> Iterator[Work]:
    """Count Python calls in the block; past ``limit`` raise :class:`WorkExceeded` from the call
    (and fail on exit even if the code under test swallowed it)."""
    work = Work(limit)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            work.calls += 1
            if work.calls > limit:
                sys.setprofile(None)
                raise WorkExceeded(f"more than {limit} Python calls")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield work
    finally:
        sys.setprofile(previous)
        if work.exceeded:  # even when the code under test caught it and raised something else
            raise WorkExceeded(f"more than {limit} Python calls")


@dataclass
class Memory:
    peak: int = 0


@contextmanager
def memory_peak() -> Iterator[Memory]:
    """The peak bytes allocated (traced by ``tracemalloc``) while the block ran."""
    memory = Memory()
    tracemalloc.start()
    try:
        yield memory
        memory.peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
