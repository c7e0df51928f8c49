"""A fake logind for the node shutdown manager: records the calls, hands out real file
descriptors for locks (the ends of pipes, so a test can see a lock released: the fd is closed),
and lets a test send ``PrepareForShutdown`` or drop the bus."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field

from nodeagent.logind import BusGone, LogindError


@dataclass
class FakeLogind:
    inhibit_delay_max_s: float = 5.0
    # what InhibitDelayMaxUSec becomes after a reload (None: unchanged)
    after_reload_s: float | None = None
    connect_error: str | None = None
    calls: list[str] = field(default_factory=list)
    locks: list[int] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    _events: asyncio.Queue[bool | None] = field(default_factory=asyncio.Queue)
    _read_ends: dict[int, int] = field(default_factory=dict)

    async def connect(self) -> None:
        self.calls.append("connect")
        if self.connect_error is not None:
            raise LogindError(self.connect_error)
        self._events = asyncio.Queue()
        self.connected.set()

    async def inhibit_delay_max(self) -> float:
        self.calls.append("get InhibitDelayMaxUSec")
        return self.inhibit_delay_max_s

    async def reload_logind(self) -> None:
        self.calls.append("KillUnit systemd-logind.service SIGHUP")
        if self.after_reload_s is not None:
            self.inhibit_delay_max_s = self.after_reload_s

    async def inhibit(self, *, what: str, who: str, why: str, mode: str) -> int:
        self.calls.append(f"Inhibit {what} {who!r} {why!r} {mode}")
        r, w = os.pipe()
        self._read_ends[w] = r
        self.locks.append(w)
        return w

    def lock_held(self, fd: int) -> bool:
        """Whether the lock ``fd`` is still open (its pipe has a writer)."""
        r = self._read_ends[fd]
        os.set_blocking(r, False)
        try:
            return os.read(r, 1) != b""
        except BlockingIOError:
            return True

    def held_locks(self) -> list[int]:
        return [fd for fd in self.locks if self.lock_held(fd)]

    def prepare_for_shutdown(self, value: bool) -> None:
        self._events.put_nowait(value)

    def drop_bus(self) -> None:
        self.connected.clear()
        self._events.put_nowait(None)

    async def next_event(self) -> bool:
        value = await self._events.get()
        if value is None:
            raise BusGone("bus dropped")
        return value

    def close(self) -> None:
        self.calls.append("close")

    def cleanup(self) -> None:
        """Close what the manager left open, then the read ends."""
        for fd in self.held_locks():
            os.close(fd)
        for r in self._read_ends.values():
            os.close(r)
