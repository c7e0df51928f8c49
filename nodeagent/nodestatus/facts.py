"""Gather the facts the status setters need, from the host and injected callables.

This is the effectful edge of node status: blocking file reads go through ``asyncio.to_thread``
and the DNS lookup of the node name through the loop's resolver with a deadline.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

from nodeagent.clock import Clock
from nodeagent.hostinfo import IPAddress, filesystem_capacity, read_host_info, read_host_network
from nodeagent.log import Logger, get_logger
from nodeagent.nodestatus.compute import NodeFacts
from nodeagent.nodestatus.setters import Pressure, RuntimeImage, RuntimeStatus
from nodeagent.nodestatus.settings import NodeSettings

LOOKUP_TIMEOUT = 2.0


class HostFacts:
    """An async callable returning fresh :class:`NodeFacts` for every status sync."""

    def __init__(
        self,
        *,
        settings: NodeSettings,
        clock: Clock,
        runtime_status: Callable[[], RuntimeStatus],
        pressure: Callable[[], Pressure] = Pressure,
        other_errors: Callable[[], tuple[str, ...]] = tuple,
        images: Callable[[], Sequence[RuntimeImage] | None] = lambda: None,
        volumes_in_use: Callable[[], Sequence[str]] = tuple,
        root: Path = Path("/"),
        log: Logger | None = None,
    ) -> None:
        self._s = settings
        self._clock = clock
        self._runtime_status = runtime_status
        self._pressure = pressure
        self._other_errors = other_errors
        self._images = images
        self._volumes_in_use = volumes_in_use
        self._root = root
        self._log = log or get_logger("nodestatus")
        self._rootfs_error_logged = False

    async def __call__(self) -> NodeFacts:
        host = await asyncio.to_thread(read_host_info, root=self._root, host_name=self._s.hostname)
        network = await asyncio.to_thread(read_host_network, root=self._root)
        return NodeFacts(
            now=self._clock.now(),
            host=host,
            network=network,
            rootfs_bytes=await self._rootfs(),
            runtime=self._runtime_status(),
            pressure=self._pressure(),
            resolved_hostname=await self._lookup() if not self._s.node_ips else (),
            other_errors=self._other_errors(),
            images=self._listed_images(),
            volumes_in_use=tuple(self._volumes_in_use()),
        )

    def _listed_images(self) -> tuple[RuntimeImage, ...] | None:
        listed = self._images()
        return None if listed is None else tuple(listed)

    async def _rootfs(self) -> int | None:
        try:
            return await asyncio.to_thread(filesystem_capacity, self._s.root_dir)
        except OSError as e:
            if not self._rootfs_error_logged:
                self._log.error(
                    "Cannot read the root dir's filesystem capacity",
                    path=str(self._s.root_dir),
                    error=str(e),
                )
                self._rootfs_error_logged = True
            return None

    async def _lookup(self) -> tuple[IPAddress, ...]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT):
                infos = await loop.getaddrinfo(self._s.hostname, None, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError):
            return ()
        out: list[IPAddress] = []
        for info in infos:
            try:
                out.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
            except ValueError:
                continue
        return tuple(dict.fromkeys(out))
