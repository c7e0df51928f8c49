"""The cgroup driver from the runtime, as the kubelet's ``getCgroupDriverFromCRI``
(``KubeletCgroupDriverFromCRI``, locked on since 1.34).

The kubelet asks the runtime once, after ``Version``, with the ``RuntimeConfig`` RPC and uses
its answer instead of ``cgroupDriver`` from its configuration. A runtime that does not implement
the RPC (containerd before 2.0, e.g. Debian 12's 1.6.20) answers ``Unimplemented``: the
configured driver stays. Any other error is retried twice, 2 s apart (the runtime may still be
starting). Where the kubelet then refuses to start, nodeagent keeps the configured driver and
logs an error naming the runtime's answer, so a node whose runtime misbehaves still runs.

:func:`driver_from_runtime_config` is the pure decision; :func:`resolve_cgroup_driver` the call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Literal

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriError, CriUnimplemented
from nodeagent.kuberuntime.podsettings import CgroupDriver
from nodeagent.log import Logger

ATTEMPTS: Final = 3
RETRY_DELAY: Final = 2.0
# The kubelet's log lines (cmd/kubelet/app/server.go).
FALLBACK_MESSAGE: Final = (
    "CRI implementation should be updated to support RuntimeConfig. "
    "Falling back to using cgroupDriver from kubelet config."
)
ADOPTED_MESSAGE: Final = "Using cgroup driver setting received from the CRI runtime"

_BY_VALUE: Final[dict[int, CgroupDriver]] = {0: "systemd", 1: "cgroupfs"}  # CRI CgroupDriver


class UnknownCgroupDriver(ValueError):
    def __init__(self, value: int) -> None:
        super().__init__(f"runtime returned an unknown cgroup driver {value}")
        self.value = value


def driver_from_runtime_config(response: cri.RuntimeConfigResponse) -> CgroupDriver | None:
    """The runtime's driver, or None when it sent no ``linux`` section (the kubelet then keeps
    its configuration: the enum's zero value, systemd, would otherwise be read from nothing)."""
    if not response.HasField("linux"):
        return None
    value = int(response.linux.cgroup_driver)
    if value not in _BY_VALUE:
        raise UnknownCgroupDriver(value)
    return _BY_VALUE[value]


@dataclass(frozen=True, kw_only=True)
class ResolvedDriver:
    driver: CgroupDriver
    source: Literal["runtime", "config"]


async def resolve_cgroup_driver(
    runtime_config: Callable[[], Awaitable[cri.RuntimeConfigResponse]],
    *,
    configured: CgroupDriver,
    log: Logger,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ResolvedDriver:
    """Ask the runtime; the configured driver when it cannot say."""
    log.v(4).info("Getting CRI runtime configuration information")
    error: CriError | None = None
    for attempt in range(ATTEMPTS):
        try:
            response = await runtime_config()
        except CriUnimplemented:
            log.info(FALLBACK_MESSAGE, cgroup_driver=configured)
            return ResolvedDriver(driver=configured, source="config")
        except CriError as e:
            error = e
            if attempt + 1 < ATTEMPTS:
                await sleep(RETRY_DELAY)
            continue
        try:
            driver = driver_from_runtime_config(response)
        except UnknownCgroupDriver as e:
            log.error(
                "The container runtime's cgroup driver is not one nodeagent knows; "
                "using kubelet.cgroupDriver",
                error=str(e),
                cgroup_driver=configured,
            )
            return ResolvedDriver(driver=configured, source="config")
        if driver is None:
            return ResolvedDriver(driver=configured, source="config")
        if driver != configured:
            log.v(2).info(
                "The runtime's cgroup driver overrides kubelet.cgroupDriver",
                configured=configured,
                runtime=driver,
            )
        log.info(ADOPTED_MESSAGE, cgroup_driver=driver)
        return ResolvedDriver(driver=driver, source="runtime")
    assert error is not None
    log.error(
        "Cannot get the cgroup driver from the container runtime; using kubelet.cgroupDriver",
        error=error.status_text,
        attempts=ATTEMPTS,
        cgroup_driver=configured,
    )
    return ResolvedDriver(driver=configured, source="config")
