"""A plugin's registration socket: the kubelet's ``pluginregistration.Registration`` service
(``GetInfo``, then ``NotifyRegistrationStatus`` with the outcome), as node-driver-registrar
serves it in ``<rootDir>/plugins_registry``."""

from __future__ import annotations

from typing import Final

import grpc
import grpc.aio

from csi_protos.pluginregistration.v1 import api_pb2 as pb
from csi_protos.pluginregistration.v1 import api_pb2_grpc as pb_grpc
from nodeagent.csi.client import SocketTarget
from nodeagent.csi.errors import CsiError
from nodeagent.csi.types import PluginInfo
from nodeagent.gotext import grpc_code

REGISTRATION_TIMEOUT: Final = 10.0
"""The kubelet's plugin manager dials and asks with a 10 s deadline."""


class RegistrationClient:
    """Implements :class:`~nodeagent.csi.interface.PluginRegistrar` for one socket."""

    def __init__(self, socket_path: str, *, timeout: float = REGISTRATION_TIMEOUT) -> None:
        self.socket_path = socket_path
        self._timeout = timeout
        self._target = SocketTarget(socket_path)
        self._channel = grpc.aio.insecure_channel(self._target.target)
        self._stub = pb_grpc.RegistrationStub(self._channel)  # type: ignore[no-untyped-call]

    async def get_info(self) -> PluginInfo:
        try:
            r = await self._stub.GetInfo(pb.InfoRequest(), timeout=self._timeout)
        except grpc.aio.AioRpcError as e:
            raise _error("GetInfo", e) from e
        return PluginInfo(r.type, r.name, r.endpoint, tuple(r.supported_versions))

    async def notify_registration_status(self, registered: bool, error: str = "") -> None:
        try:
            await self._stub.NotifyRegistrationStatus(
                pb.RegistrationStatus(plugin_registered=registered, error=error),
                timeout=self._timeout,
            )
        except grpc.aio.AioRpcError as e:
            raise _error("NotifyRegistrationStatus", e) from e

    async def close(self) -> None:
        await self._channel.close()
        self._target.close()


def _error(rpc: str, e: grpc.aio.AioRpcError) -> CsiError:
    code = e.code()
    return CsiError(
        rpc=rpc, code=grpc_code(None if code is None else code.name), details=e.details() or ""
    )
