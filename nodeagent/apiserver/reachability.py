"""Whether the apiserver answers: a failed call marks it away, the next answer wakes waiters.

A watch cache that lost the apiserver sleeps out its back-off (0.8 s doubling to 30 s, as
client-go's reflector) before it tries again, so after an outage of a minute or two the node saw
changes up to 30 s after the apiserver was back (a 68 s apiserver stop in the soak: every watch
came back 15 s after the apiserver did). Calls that retry sooner (the Lease's, every 7 s at most;
pod and node status) see the apiserver first: their answer ends the caches' sleep, and the pod
status manager's (its retries back off to 10 s): :func:`sleep_or_answer`.

"Away" is a call that ended in an error worth retrying unchanged (:func:`.errors.retryable`: a
transport failure, a timeout, a 5xx, a 429); any other outcome is an answer (a 404 is one).
:meth:`Reachability.answered_again` waits for the next away -> answered change only: a cache
whose call failed while others still got answers sleeps out its back-off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from nodeagent.apiserver.errors import ApiError, retryable
from nodeagent.tasks import cancel_and_wait


class Reachability:
    def __init__(self) -> None:
        self._away = False
        self._back: asyncio.Event | None = None

    def saw(self, error: ApiError | None) -> None:
        """Note a call's outcome: ``error`` it ended with, or None when it succeeded."""
        if error is not None and retryable(error):
            self._away = True
            return
        if not self._away:
            return
        self._away = False
        back, self._back = self._back, None
        if back is not None:
            back.set()

    async def answered_again(self) -> None:
        """Return once the apiserver answers after being away (the next such change)."""
        if self._back is None:
            self._back = asyncio.Event()
        await self._back.wait()


async def sleep_or_answer(delay: float, answered_again: Callable[[], Awaitable[None]]) -> bool:
    """Sleep ``delay`` seconds, or until ``answered_again()`` returns (the apiserver answers
    after an outage), whichever is first; True when the answer came."""
    back = asyncio.ensure_future(answered_again())
    try:
        done, _ = await asyncio.wait({back}, timeout=delay)
    finally:
        await cancel_and_wait(back)
    return bool(done)
