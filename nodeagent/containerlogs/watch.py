"""Wake a log follower when its log directory changes, without a thread.

:class:`DirWatch` puts an inotify descriptor (through ``ctypes``: the C library's
``inotify_init1``/``inotify_add_watch``) on the event loop with ``loop.add_reader``; a write to
any file in the directory, or a file created or renamed there (a rotation), sets an
``asyncio.Event``, after calling the optional ``on_change`` (synchronously, in the reader
callback: a follower writes a new line to its client from there, without waiting for its task
to be scheduled). Where inotify is not available it degrades to a short poll
(:data:`POLL_INTERVAL`), which the caller cannot tell apart except by latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable
from typing import Final

POLL_INTERVAL: Final = 0.25

_IN_MODIFY: Final = 0x00000002
_IN_MOVED_FROM: Final = 0x00000040
_IN_MOVED_TO: Final = 0x00000080
_IN_CREATE: Final = 0x00000100
_IN_NONBLOCK: Final = 0o4000
_IN_CLOEXEC: Final = 0o2000000


@functools.cache
def _lib() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


class DirWatch:
    """``async with DirWatch(directory) as w: await w.wait(timeout)``."""

    def __init__(self, directory: str, on_change: Callable[[], None] | None = None) -> None:
        self._directory = directory
        self._on_change = on_change
        self._fd = -1
        self._changed = asyncio.Event()
        self.inotify = False

    async def __aenter__(self) -> DirWatch:
        lib = _lib()
        if lib is None:
            return self
        fd = lib.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return self
        mask = _IN_MODIFY | _IN_CREATE | _IN_MOVED_FROM | _IN_MOVED_TO
        if lib.inotify_add_watch(fd, os.fsencode(self._directory), mask) < 0:
            os.close(fd)
            return self
        self._fd = fd
        self.inotify = True
        asyncio.get_running_loop().add_reader(fd, self._on_readable)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._fd >= 0:
            asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _on_readable(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self._fd, 65536):
                pass
        try:
            if self._on_change is not None:
                self._on_change()
        finally:
            self._changed.set()

    async def wait(self, seconds: float) -> None:
        """Until something changed in the directory, or ``seconds`` (at most
        :data:`POLL_INTERVAL` without inotify)."""
        if not self.inotify:
            seconds = min(seconds, POLL_INTERVAL)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._changed.wait()
        self._changed.clear()
