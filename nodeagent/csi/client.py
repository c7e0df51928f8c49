"""One CSI driver's ``Identity`` and ``Node`` services over its unix socket, with ``grpc.aio``.

Each call has a deadline (the kubelet's ``csiTimeout``, 2 min; 1 min for ``NodeGetInfo`` as
registration uses it); a failure is a :class:`CsiError` naming the RPC with the status as Go
prints it. The channel is made on first use, inside the event loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Final

import grpc
import grpc.aio

from csi_protos.csi.v1 import csi_pb2 as pb
from csi_protos.csi.v1 import csi_pb2_grpc as pb_grpc
from nodeagent.csi.errors import CsiError
from nodeagent.csi.types import (
    Capability,
    NodeCapabilities,
    NodeInfo,
    PublishRequest,
    StageRequest,
    VolumeStats,
)
from nodeagent.gotext import grpc_code

CSI_TIMEOUT: Final = 120.0
"""The kubelet's ``csiTimeout`` for node operations."""
INFO_TIMEOUT: Final = 60.0

_RPC = pb.NodeServiceCapability.RPC


MAX_SOCKET_PATH: Final = 107
"""``sun_path`` holds 108 bytes with its NUL: a longer path cannot be connected to as is."""


def socket_path(endpoint: str) -> str:
    """The socket path of ``endpoint`` (``unix:///x``, ``unix:/x`` or a plain ``/x``)."""
    if endpoint.startswith("unix://"):
        return endpoint[len("unix://") :]
    if endpoint.startswith("unix:"):
        return endpoint[len("unix:") :]
    return endpoint


class SocketTarget:
    """The gRPC target of a unix socket; one whose path is too long for ``sun_path`` (a
    deep root directory) is reached through a descriptor of its directory
    (``/proc/self/fd/<n>/<name>``), held until :meth:`close`."""

    def __init__(self, endpoint: str) -> None:
        path = socket_path(endpoint)
        self._fd: int | None = None
        if len(path.encode()) > MAX_SOCKET_PATH:
            self._fd = os.open(
                os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
            )
            path = f"/proc/self/fd/{self._fd}/{os.path.basename(path)}"
        self.target = "unix:" + path

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def capability(cap: Capability) -> pb.VolumeCapability:
    out = pb.VolumeCapability(access_mode=pb.VolumeCapability.AccessMode(mode=cap.access_mode.name))
    if cap.block:
        out.block.SetInParent()
    else:
        out.mount.fs_type = cap.fs_type
        out.mount.mount_flags.extend(cap.mount_flags)
        out.mount.volume_mount_group = cap.volume_mount_group
    return out


def node_capabilities(response: pb.NodeGetCapabilitiesResponse) -> NodeCapabilities:
    types = {c.rpc.type for c in response.capabilities if c.HasField("rpc")}
    return NodeCapabilities(
        stage_unstage=_RPC.STAGE_UNSTAGE_VOLUME in types,
        get_volume_stats=_RPC.GET_VOLUME_STATS in types,
        expand_volume=_RPC.EXPAND_VOLUME in types,
        volume_condition=_RPC.VOLUME_CONDITION in types,
        single_node_multi_writer=_RPC.SINGLE_NODE_MULTI_WRITER in types,
        volume_mount_group=_RPC.VOLUME_MOUNT_GROUP in types,
    )


def volume_stats(response: pb.NodeGetVolumeStatsResponse) -> VolumeStats:
    fields: dict[str, Any] = {}
    for usage in response.usage:
        if usage.unit == pb.VolumeUsage.BYTES:
            fields.update(
                capacity_bytes=usage.total,
                available_bytes=usage.available,
                used_bytes=usage.used,
            )
        elif usage.unit == pb.VolumeUsage.INODES:
            fields.update(inodes=usage.total, inodes_free=usage.available, inodes_used=usage.used)
    if response.HasField("volume_condition"):
        fields.update(
            abnormal=response.volume_condition.abnormal,
            message=response.volume_condition.message,
        )
    return VolumeStats(**fields)


class CsiNodeClient:
    """Implements :class:`~nodeagent.csi.interface.CsiNode` for the driver at ``endpoint``."""

    def __init__(self, endpoint: str, *, timeout: float = CSI_TIMEOUT) -> None:
        self.endpoint = endpoint
        self._timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._node: pb_grpc.NodeStub | None = None
        self._target: SocketTarget | None = None

    def _stub(self) -> pb_grpc.NodeStub:
        if self._node is None:
            self._target = SocketTarget(self.endpoint)
            self._channel = grpc.aio.insecure_channel(self._target.target)
            self._node = pb_grpc.NodeStub(self._channel)  # type: ignore[no-untyped-call]
        return self._node

    async def _call(
        self, rpc: str, method: Callable[..., Any], request: Any, deadline: float | None = None
    ) -> Any:
        try:
            return await method(request, timeout=deadline or self._timeout)
        except grpc.aio.AioRpcError as e:
            code = e.code()
            details = e.details() or ""
            if code is grpc.StatusCode.DEADLINE_EXCEEDED and details == "Deadline Exceeded":
                details = "context deadline exceeded"
            raise CsiError(
                rpc=rpc, code=grpc_code(None if code is None else code.name), details=details
            ) from e

    async def node_get_info(self) -> NodeInfo:
        r = await self._call(
            "NodeGetInfo", self._stub().NodeGetInfo, pb.NodeGetInfoRequest(), INFO_TIMEOUT
        )
        topology = dict(r.accessible_topology.segments) if r.HasField("accessible_topology") else {}
        return NodeInfo(r.node_id, r.max_volumes_per_node, topology)

    async def node_get_capabilities(self) -> NodeCapabilities:
        r = await self._call(
            "NodeGetCapabilities",
            self._stub().NodeGetCapabilities,
            pb.NodeGetCapabilitiesRequest(),
        )
        return node_capabilities(r)

    async def node_stage_volume(self, request: StageRequest) -> None:
        await self._call(
            "NodeStageVolume",
            self._stub().NodeStageVolume,
            pb.NodeStageVolumeRequest(
                volume_id=request.volume_id,
                publish_context=dict(request.publish_context),
                staging_target_path=request.staging_target_path,
                volume_capability=capability(request.capability),
                secrets=dict(request.secrets),
                volume_context=dict(request.volume_context),
            ),
        )

    async def node_unstage_volume(self, volume_id: str, staging_target_path: str) -> None:
        await self._call(
            "NodeUnstageVolume",
            self._stub().NodeUnstageVolume,
            pb.NodeUnstageVolumeRequest(
                volume_id=volume_id, staging_target_path=staging_target_path
            ),
        )

    async def node_publish_volume(self, request: PublishRequest) -> None:
        await self._call(
            "NodePublishVolume",
            self._stub().NodePublishVolume,
            pb.NodePublishVolumeRequest(
                volume_id=request.volume_id,
                publish_context=dict(request.publish_context),
                staging_target_path=request.staging_target_path,
                target_path=request.target_path,
                volume_capability=capability(request.capability),
                readonly=request.read_only,
                secrets=dict(request.secrets),
                volume_context=dict(request.volume_context),
            ),
        )

    async def node_unpublish_volume(self, volume_id: str, target_path: str) -> None:
        await self._call(
            "NodeUnpublishVolume",
            self._stub().NodeUnpublishVolume,
            pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=target_path),
        )

    async def node_get_volume_stats(
        self, volume_id: str, volume_path: str, staging_target_path: str = ""
    ) -> VolumeStats:
        r = await self._call(
            "NodeGetVolumeStats",
            self._stub().NodeGetVolumeStats,
            pb.NodeGetVolumeStatsRequest(
                volume_id=volume_id,
                volume_path=volume_path,
                staging_target_path=staging_target_path,
            ),
            INFO_TIMEOUT,
        )
        return volume_stats(r)

    async def node_expand_volume(
        self,
        volume_id: str,
        volume_path: str,
        required_bytes: int,
        staging_target_path: str = "",
    ) -> int:
        r = await self._call(
            "NodeExpandVolume",
            self._stub().NodeExpandVolume,
            pb.NodeExpandVolumeRequest(
                volume_id=volume_id,
                volume_path=volume_path,
                capacity_range=pb.CapacityRange(required_bytes=required_bytes),
                staging_target_path=staging_target_path,
            ),
        )
        return int(r.capacity_bytes)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._node = None
        if self._target is not None:
            self._target.close()
            self._target = None
