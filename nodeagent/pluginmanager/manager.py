"""The plugin manager's loop: scan the registry directory each second, register new plugins
with the handler of their type, deregister the ones whose socket went away.

Registration is the kubelet's ``operationExecutor.RegisterPlugin``: dial the socket,
``GetInfo``, find the handler for ``info.type`` (``no handler registered for plugin type: X``
otherwise), ``validate_plugin``, ``register_plugin``, then tell the plugin with
``NotifyRegistrationStatus`` (``plugin_registered`` and the error text). The endpoint is the
plugin's own, or the registration socket when it gives none. A failed registration is tried
again at the next scan only once the socket changes, as the kubelet's actual state does not
record it either: the plugin (node-driver-registrar) exits or re-creates its socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from nodeagent.csi import CsiError, PluginRegistrar, RegistrationClient
from nodeagent.log import Logger, get_logger
from nodeagent.pluginmanager.watcher import REGISTRY_DIR, Socket, reconcile, scan

SCAN_PERIOD: Final = 1.0
"""The kubelet's reconciler runs every second."""


class PluginHandler(Protocol):
    def validate_plugin(self, name: str, endpoint: str, versions: tuple[str, ...]) -> None:
        """Raise ``ValueError`` with the reason a plugin is refused."""
        ...

    async def register_plugin(self, name: str, endpoint: str, versions: tuple[str, ...]) -> None:
        """Raise ``ValueError`` or ``CsiError`` when the plugin cannot be used."""
        ...

    async def deregister_plugin(self, name: str, endpoint: str) -> None: ...


@dataclass(frozen=True, slots=True)
class _Registered:
    socket: Socket
    type: str
    name: str
    endpoint: str


class PluginManager:
    name = "pluginmanager"

    def __init__(
        self,
        *,
        root_dir: str,
        handlers: Mapping[str, PluginHandler],
        registrar: Callable[[str], PluginRegistrar] = RegistrationClient,
        period: float = SCAN_PERIOD,
        log: Logger | None = None,
    ) -> None:
        self._dir = Path(root_dir) / REGISTRY_DIR
        self._handlers = dict(handlers)
        self._registrar = registrar
        self._period = period
        self._log = log or get_logger("pluginmanager")
        self._registered: dict[str, _Registered] = {}
        self._tried: dict[str, Socket] = {}
        """Sockets whose registration failed: not tried again until they change."""

    @property
    def directory(self) -> Path:
        return self._dir

    def registered(self) -> dict[str, str]:
        """Registered plugin name -> its type."""
        return {r.name: r.type for r in self._registered.values()}

    async def run(self) -> None:
        self._log.info("Starting Kubelet Plugin Manager", directory=str(self._dir))
        while True:
            await self.sync()
            await asyncio.sleep(self._period)

    async def sync(self) -> None:
        try:
            desired = await asyncio.to_thread(scan, self._dir)
        except OSError as e:
            self._log.error("Cannot read the plugin registry", path=str(self._dir), error=str(e))
            return
        self._tried = {p: s for p, s in self._tried.items() if desired.get(p) == s}
        plan = reconcile(desired, {p: r.socket for p, r in self._registered.items()})
        for path in plan.deregister:
            await self._deregister(self._registered.pop(path))
        for sock in plan.register:
            if self._tried.get(sock.path) == sock:
                continue
            if not await self._register(sock):
                self._tried[sock.path] = sock

    async def _register(self, sock: Socket) -> bool:
        client = self._registrar(sock.path)
        try:
            try:
                info = await client.get_info()
            except CsiError as e:
                self._log.error("RegisterPlugin failed: GetInfo", path=sock.path, error=str(e))
                return False
            endpoint = info.endpoint or sock.path
            error = await self._use(info.type, info.name, endpoint, info.supported_versions)
            try:
                await client.notify_registration_status(error is None, error or "")
            except CsiError as e:
                self._log.error(
                    "Failed to tell the plugin its registration status",
                    plugin=info.name,
                    path=sock.path,
                    error=str(e),
                )
            if error is not None:
                self._log.error("RegisterPlugin failed", plugin=info.name, error=error)
                return False
            self._registered[sock.path] = _Registered(sock, info.type, info.name, endpoint)
            self._log.info(
                "Register new plugin with name",
                plugin_name=info.name,
                plugin_type=info.type,
                endpoint=endpoint,
            )
            return True
        finally:
            await client.close()

    async def _use(
        self, kind: str, name: str, endpoint: str, versions: tuple[str, ...]
    ) -> str | None:
        handler = self._handlers.get(kind)
        if handler is None:
            return (
                "RegisterPlugin error -- no handler registered for plugin type: "
                f"{kind} at socket {endpoint}"
            )
        try:
            handler.validate_plugin(name, endpoint, versions)
        except ValueError as e:
            return f"RegisterPlugin error -- plugin validation failed with err: {e}"
        try:
            await handler.register_plugin(name, endpoint, versions)
        except (ValueError, CsiError) as e:
            return f"RegisterPlugin error -- plugin registration failed with err: {e}"
        return None

    async def _deregister(self, plugin: _Registered) -> None:
        handler = self._handlers.get(plugin.type)
        self._log.info("Deregistering plugin", plugin_name=plugin.name, endpoint=plugin.endpoint)
        if handler is not None:
            try:
                await handler.deregister_plugin(plugin.name, plugin.endpoint)
            except Exception as e:
                self._log.error("DeRegisterPlugin failed", plugin=plugin.name, error=str(e))
