"""A small client for systemd's D-Bus API on the system bus (dbus-fast, asyncio).

One connection, opened on first use and reopened after it dropped; :meth:`SystemdBus.call`
sends one method call and returns the reply body or raises :class:`DbusError` with the error
name and text systemd sent (e.g. ``org.freedesktop.systemd1.UnitExists``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, Protocol

from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from nodeagent.errors import AgentError

SYSTEMD: Final = "org.freedesktop.systemd1"
SYSTEMD_PATH: Final = "/org/freedesktop/systemd1"
MANAGER: Final = "org.freedesktop.systemd1.Manager"
UNIT_EXISTS: Final = "org.freedesktop.systemd1.UnitExists"
NO_SUCH_UNIT: Final = "org.freedesktop.systemd1.NoSuchUnit"

__all__ = ["DbusError", "SystemdBus", "Variant"]


class DbusError(AgentError):
    def __init__(self, name: str, text: str) -> None:
        super().__init__(f"{name}: {text}" if text else name)
        self.name = name
        self.text = text


class UnitBus(Protocol):
    """What the container manager needs of systemd's manager object: one method call at a
    time (:class:`SystemdBus` on the system bus; ``nodeagent.testing.fake_systemd`` in tests)."""

    async def call(
        self,
        member: str,
        signature: str,
        body: list[Any],
        *,
        path: str = ...,
        interface: str = ...,
    ) -> list[Any]: ...

    def close(self) -> None: ...


class SystemdBus:
    def __init__(self, *, address: str | None = None) -> None:
        self._address = address
        self._bus: MessageBus | None = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> MessageBus:
        async with self._lock:
            if self._bus is None or not self._bus.connected:
                bus = MessageBus(bus_address=self._address, bus_type=BusType.SYSTEM)
                try:
                    self._bus = await bus.connect()
                except (OSError, EOFError) as e:
                    raise DbusError("connect", str(e)) from e
            return self._bus

    async def call(
        self,
        member: str,
        signature: str,
        body: list[Any],
        *,
        path: str = SYSTEMD_PATH,
        interface: str = MANAGER,
    ) -> list[Any]:
        bus = await self._connect()
        message = Message(
            destination=SYSTEMD,
            path=path,
            interface=interface,
            member=member,
            signature=signature,
            body=body,
        )
        reply = await bus.call(message)
        if reply is None:
            raise DbusError("noreply", f"no reply to {member}")
        if reply.message_type == MessageType.ERROR:
            text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
            raise DbusError(reply.error_name or "error", text)
        return list(reply.body)

    def close(self) -> None:
        if self._bus is not None:
            self._bus.disconnect()
            self._bus = None
