"""The cgroup driver from the runtime, as the kubelet's ``getCgroupDriverFromCRI``
(``KubeletCgroupDriverFromCRI``, locked on since 1.34), and one step further.

The kubelet asks the runtime once, after ``Version``, with the ``RuntimeConfig`` RPC and uses
its answer instead of ``cgroupDriver`` from its configuration. Any error but ``Unimplemented``
is retried twice, 2 s apart (the runtime may still be starting); where the kubelet then refuses
to start, nodeagent keeps the configured driver and logs an error naming the runtime's answer.

A runtime that does not implement the RPC (containerd before 2.0, e.g. Debian 12's 1.6.20)
leaves the kubelet on its configured driver, which must then match the runtime's by hand.
nodeagent reads the runtime's own configuration instead, from a verbose CRI ``Status``
(containerd reports its CRI plugin config there): the default runtime's
``options.SystemdCgroup`` for runc. Only when that says nothing either (another runtime
type, no config) does ``kubelet.cgroupDriver`` stay, with the kubelet's log line.

:func:`driver_from_runtime_config` and :func:`driver_from_containerd_config` are the pure
decisions; :func:`resolve_cgroup_driver` makes the calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Literal

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriError, CriUnimplemented
from nodeagent.kuberuntime.podsettings import CgroupDriver
from nodeagent.kuberuntime.statusinfo import runtime_config_of
from nodeagent.log import Logger

ATTEMPTS: Final = 3
RETRY_DELAY: Final = 2.0
# The kubelet's log lines (cmd/kubelet/app/server.go).
FALLBACK_MESSAGE: Final = (
    "CRI implementation should be updated to support RuntimeConfig. "
    "Falling back to using cgroupDriver from kubelet config."
)
ADOPTED_MESSAGE: Final = "Using cgroup driver setting received from the CRI runtime"
FROM_CONFIG_MESSAGE: Final = (
    "CRI implementation should be updated to support RuntimeConfig. "
    "Using the cgroup driver of the runtime's own configuration."
)
MISMATCH_MESSAGE: Final = (
    "kubelet.cgroupDriver does not match the container runtime's cgroup driver; using the runtime's"
)
RUNC_V2: Final = "io.containerd.runc.v2"

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
class ConfiguredDriver:
    driver: CgroupDriver
    evidence: str  # the setting it was read from, e.g. "...options.SystemdCgroup=false"


def driver_from_containerd_config(status: cri.StatusResponse) -> ConfiguredDriver | None:
    """The driver of containerd's default runtime from a verbose ``Status``'s ``config``;
    None when the runtime is not runc (io.containerd.runc.v2) or reports no configuration."""
    containerd = runtime_config_of(status).get("containerd")
    if not isinstance(containerd, dict):
        return None
    name = containerd.get("defaultRuntimeName")
    runtimes = containerd.get("runtimes")
    runtime = runtimes.get(name) if isinstance(runtimes, dict) and isinstance(name, str) else None
    if not isinstance(runtime, dict) or runtime.get("runtimeType") != RUNC_V2:
        return None
    options = runtime.get("options")
    systemd = isinstance(options, dict) and options.get("SystemdCgroup") is True
    return ConfiguredDriver(
        driver="systemd" if systemd else "cgroupfs",
        evidence=f"containerd.runtimes.{name}.options.SystemdCgroup={str(systemd).lower()}",
    )


@dataclass(frozen=True, kw_only=True)
class ResolvedDriver:
    driver: CgroupDriver
    source: Literal["runtime", "runtime-config", "config"]


def _mismatch(log: Logger, configured: CgroupDriver, runtime: CgroupDriver) -> None:
    if runtime != configured:
        log.warning(MISMATCH_MESSAGE, configured=configured, runtime=runtime)


async def _from_status(
    status: Callable[[], Awaitable[cri.StatusResponse]] | None,
    *,
    configured: CgroupDriver,
    log: Logger,
) -> ResolvedDriver:
    """After ``Unimplemented``: the runtime's own configuration, else ``configured``."""
    found = None
    if status is not None:
        try:
            found = driver_from_containerd_config(await status())
        except CriError as e:
            log.v(2).info("Cannot read the runtime's configuration", error=e.status_text)
    if found is None:
        log.info(FALLBACK_MESSAGE, cgroup_driver=configured)
        return ResolvedDriver(driver=configured, source="config")
    log.info(FROM_CONFIG_MESSAGE, cgroup_driver=found.driver, setting=found.evidence)
    _mismatch(log, configured, found.driver)
    return ResolvedDriver(driver=found.driver, source="runtime-config")


async def resolve_cgroup_driver(
    runtime_config: Callable[[], Awaitable[cri.RuntimeConfigResponse]],
    *,
    configured: CgroupDriver,
    log: Logger,
    status: Callable[[], Awaitable[cri.StatusResponse]] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ResolvedDriver:
    """Ask the runtime; ``status`` (a verbose CRI ``Status``) is read when the runtime does not
    implement ``RuntimeConfig``; the configured driver when neither can say."""
    log.v(4).info("Getting CRI runtime configuration information")
    error: CriError | None = None
    for attempt in range(ATTEMPTS):
        try:
            response = await runtime_config()
        except CriUnimplemented:
            return await _from_status(status, configured=configured, log=log)
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
        log.info(ADOPTED_MESSAGE, cgroup_driver=driver)
        _mismatch(log, configured, driver)
        return ResolvedDriver(driver=driver, source="runtime")
    assert error is not None
    log.error(
        "Cannot get the cgroup driver from the container runtime; using kubelet.cgroupDriver",
        error=error.status_text,
        attempts=ATTEMPTS,
        cgroup_driver=configured,
    )
    return ResolvedDriver(driver=configured, source="config")
