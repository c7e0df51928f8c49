"""cancel_and_wait: helpers end, their errors surface, the caller's own cancellation is kept."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from nodeagent.tasks import cancel_and_wait


async def _slow_to_stop(stopped: list[str]) -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.1)  # its clean-up takes a while
        stopped.append("helper")
        raise


async def _caller(end_helper: object, went_on: list[str], stopped: list[str]) -> None:
    helper = asyncio.ensure_future(_slow_to_stop(stopped))
    await asyncio.sleep(0)
    if end_helper == "suppress":  # the pattern cancel_and_wait replaces
        helper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await helper
    else:
        await cancel_and_wait(helper)
    went_on.append("caller")
    await asyncio.sleep(3600)  # as the proxy's loop waited for its next full sync


async def test_the_callers_cancellation_while_it_waits_for_a_helper_is_kept() -> None:
    went_on: list[str] = []
    stopped: list[str] = []
    caller = asyncio.ensure_future(_caller("helper", went_on, stopped))
    await asyncio.sleep(0.05)  # the caller now waits for the helper's clean-up

    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(caller, 5)

    assert went_on == []
    await asyncio.sleep(0.2)  # the helper, cancelled already, finishes its clean-up on its own
    assert stopped == ["helper"]


async def test_the_suppress_pattern_loses_it_the_control() -> None:
    went_on: list[str] = []
    stopped: list[str] = []
    caller = asyncio.ensure_future(_caller("suppress", went_on, stopped))
    await asyncio.sleep(0.05)

    caller.cancel()
    done, _ = await asyncio.wait({caller}, timeout=1)

    assert done == set() and went_on == ["caller"] and caller.cancelling() == 1
    caller.uncancel()
    await cancel_and_wait(caller)


async def test_a_helpers_own_error_surfaces_and_every_helper_is_ended() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("clean-up failed") from None

    stopped: list[str] = []
    failing = asyncio.ensure_future(fails_on_cancel())
    slow = asyncio.ensure_future(_slow_to_stop(stopped))
    await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="clean-up failed"):
        await cancel_and_wait(failing, slow)

    assert failing.done() and slow.cancelled() and stopped == ["helper"]


async def test_done_helpers_and_no_helpers_are_fine() -> None:
    done = asyncio.ensure_future(asyncio.sleep(0))
    await done
    await cancel_and_wait(done)
    await cancel_and_wait()
