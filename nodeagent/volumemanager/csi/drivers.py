"""The CSI drivers registered on this node, and the plugin manager's handler for them (the
kubelet's ``csi.RegistrationHandler``).

``validate_plugin``: a driver must speak a CSI ``1.x`` version (``none of the versions
specified ["0.3.0"] are supported``); a driver already registered with a higher version is
refused. ``register_plugin``: the driver is known by its endpoint at once, then asked
``NodeGetInfo`` (and ``NodeGetCapabilities``, kept while it stays registered) and put on
the Node and the CSINode (``nodeinfo.py``); if that fails it is
forgotten again (``failed to add CSI driver to node``). ``deregister_plugin``: forgotten and
taken off the CSINode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from nodeagent.csi import CsiError, CsiNode, CsiNodeClient, NodeCapabilities
from nodeagent.log import Logger, get_logger

CSI_PLUGIN_TYPE: Final = "CSIPlugin"
NOT_REGISTERED: Final = "driver name {name} not found in the list of registered CSI drivers"


class NodeInfoUpdater(Protocol):
    async def install_driver(
        self, name: str, node_id: str, max_volumes: int, topology: dict[str, str]
    ) -> None: ...

    async def uninstall_driver(self, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Driver:
    name: str
    endpoint: str
    version: tuple[int, int, int]


def _parse_version(text: str) -> tuple[int, int, int] | None:
    parts = text.strip().lstrip("v").split(".")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        return None
    if not numbers or len(numbers) > 3:
        return None
    major, minor, patch = [*numbers, 0, 0][:3]
    return major, minor, patch


def highest_supported_version(versions: tuple[str, ...]) -> tuple[int, int, int]:
    """The highest ``1.x`` version offered; raises ``ValueError`` with the kubelet's words."""
    if not versions:
        raise ValueError("CSI driver reporting empty array for supported versions")
    usable = [v for v in map(_parse_version, versions) if v is not None and v[0] == 1]
    if not usable:
        quoted = "[" + " ".join(f'"{v}"' for v in versions) + "]"
        raise ValueError(f"none of the versions specified {quoted} are supported")
    return max(usable)


class DriverRegistry:
    """Registered drivers by name, and their node clients (one channel each)."""

    def __init__(self, *, client: Callable[[str], CsiNode] = CsiNodeClient) -> None:
        self._drivers: dict[str, Driver] = {}
        self._clients: dict[str, CsiNode] = {}
        self._capabilities: dict[str, NodeCapabilities] = {}
        self._factory = client

    def get(self, name: str) -> Driver | None:
        return self._drivers.get(name)

    def names(self) -> list[str]:
        return sorted(self._drivers)

    def set(self, driver: Driver) -> None:
        self._drivers[driver.name] = driver
        self._clients.pop(driver.name, None)
        self._capabilities.pop(driver.name, None)

    async def capabilities(self, name: str) -> NodeCapabilities:
        """The driver's ``NodeGetCapabilities``, asked once per registration (a driver's
        capabilities do not change while it runs); raises ``CsiUnknownDriver``/``CsiError``."""
        found = self._capabilities.get(name)
        if found is None:
            found = await self.client(name).node_get_capabilities()
            if name in self._drivers:
                self._capabilities[name] = found
        return found

    async def remove(self, name: str) -> None:
        self._drivers.pop(name, None)
        self._capabilities.pop(name, None)
        client = self._clients.pop(name, None)
        if client is not None:
            await client.close()

    def client(self, name: str) -> CsiNode:
        """The node client of a registered driver; raises :class:`CsiUnknownDriver`."""
        driver = self._drivers.get(name)
        if driver is None:
            raise CsiUnknownDriver(NOT_REGISTERED.format(name=name))
        found = self._clients.get(name)
        if found is None:
            found = self._clients[name] = self._factory(driver.endpoint)
        return found


class CsiUnknownDriver(LookupError):
    pass


class CsiRegistrationHandler:
    """The plugin manager's handler for ``CSIPlugin`` registrations."""

    def __init__(
        self, *, drivers: DriverRegistry, node_info: NodeInfoUpdater, log: Logger | None = None
    ) -> None:
        self._drivers = drivers
        self._node_info = node_info
        self._log = log or get_logger("csi")

    def validate_plugin(self, name: str, endpoint: str, versions: tuple[str, ...]) -> None:
        try:
            version = highest_supported_version(versions)
        except ValueError as e:
            raise ValueError(
                f"validation failed for CSI Driver {name} at endpoint {endpoint}: {e}"
            ) from e
        existing = self._drivers.get(name)
        if existing is not None and existing.version > version:
            raise ValueError(
                f"validation failed for CSI Driver {name} at endpoint {endpoint}: a driver "
                "with the same name and a higher version is already registered"
            )

    async def register_plugin(self, name: str, endpoint: str, versions: tuple[str, ...]) -> None:
        self._log.info(
            "Register new plugin with name", plugin_name=name, endpoint=endpoint, plugin="csi"
        )
        self._drivers.set(Driver(name, endpoint, highest_supported_version(versions)))
        try:
            info = await self._drivers.client(name).node_get_info()
            await self._drivers.capabilities(name)  # kept for every volume of the driver
            await self._node_info.install_driver(
                name, info.node_id, info.max_volumes_per_node, dict(info.topology)
            )
        except (CsiError, ValueError) as e:
            await self._drivers.remove(name)
            raise ValueError(
                f"RegisterPlugin error -- failed to add CSI driver to node: {e}"
            ) from e

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        self._log.info("Deregistering plugin", plugin_name=name, endpoint=endpoint, plugin="csi")
        await self._drivers.remove(name)
        try:
            await self._node_info.uninstall_driver(name)
        except ValueError as e:
            self._log.error(
                "Failed to uninstall the driver from the CSINode", driver=name, error=str(e)
            )
