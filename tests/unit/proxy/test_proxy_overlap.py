"""alongside(): synchronous work done while subprocess-like tasks run, and cleanup on failure."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.proxy.overlap import alongside


async def test_the_tasks_start_before_the_work_and_their_results_come_back_in_order() -> None:
    events: list[str] = []

    async def job(name: str) -> str:
        events.append(f"{name} started")  # where a real job spawns its process
        await asyncio.sleep(0)
        events.append(f"{name} done")
        return name.upper()

    def work() -> int:
        events.append("work")
        return 7

    done, results = await alongside(work, job("a"), job("b"))

    assert (done, results) == (7, ["A", "B"])
    assert events[:3] == ["a started", "b started", "work"]


async def test_failing_work_cancels_the_jobs_still_running() -> None:
    cancelled = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    def broken() -> None:
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        await alongside(broken, slow())
    assert cancelled.is_set()


async def test_a_failing_job_is_raised_after_the_work_and_the_others_are_cancelled() -> None:
    cancelled = asyncio.Event()

    async def refused() -> None:
        raise RuntimeError("nft refused")

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    with pytest.raises(RuntimeError, match="nft refused"):
        await alongside(lambda: None, refused(), slow())
    assert cancelled.is_set()
