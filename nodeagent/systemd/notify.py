"""sd_notify(3) over ``$NOTIFY_SOCKET``, and the watchdog loop. No-ops when not under systemd.

The protocol is one datagram of newline-separated ``KEY=value`` assignments to the
``AF_UNIX``/``SOCK_DGRAM`` socket named by ``NOTIFY_SOCKET``: a filesystem path, or ``@name``
for the abstract namespace. We send ``READY=1`` (with ``STATUS=``) once started, ``STATUS=``
with a one-line state, ``WATCHDOG=1`` pings and ``STOPPING=1`` on shutdown.

A notification that cannot be delivered (socket gone, unsupported address) never crashes the
daemon: :meth:`Notifier.send` logs one warning for the first failure and returns False.

Watchdog: systemd sets ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``, which must be our pid) when the
unit has ``WatchdogSec=``. We ping at half that period from a coroutine that sleeps on the event
loop, so a stuck loop stops the pings and systemd kills and restarts the daemon.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping
from typing import NoReturn

from nodeagent.log import Logger, get_logger


def socket_address(value: str) -> str | bytes:
    """The address to send to: ``@name`` -> abstract ``\\0name``; paths must be absolute."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if not value.startswith("/"):
        raise ValueError("NOTIFY_SOCKET must be an absolute path or start with @")
    return value


def one_line(text: str) -> str:
    """A value that cannot smuggle another assignment into the datagram."""
    return " ".join(text.splitlines())


class Notifier:
    def __init__(self, *, socket_path: str | None = None, log: Logger | None = None) -> None:
        self.socket_path = socket_path or None
        self._log = log or get_logger("systemd")
        self._warned = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Notifier:
        return cls(socket_path=environ.get("NOTIFY_SOCKET"))

    @property
    def enabled(self) -> bool:
        return self.socket_path is not None

    def send(self, *assignments: str) -> bool:
        """Send one datagram; True if it was handed to the socket."""
        if self.socket_path is None:
            return False
        try:
            address = socket_address(self.socket_path)
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto("\n".join(assignments).encode(), address)
        except (OSError, ValueError) as exc:
            self._warn_once(exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send("READY=1", *self._status(status))

    def status(self, text: str) -> bool:
        return self.send(*self._status(text))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> bool:
        return self.send("STOPPING=1", *self._status(status))

    @staticmethod
    def _status(text: str | None) -> list[str]:
        return [] if text is None else [f"STATUS={one_line(text)}"]

    def _warn_once(self, exc: Exception) -> None:
        if self._warned:
            return
        self._warned = True
        error = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        self._log.warning(
            "Cannot notify systemd; further notify errors are not logged",
            notify_socket=self.socket_path,
            error=error,
        )


def _positive_int(value: str | None) -> int | None:
    try:
        number = int(value or "")
    except ValueError:
        return None
    return number if number > 0 else None


def watchdog_interval(
    environ: Mapping[str, str] = os.environ, pid: int | None = None
) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of ``WATCHDOG_USEC``), or None when systemd
    did not ask for them, the value is invalid, or ``WATCHDOG_PID`` names another process."""
    usec = _positive_int(environ.get("WATCHDOG_USEC"))
    if usec is None:
        return None
    if "WATCHDOG_PID" in environ:
        own = os.getpid() if pid is None else pid
        if _positive_int(environ["WATCHDOG_PID"]) != own:
            return None
    return usec / 2_000_000


async def watchdog_loop(notifier: Notifier, interval: float) -> NoReturn:
    """Ping now and then every ``interval`` seconds of loop time, until cancelled.

    Pings follow a fixed schedule (no drift); after a stall longer than an interval the
    missed pings are not sent in a burst: the schedule restarts from the late ping.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time()
    while True:
        notifier.watchdog()
        now = loop.time()
        deadline += interval
        if deadline <= now:
            deadline = now + interval
        await asyncio.sleep(deadline - now)
