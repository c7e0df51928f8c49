"""Ending helper tasks without losing the caller's own cancellation.

``task.cancel()`` then ``with contextlib.suppress(CancelledError): await task`` loses the
caller's cancellation when it arrives while the caller waits there: the CancelledError the
caller gets is swallowed as if it were the helper's, and the caller runs on, marked
"cancelling" for ever. The proxy's run loop did so when the agent was stopped in that moment
and then slept until its next full sync, an hour away (an integration test's ``stop()`` hung
300 s). :func:`cancel_and_wait` waits for the helpers without taking the caller's cancellation.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and return once all are done; raise the first exception one of them
    ended with other than its cancellation. If the caller is cancelled meanwhile, it gets
    its CancelledError at once; the tasks, cancelled already, finish their clean-up on their
    own (not cancelled a second time)."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error
