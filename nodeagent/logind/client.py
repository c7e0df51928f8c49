"""logind over the system bus: the calls the kubelet's ``systemd/inhibit_linux.go`` makes.

- ``InhibitDelayMaxUSec``: ``org.freedesktop.DBus.Properties.Get`` on logind's manager;
- ``Inhibit(what, who, why, mode)``: returns a file descriptor; the lock lasts while it is open;
- ``org.freedesktop.systemd1.Manager.KillUnit("systemd-logind.service", "all", SIGHUP)``: logind
  re-reads its configuration (the drop-in);
- ``PrepareForShutdown(b)``: a signal match on logind's manager interface.

One connection per :meth:`DbusLogind.connect`; when the bus goes away :meth:`next_event`
raises :class:`BusGone` and the caller reconnects (the kubelet waits 1 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Final, Protocol

from dbus_fast import BusType, Message, MessageType
from dbus_fast.aio import MessageBus
from dbus_fast.errors import DBusError

from nodeagent.errors import AgentError

LOGIND: Final = "org.freedesktop.login1"
LOGIND_PATH: Final = "/org/freedesktop/login1"
LOGIND_MANAGER: Final = "org.freedesktop.login1.Manager"
SYSTEMD: Final = "org.freedesktop.systemd1"
SYSTEMD_PATH: Final = "/org/freedesktop/systemd1"
SYSTEMD_MANAGER: Final = "org.freedesktop.systemd1.Manager"
PROPERTIES: Final = "org.freedesktop.DBus.Properties"
LOGIND_UNIT: Final = "systemd-logind.service"
SHUTDOWN_MATCH: Final = (
    f"type='signal',interface='{LOGIND_MANAGER}',member='PrepareForShutdown',path='{LOGIND_PATH}'"
)


class LogindError(AgentError):
    """A D-Bus call failed (no system bus, logind not running, access denied, ...)."""


class BusGone(LogindError):
    """The connection to the system bus is lost."""


class Logind(Protocol):
    async def connect(self) -> None: ...

    async def inhibit_delay_max(self) -> float:
        """logind's ``InhibitDelayMaxUSec``, in seconds."""
        ...

    async def reload_logind(self) -> None:
        """SIGHUP to ``systemd-logind.service`` through systemd's ``KillUnit``."""
        ...

    async def inhibit(self, *, what: str, who: str, why: str, mode: str) -> int:
        """Take an inhibitor lock; return its file descriptor (close it to release)."""
        ...

    async def next_event(self) -> bool:
        """The next ``PrepareForShutdown`` value; :class:`BusGone` when the bus is lost."""
        ...

    def close(self) -> None: ...


class DbusLogind:
    def __init__(self, *, bus_address: str | None = None) -> None:
        self._address = bus_address
        self._bus: MessageBus | None = None
        self._events: asyncio.Queue[bool | None] = asyncio.Queue()
        self._watch: asyncio.Future[None] | None = None

    async def connect(self) -> None:
        self.close()
        self._events = asyncio.Queue()
        try:
            bus = MessageBus(
                bus_address=self._address, bus_type=BusType.SYSTEM, negotiate_unix_fd=True
            )
            self._bus = await bus.connect()
        except (OSError, DBusError, EOFError, ValueError) as e:
            self._bus = None
            raise LogindError(f"cannot connect to the system bus: {e}") from e
        self._bus.add_message_handler(self._on_message)
        await self._call(
            destination="org.freedesktop.DBus",
            path="/org/freedesktop/DBus",
            interface="org.freedesktop.DBus",
            member="AddMatch",
            signature="s",
            body=[SHUTDOWN_MATCH],
        )
        queue = self._events
        gone = self._bus.wait_for_disconnect()  # type: ignore[no-untyped-call]

        async def watch() -> None:
            with contextlib.suppress(Exception):
                await gone
            queue.put_nowait(None)

        self._watch = asyncio.ensure_future(watch())

    def _on_message(self, msg: Message) -> None:
        if (
            msg.message_type is MessageType.SIGNAL
            and msg.interface == LOGIND_MANAGER
            and msg.member == "PrepareForShutdown"
            and msg.body
        ):
            self._events.put_nowait(bool(msg.body[0]))

    async def _call(
        self,
        *,
        destination: str,
        path: str,
        interface: str,
        member: str,
        signature: str,
        body: list[object],
    ) -> Message:
        if self._bus is None or not self._bus.connected:
            raise BusGone("not connected to the system bus")
        msg = Message(
            destination=destination,
            path=path,
            interface=interface,
            member=member,
            signature=signature,
            body=body,
        )
        try:
            reply = await self._bus.call(msg)
        except DBusError as e:
            raise LogindError(f"{interface}.{member}: {e.type}: {e.text}") from e
        except (OSError, EOFError) as e:
            raise BusGone(f"{interface}.{member}: {e}") from e
        if reply is None:
            raise BusGone(f"{interface}.{member}: no reply")
        return reply

    async def inhibit_delay_max(self) -> float:
        reply = await self._call(
            destination=LOGIND,
            path=LOGIND_PATH,
            interface=PROPERTIES,
            member="Get",
            signature="ss",
            body=[LOGIND_MANAGER, "InhibitDelayMaxUSec"],
        )
        variant = reply.body[0]
        return int(variant.value) / 1_000_000

    async def reload_logind(self) -> None:
        await self._call(
            destination=SYSTEMD,
            path=SYSTEMD_PATH,
            interface=SYSTEMD_MANAGER,
            member="KillUnit",
            signature="ssi",
            body=[LOGIND_UNIT, "all", int(signal.SIGHUP)],
        )

    async def inhibit(self, *, what: str, who: str, why: str, mode: str) -> int:
        reply = await self._call(
            destination=LOGIND,
            path=LOGIND_PATH,
            interface=LOGIND_MANAGER,
            member="Inhibit",
            signature="ssss",
            body=[what, who, why, mode],
        )
        fds = list(reply.unix_fds)
        try:
            index = int(reply.body[0])
            fd = fds.pop(index)
        except (IndexError, ValueError, TypeError) as e:
            raise LogindError(f"Inhibit returned no file descriptor: {reply.body!r}") from e
        finally:
            for other in fds:
                with contextlib.suppress(OSError):
                    os.close(other)
        return fd

    async def next_event(self) -> bool:
        value = await self._events.get()
        if value is None:
            raise BusGone("the system bus connection was closed")
        return value

    def close(self) -> None:
        bus, self._bus = self._bus, None
        if bus is not None:
            with contextlib.suppress(Exception):
                bus.disconnect()
