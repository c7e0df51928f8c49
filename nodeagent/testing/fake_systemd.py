"""A fake of systemd's D-Bus manager for slices (the boundary :class:`SystemdBus` crosses).

``StartTransientUnit`` of a ``.slice`` creates its cgroup directory under a fake cgroup mount
(the parents too, as systemd instantiates parent slices) and records the properties;
a second start of a known unit fails with ``UnitExists``; ``SetUnitProperties`` merges;
``StopUnit`` removes the directory. Every call is kept in ``calls``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from nodeagent.systemd.dbus import NO_SUCH_UNIT, UNIT_EXISTS, DbusError


def slice_path(unit: str) -> str:
    """``a-b-c.slice`` -> ``a.slice/a-b.slice/a-b-c.slice`` (systemd's slice expansion)."""
    parts = unit.removesuffix(".slice").split("-")
    return "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


class FakeSystemdBus:
    def __init__(self, mount: Path) -> None:
        self.mount = mount
        self.units: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, list[Any]]] = []
        self.fail: dict[str, DbusError] = {}

    @staticmethod
    def _props(raw: list[list[Any]]) -> dict[str, Any]:
        return {name: variant.value for name, variant in raw}

    async def call(self, member: str, signature: str, body: list[Any], **_: Any) -> list[Any]:
        del signature
        self.calls.append((member, body))
        if member in self.fail:
            raise self.fail[member]
        if member == "StartTransientUnit":
            unit, _mode, props, _aux = body
            if unit in self.units:
                raise DbusError(UNIT_EXISTS, f"Unit {unit} was already loaded or has a fragment")
            self.units[unit] = self._props(props)
            (self.mount / slice_path(unit)).mkdir(parents=True, exist_ok=True)
            return ["/org/freedesktop/systemd1/job/1"]
        if member == "SetUnitProperties":
            unit, _runtime, props = body
            self.units.setdefault(unit, {}).update(self._props(props))
            return []
        if member == "StopUnit":
            unit, _mode = body
            if unit not in self.units:
                raise DbusError(NO_SUCH_UNIT, f"Unit {unit} not loaded.")
            del self.units[unit]
            shutil.rmtree(self.mount / slice_path(unit), ignore_errors=True)
            return ["/org/freedesktop/systemd1/job/2"]
        raise DbusError("org.freedesktop.DBus.Error.UnknownMethod", member)

    def close(self) -> None:
        pass
