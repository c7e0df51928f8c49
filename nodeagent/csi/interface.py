"""The boundaries the volume manager and the plugin manager depend on: one CSI driver's node
side, how to reach a driver by its endpoint, and a registering plugin's socket."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from nodeagent.csi.types import (
    NodeCapabilities,
    NodeInfo,
    PluginInfo,
    PublishRequest,
    StageRequest,
    VolumeStats,
)


class CsiNode(Protocol):
    async def node_get_info(self) -> NodeInfo: ...

    async def node_get_capabilities(self) -> NodeCapabilities: ...

    async def node_stage_volume(self, request: StageRequest) -> None: ...

    async def node_unstage_volume(self, volume_id: str, staging_target_path: str) -> None: ...

    async def node_publish_volume(self, request: PublishRequest) -> None: ...

    async def node_unpublish_volume(self, volume_id: str, target_path: str) -> None: ...

    async def node_get_volume_stats(
        self, volume_id: str, volume_path: str, staging_target_path: str = ""
    ) -> VolumeStats: ...

    async def node_expand_volume(
        self,
        volume_id: str,
        volume_path: str,
        required_bytes: int,
        staging_target_path: str = "",
    ) -> int: ...

    async def close(self) -> None: ...


CsiNodeFactory = Callable[[str], CsiNode]
"""A client of the driver listening on an endpoint (``unix:///...`` or a socket path)."""


class PluginRegistrar(Protocol):
    """A plugin's registration socket (``pluginregistration.Registration``)."""

    async def get_info(self) -> PluginInfo: ...

    async def notify_registration_status(self, registered: bool, error: str = "") -> None: ...

    async def close(self) -> None: ...
