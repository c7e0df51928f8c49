"""The two cgroup drivers: cgroupfs (directories) and systemd (``.slice`` units over D-Bus).

Both end with the same cgroup files written, as libcontainer's systemd manager does: it sets
the unit's properties through systemd, then writes the files itself (systemd rounds a CPU
quota to 10 ms per second; the file gets the exact value).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final, Protocol

from nodeagent.cm.cgroupfs import CgroupFs
from nodeagent.cm.policy import ReservedLimits, ResourceConfig
from nodeagent.kuberuntime.podsettings import CgroupDriver
from nodeagent.kuberuntime.sandbox import POD_CGROUP_PREFIX, cgroup_path
from nodeagent.systemd.dbus import NO_SUCH_UNIT, UNIT_EXISTS, DbusError, UnitBus, Variant

UINT64_MAX: Final = 2**64 - 1
SLICE_APPEAR_TIMEOUT: Final = 5.0
POLL: Final = 0.02


async def _poll(done: Callable[[], bool]) -> bool:
    """Whether ``done()`` held within ``SLICE_APPEAR_TIMEOUT`` (systemd's jobs run async;
    the cgroup directory is the outcome to wait for, there is nothing to subscribe to here)."""
    for _ in range(int(SLICE_APPEAR_TIMEOUT / POLL)):
        if done():
            return True
        await asyncio.sleep(POLL)
    return done()


class CgroupDriverOps(Protocol):
    @property
    def name(self) -> CgroupDriver: ...

    def path(self, parts: list[str]) -> str: ...

    async def ensure(self, parts: list[str], config: ResourceConfig | None) -> None:
        """Create the cgroup (and its parents) and apply ``config`` (None: only create)."""
        ...

    async def remove(self, parts: list[str]) -> bool: ...

    async def update_existing(self, path: str, limits: ReservedLimits) -> None:
        """Apply ``limits`` to a cgroup something else made (``systemReservedCgroup``)."""
        ...

    def pod_uid(self, child: str) -> str | None:
        """The pod UID of a pod cgroup's directory name, None for anything else."""
        ...


class CgroupfsDriver:
    def __init__(self, fs: CgroupFs) -> None:
        self.fs = fs

    @property
    def name(self) -> CgroupDriver:
        return "cgroupfs"

    def path(self, parts: list[str]) -> str:
        return cgroup_path(parts, "cgroupfs")

    def _ensure(self, path: str, config: ResourceConfig | None) -> None:
        self.fs.create(path)
        if config is not None:
            self.fs.write(path, config.files())

    async def ensure(self, parts: list[str], config: ResourceConfig | None) -> None:
        await asyncio.to_thread(self._ensure, self.path(parts), config)

    async def remove(self, parts: list[str]) -> bool:
        return await asyncio.to_thread(self.fs.remove, self.path(parts))

    async def update_existing(self, path: str, limits: ReservedLimits) -> None:
        await asyncio.to_thread(self.fs.write, path, limits.files())

    def pod_uid(self, child: str) -> str | None:
        if child.startswith(POD_CGROUP_PREFIX) and len(child) > len(POD_CGROUP_PREFIX):
            return child.removeprefix(POD_CGROUP_PREFIX)
        return None


def unit_properties(config: ResourceConfig | None) -> list[list[Any]]:
    """The slice's resource properties, as libcontainer's ``genV2ResourcesProperties``."""
    props: list[list[Any]] = [
        ["CPUAccounting", Variant("b", True)],
        ["MemoryAccounting", Variant("b", True)],
        ["TasksAccounting", Variant("b", True)],
    ]
    if config is None:
        return props
    if (weight := config.cpu_weight) is not None:
        props.append(["CPUWeight", Variant("t", weight)])
    if config.cpu_period is not None:
        per_sec = UINT64_MAX
        if config.cpu_quota is not None:
            per_sec = config.cpu_quota * 1_000_000 // config.cpu_period
            if per_sec % 10_000:
                per_sec = (per_sec // 10_000 + 1) * 10_000
        props.append(["CPUQuotaPerSecUSec", Variant("t", per_sec)])
        props.append(["CPUQuotaPeriodUSec", Variant("t", config.cpu_period)])
    memory = UINT64_MAX if config.memory_max is None else config.memory_max
    props.append(["MemoryMax", Variant("t", memory)])
    if config.pids_max is not None:
        props.append(["TasksMax", Variant("t", config.pids_max)])
    return props


def reserved_properties(limits: ReservedLimits) -> list[list[Any]]:
    """The unit properties for a reserved slice: only what is reserved."""
    props: list[list[Any]] = []
    if (weight := limits.cpu_weight) is not None:
        props.append(["CPUWeight", Variant("t", weight)])
    if limits.memory_max is not None:
        props.append(["MemoryMax", Variant("t", limits.memory_max)])
    if limits.pids_max is not None:
        props.append(["TasksMax", Variant("t", limits.pids_max)])
    return props


class SystemdDriver:
    def __init__(self, fs: CgroupFs, bus: UnitBus) -> None:
        self.fs = fs
        self.bus = bus

    @property
    def name(self) -> CgroupDriver:
        return "systemd"

    def path(self, parts: list[str]) -> str:
        return cgroup_path(parts, "systemd")

    def _unit(self, parts: list[str]) -> str:
        return self.path(parts).rsplit("/", 1)[-1]

    async def ensure(self, parts: list[str], config: ResourceConfig | None) -> None:
        if not parts:
            return
        path = self.path(parts)
        unit = self._unit(parts)
        props = unit_properties(config)
        start = [
            ["Description", Variant("s", f"libcontainer container {unit}")],
            ["DefaultDependencies", Variant("b", False)],
            *props,
        ]
        if len(parts) > 1:
            start.append(["Wants", Variant("as", [self._unit(parts[:-1])])])
        try:
            await self.bus.call(
                "StartTransientUnit", "ssa(sv)a(sa(sv))", [unit, "replace", start, []]
            )
        except DbusError as e:
            if e.name != UNIT_EXISTS:
                raise
            await self.bus.call("SetUnitProperties", "sba(sv)", [unit, True, props])
        await self._appear(path)
        if config is not None:
            await asyncio.to_thread(self.fs.write, path, config.files())

    async def update_existing(self, path: str, limits: ReservedLimits) -> None:
        """Set the slice's properties (runtime) so systemd keeps them, then write the files,
        as libcontainer's systemd manager does. A cgroup that is not a slice gets the files."""
        unit = path.rstrip("/").rsplit("/", 1)[-1]
        props = reserved_properties(limits)
        if unit.endswith(".slice") and props:
            await self.bus.call("SetUnitProperties", "sba(sv)", [unit, True, props])
        await asyncio.to_thread(self.fs.write, path, limits.files())

    async def _appear(self, path: str) -> None:
        if not await _poll(lambda: self.fs.exists(path)):
            raise TimeoutError(f"systemd did not create {path} within {SLICE_APPEAR_TIMEOUT}s")

    async def remove(self, parts: list[str]) -> bool:
        path = self.path(parts)
        try:
            await self.bus.call("StopUnit", "ss", [self._unit(parts), "replace"])
        except DbusError as e:
            if e.name != NO_SUCH_UNIT:
                raise
        if not await _poll(lambda: not self.fs.exists(path)):
            return await asyncio.to_thread(self.fs.remove, path)
        return True

    def pod_uid(self, child: str) -> str | None:
        if not child.endswith(".slice"):
            return None
        last = child.removesuffix(".slice").rsplit("-", 1)[-1]
        if last.startswith(POD_CGROUP_PREFIX) and len(last) > len(POD_CGROUP_PREFIX):
            return last.removeprefix(POD_CGROUP_PREFIX).replace("_", "-")
        return None
