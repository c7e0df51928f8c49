"""CSI volumes on this node, as the kubelet's CSI volume plugin (``pkg/volume/csi``).

Modules: ``drivers.py`` (the registered drivers and the plugin manager's ``CSIPlugin``
handler), ``nodeinfo.py`` (the CSINode, the Node's node-ID annotation and topology labels),
``driverinfo.py`` (what a ``CSIDriver`` object asks: attach, pod info, fsGroup policy,
lifecycle modes, token requests; pure), ``paths.py`` (the kubelet's directories and
``vol_data.json``; pure), ``records.py`` (those records on disk), ``volumes.py`` (stage,
publish, unpublish, unstage). :class:`CsiPlugin` ties them for the composition root: its
``registration`` goes to the plugin manager, its ``volumes`` to the volume manager, and its
``run()`` creates the CSINode once the Node exists.

In: registrations from the plugin manager, pods' PV-backed and inline CSI volumes, the
``CSIDriver`` and ``VolumeAttachment`` objects. Out: CSI ``Node`` RPCs to the drivers, the
CSINode, the Node's annotation and labels, ``plugins/kubernetes.io/csi/...`` and the pods'
``kubernetes.io~csi`` directories.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from nodeagent.apiserver import Api, ApiError
from nodeagent.csi import CsiNode, CsiNodeClient
from nodeagent.log import Logger, get_logger
from nodeagent.volumemanager.csi.drivers import (
    CSI_PLUGIN_TYPE,
    CsiRegistrationHandler,
    DriverRegistry,
)
from nodeagent.volumemanager.csi.nodeinfo import NodeInfoManager
from nodeagent.volumemanager.csi.volumes import CsiVolumePlugin

__all__ = ["CSI_PLUGIN_TYPE", "CsiPlugin", "CsiVolumePlugin", "DriverRegistry"]

INIT_RETRY: Final = 5.0


class CsiPlugin:
    name = "csi"

    def __init__(
        self,
        *,
        root_dir: str,
        node_name: str,
        api: Api | None,
        client: Callable[[str], CsiNode] = CsiNodeClient,
        log: Logger | None = None,
    ) -> None:
        self._log = log or get_logger("csi")
        self._api = api
        self.drivers = DriverRegistry(client=client)
        self.node_info = (
            NodeInfoManager(api=api, node_name=node_name, log=self._log) if api else None
        )
        self.registration = CsiRegistrationHandler(
            drivers=self.drivers, node_info=self.node_info or _NoNodeInfo(), log=self._log
        )
        self.volumes = CsiVolumePlugin(
            root_dir=root_dir, node_name=node_name, api=api, drivers=self.drivers, log=self._log
        )

    async def run(self) -> None:
        """Publish the CSINode (the kubelet does it at start, driver or not), then idle."""
        if self.node_info is not None:
            while True:
                try:
                    await self.node_info.initialize()
                    break
                except (ValueError, ApiError) as e:
                    self._log.warning("Failed to initialize the CSINode", error=str(e))
                    await asyncio.sleep(INIT_RETRY)
        await asyncio.Event().wait()


class _NoNodeInfo:
    """A node without an API server: drivers register, nothing is published."""

    async def install_driver(
        self, name: str, node_id: str, max_volumes: int, topology: dict[str, str]
    ) -> None:
        return None

    async def uninstall_driver(self, name: str) -> None:
        return None
