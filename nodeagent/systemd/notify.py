"""sd_notify over the NOTIFY_SOCKET datagram socket (placeholder API). No-op off systemd."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping
from typing import NoReturn


class Notifier:
    def __init__(self, socket_path: str | None) -> None:
        self.socket_path = socket_path

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Notifier:
        return cls(environ.get("NOTIFY_SOCKET") or None)

    @property
    def enabled(self) -> bool:
        return self.socket_path is not None

    def send(self, *assignments: str) -> bool:
        if self.socket_path is None:
            return False
        addr = self.socket_path
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto("\n".join(assignments).encode(), addr)
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> bool:
        return self.send("STOPPING=1", *([f"STATUS={status}"] if status else []))


def watchdog_interval(environ: Mapping[str, str] = os.environ, pid: int | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None when not requested."""
    usec = environ.get("WATCHDOG_USEC")
    if not usec:
        return None
    wpid = environ.get("WATCHDOG_PID")
    if wpid and int(wpid) != (pid if pid is not None else os.getpid()):
        return None
    return int(usec) / 1_000_000 / 2


async def watchdog_loop(notifier: Notifier, interval: float) -> NoReturn:
    while True:
        notifier.watchdog()
        await asyncio.sleep(interval)
