"""A scriptable CRI server on a unix socket, for testing the real gRPC client."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from cri_protos.runtime.v1 import api_pb2 as api
from cri_protos.runtime.v1 import api_pb2_grpc as api_grpc

Handler = Callable[[Any, grpc.aio.ServicerContext], Any]


class ScriptedCri:
    """Serves RuntimeService and ImageService; each RPC runs ``handlers[name]`` if scripted,
    otherwise answers UNIMPLEMENTED. ``requests[name]`` keeps what the client sent and
    ``deadlines[name]`` the seconds the client allowed (None without a deadline)."""

    def __init__(self, socket_path: Path, *, services: tuple[str, ...]) -> None:
        self.socket_path = socket_path
        self.endpoint = f"unix://{socket_path}"
        self.handlers: dict[str, Handler] = {}
        self.requests: dict[str, list[Any]] = {}
        self.deadlines: dict[str, float | None] = {}
        self.server = grpc.aio.server()
        for service in services:
            servicer = self._servicer(service)
            getattr(api_grpc, f"add_{service}Servicer_to_server")(servicer, self.server)
        self.server.add_insecure_port(f"unix:{socket_path}")

    def _record(self, name: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        self.requests.setdefault(name, []).append(request)
        self.deadlines[name] = context.time_remaining()

    def _servicer(self, service: str) -> object:
        methods: dict[str, Any] = {}
        for method in api.DESCRIPTOR.services_by_name[service].methods:
            methods[method.name] = (
                self._streaming(method.name)
                if method.server_streaming
                else self._unary(method.name)
            )
        return type(f"Scripted{service}", (), methods)()

    def _unary(self, name: str) -> Any:
        async def call(_self: object, request: Any, context: grpc.aio.ServicerContext) -> Any:
            self._record(name, request, context)
            handler = self.handlers.get(name)
            if handler is None:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"unknown method {name}")
            result = handler(request, context)
            return await result if inspect.isawaitable(result) else result

        return call

    def _streaming(self, name: str) -> Any:
        async def call(
            _self: object, request: Any, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            self._record(name, request, context)
            handler = self.handlers.get(name)
            if handler is None:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"unknown method {name}")
            async for item in handler(request, context):
                yield item

        return call
