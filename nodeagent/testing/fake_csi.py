"""Fakes for the CSI boundary: :class:`FakeCsiNode`, an in-memory driver's node side (the
shape of ``nodeagent.csi.CsiNode``), and :class:`FakeCsiServer`, the same driver served over
gRPC on unix sockets (its CSI endpoint and a node-driver-registrar's registration socket), for
tests of the real clients and of the plugin manager."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from csi_protos.csi.v1 import csi_pb2 as pb
from csi_protos.csi.v1 import csi_pb2_grpc as pb_grpc
from csi_protos.pluginregistration.v1 import api_pb2 as reg
from csi_protos.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from nodeagent.csi import CsiError
from nodeagent.csi.client import SocketTarget
from nodeagent.csi.types import (
    NodeCapabilities,
    NodeInfo,
    PublishRequest,
    StageRequest,
    VolumeStats,
)


@dataclass
class FakeCsiNode:
    """A driver's node side in memory. ``staged``/``published`` map a path to the volume
    handle; publishing makes the target directory (a file for a block capability: a real
    driver makes it the device), as drivers do; unpublishing removes it.
    ``failures`` maps an RPC name to the :class:`CsiError` code it fails with."""

    node_id: str = "fake-node-id"
    max_volumes: int = 0
    topology: dict[str, str] = field(default_factory=dict)
    capabilities: NodeCapabilities = field(
        default_factory=lambda: NodeCapabilities(
            stage_unstage=True, get_volume_stats=True, expand_volume=True
        )
    )
    stats: VolumeStats = field(default_factory=VolumeStats)
    staged: dict[str, str] = field(default_factory=dict)
    published: dict[str, str] = field(default_factory=dict)
    requests: list[Any] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    expanded: dict[str, int] = field(default_factory=dict)
    closed: int = 0

    def _call(self, rpc: str) -> None:
        self.calls.append(rpc)
        code = self.failures.get(rpc)
        if code is not None:
            raise CsiError(rpc=rpc, code=code, details=f"{rpc} failed")

    async def node_get_info(self) -> NodeInfo:
        self._call("NodeGetInfo")
        return NodeInfo(self.node_id, self.max_volumes, dict(self.topology))

    async def node_get_capabilities(self) -> NodeCapabilities:
        self._call("NodeGetCapabilities")
        return self.capabilities

    async def node_stage_volume(self, request: StageRequest) -> None:
        self._call("NodeStageVolume")
        self.requests.append(request)
        self.staged[request.staging_target_path] = request.volume_id

    async def node_unstage_volume(self, volume_id: str, staging_target_path: str) -> None:
        self._call("NodeUnstageVolume")
        self.staged.pop(staging_target_path, None)

    async def node_publish_volume(self, request: PublishRequest) -> None:
        self._call("NodePublishVolume")
        self.requests.append(request)
        if request.capability.block:
            await asyncio.to_thread(_touch, request.target_path)
        else:
            await asyncio.to_thread(os.makedirs, request.target_path, 0o750, True)
        self.published[request.target_path] = request.volume_id

    async def node_unpublish_volume(self, volume_id: str, target_path: str) -> None:
        self._call("NodeUnpublishVolume")
        self.published.pop(target_path, None)
        if await asyncio.to_thread(os.path.isdir, target_path):
            await asyncio.to_thread(os.rmdir, target_path)
        elif await asyncio.to_thread(os.path.isfile, target_path):
            await asyncio.to_thread(os.unlink, target_path)

    async def node_get_volume_stats(
        self, volume_id: str, volume_path: str, staging_target_path: str = ""
    ) -> VolumeStats:
        self._call("NodeGetVolumeStats")
        return self.stats

    async def node_expand_volume(
        self,
        volume_id: str,
        volume_path: str,
        required_bytes: int,
        staging_target_path: str = "",
    ) -> int:
        self._call("NodeExpandVolume")
        self.expanded[volume_id] = required_bytes
        return required_bytes

    async def close(self) -> None:
        self.closed += 1


def _touch(path: str) -> None:
    with open(path, "a"):
        pass


_RPC = pb.NodeServiceCapability.RPC


class _NodeServicer(pb_grpc.NodeServicer):
    def __init__(self, node: FakeCsiNode) -> None:
        self.node = node

    async def NodeGetInfo(self, request: Any, context: Any) -> Any:
        info = await self.node.node_get_info()
        return pb.NodeGetInfoResponse(
            node_id=info.node_id,
            max_volumes_per_node=info.max_volumes_per_node,
            accessible_topology=pb.Topology(segments=dict(info.topology)),
        )

    async def NodeGetCapabilities(self, request: Any, context: Any) -> Any:
        caps = await self.node.node_get_capabilities()
        wanted = [
            (caps.stage_unstage, _RPC.STAGE_UNSTAGE_VOLUME),
            (caps.get_volume_stats, _RPC.GET_VOLUME_STATS),
            (caps.expand_volume, _RPC.EXPAND_VOLUME),
            (caps.volume_mount_group, _RPC.VOLUME_MOUNT_GROUP),
        ]
        return pb.NodeGetCapabilitiesResponse(
            capabilities=[pb.NodeServiceCapability(rpc=_RPC(type=t)) for on, t in wanted if on]
        )

    async def NodeUnpublishVolume(self, request: Any, context: Any) -> Any:
        try:
            await self.node.node_unpublish_volume(request.volume_id, request.target_path)
        except CsiError as e:
            await context.abort(grpc.StatusCode.INTERNAL, e.details)
        return pb.NodeUnpublishVolumeResponse()


class _RegistrationServicer(reg_grpc.RegistrationServicer):
    def __init__(self, info: reg.PluginInfo) -> None:
        self.info = info
        self.statuses: list[tuple[bool, str]] = []

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return self.info

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.statuses.append((request.plugin_registered, request.error))
        return reg.RegistrationStatusResponse()


class FakeCsiServer:
    """``node`` served on ``endpoint`` (the driver's socket), and a registration socket at
    ``registration`` offering it as ``name`` with ``versions``; ``statuses`` records what the
    node said back through ``NotifyRegistrationStatus``."""

    def __init__(
        self,
        *,
        node: FakeCsiNode,
        name: str,
        endpoint: Path,
        registration: Path,
        versions: tuple[str, ...] = ("1.0.0",),
        plugin_type: str = "CSIPlugin",
    ) -> None:
        self.node = node
        self.endpoint = endpoint
        self.registration = registration
        self._registrar = _RegistrationServicer(
            reg.PluginInfo(
                type=plugin_type,
                name=name,
                endpoint=str(endpoint),
                supported_versions=list(versions),
            )
        )
        self._servers: list[grpc.aio.Server] = []
        self._targets: list[SocketTarget] = []

    @property
    def statuses(self) -> list[tuple[bool, str]]:
        return self._registrar.statuses

    async def start(self, *, register: bool = True) -> None:
        driver = grpc.aio.server()
        pb_grpc.add_NodeServicer_to_server(_NodeServicer(self.node), driver)  # type: ignore[no-untyped-call]
        driver.add_insecure_port(self._target(self.endpoint))
        await driver.start()
        self._servers.append(driver)
        if register:
            await self.start_registration()

    async def start_registration(self) -> None:
        server = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(self._registrar, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(self._target(self.registration))
        await server.start()
        self._servers.append(server)

    def _target(self, path: Path) -> str:
        """Listen through a directory descriptor when the path is too long for a socket."""
        target = SocketTarget(str(path))
        self._targets.append(target)
        return target.target

    async def stop(self) -> None:
        for server in self._servers:
            await server.stop(None)
        self._servers.clear()
        for target in self._targets:
            target.close()
        self._targets.clear()
        for path in (self.registration, self.endpoint):
            if path.exists():
                path.unlink()


def csi_pv(name: str, *, driver: str, handle: str, claim_uid: str, **spec: Any) -> dict[str, Any]:
    """A PersistentVolume of ``driver`` bound to the claim ``default/data``."""
    csi: Mapping[str, Any] = {"driver": driver, "volumeHandle": handle, **spec.pop("csi", {})}
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "claimRef": {"name": "data", "namespace": "default", "uid": claim_uid},
            "csi": dict(csi),
            **spec,
        },
    }
