"""CRI runtime.v1 client over a unix socket with ``grpc.aio``.

One channel serves both RuntimeService and ImageService. Every unary call gets a deadline, as
the kubelet's cri-client sets one: ``runtime_request_timeout`` (2m) by default, twice that for
RunPodSandbox, the grace period on top for StopContainer and the exec timeout on top for
ExecSync; PullImage and the event stream have none. gRPC failures become the typed errors of
``errors.py`` naming the RPC and the endpoint.

Every call is counted in the kubelet's ``kubelet_runtime_operations_*`` metrics (labelled by
``operations.py``), with the errors the kubelet's client returns: any failed call (NotFound
included), an ExecSync whose command exited non-zero, an ImageStatus answer without id or size,
and every end of the event stream (EOF and the consumer leaving are errors there too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final, TypeVar, final

import grpc
import grpc.aio
from google.protobuf.message import Message

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.gotext import grpc_code
from nodeagent.kuberuntime.endpoint import (
    RUNTIME_REQUEST_TIMEOUT,
    Endpoint,
    channel_options,
    parse_endpoint,
)
from nodeagent.kuberuntime.errors import CriError, cri_error
from nodeagent.kuberuntime.metrics import RuntimeOperation
from nodeagent.kuberuntime.operations import OPERATION_TYPES
from nodeagent.kuberuntime.service import ImageService, RuntimeService
from nodeagent.kuberuntime.types import (
    AuthConfig,
    Container,
    ContainerConfig,
    ContainerEventResponse,
    ContainerFilter,
    ContainerStats,
    ContainerStatsFilter,
    ContainerStatusResponse,
    ExecSyncResponse,
    Image,
    ImageFilter,
    ImageFsInfoResponse,
    ImageSpec,
    ImageStatusResponse,
    LinuxContainerResources,
    PodSandbox,
    PodSandboxConfig,
    PodSandboxFilter,
    PodSandboxStats,
    PodSandboxStatsFilter,
    PodSandboxStatusResponse,
    RuntimeConfigResponse,
    StatusResponse,
    VersionResponse,
    as_image_spec,
)

R = TypeVar("R", bound=Message)

PROTO_PACKAGE: Final = "runtime.v1"
RUNTIME: Final = "RuntimeService"
IMAGES: Final = "ImageService"


def go_code_name(code: grpc.StatusCode | None) -> str:
    """grpc.StatusCode as Go's codes.Code.String() spells it (kubelet message format)."""
    return grpc_code(None if code is None else str(code.name))


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


# What grpc-python's client says of a call whose deadline passed, and what grpc-go's client (the
# kubelet's) says of the same: the kubelet's Events read "Error: context deadline exceeded".
_PY_DEADLINE_DETAILS: Final = "Deadline Exceeded"
_GO_DEADLINE_DETAILS: Final = "context deadline exceeded"


def translate(exc: grpc.aio.AioRpcError, *, rpc: str, endpoint: str) -> CriError:
    """The typed CriError for a failed gRPC call (a client-side deadline worded as Go's)."""
    code = exc.code()
    details = exc.details() or ""
    if code is grpc.StatusCode.DEADLINE_EXCEEDED and details == _PY_DEADLINE_DETAILS:
        details = _GO_DEADLINE_DETAILS
    return cri_error(rpc=rpc, endpoint=endpoint, code=go_code_name(code), details=details)


def _exited_non_zero(response: ExecSyncResponse) -> bool:
    return response.exit_code != 0  # the kubelet's client returns a CodeExitError


def _lacks_id_or_size(response: ImageStatusResponse) -> bool:
    return response.HasField("image") and not (response.image.id and response.image.size)


@final
class CriClient:
    """Implements ``RuntimeService`` and ``ImageService``. Create with :func:`connect`."""

    def __init__(
        self,
        *,
        endpoint: Endpoint,
        channel: grpc.aio.Channel,
        runtime_request_timeout: float = RUNTIME_REQUEST_TIMEOUT,
    ) -> None:
        self._endpoint = endpoint
        self._channel = channel
        self._timeout = runtime_request_timeout
        self._methods: dict[str, Any] = {}
        # Set by connect() once Version("v1") has been validated.
        self.version_info: VersionResponse | None = None

    @classmethod
    def open(
        cls, endpoint: str, *, runtime_request_timeout: float = RUNTIME_REQUEST_TIMEOUT
    ) -> CriClient:
        """A client on a new channel; no I/O yet. Call from inside the event loop."""
        ep = parse_endpoint(endpoint)
        channel = grpc.aio.insecure_channel(ep.target, options=channel_options())
        return cls(endpoint=ep, channel=channel, runtime_request_timeout=runtime_request_timeout)

    @property
    def endpoint(self) -> str:
        return self._endpoint.display

    @property
    def runtime_request_timeout(self) -> float:
        return self._timeout

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> CriClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _method(self, service: str, rpc: str, response_type: type[Message], stream: bool) -> Any:
        """The gRPC multi-callable for ``/runtime.v1.<service>/<rpc>``, made once."""
        method = self._methods.get(rpc)
        if method is None:
            factory = self._channel.unary_stream if stream else self._channel.unary_unary
            method = factory(
                f"/{PROTO_PACKAGE}.{service}/{rpc}",
                request_serializer=_serialize,
                response_deserializer=response_type.FromString,
            )
            self._methods[rpc] = method
        return method

    async def _call(
        self,
        service: str,
        rpc: str,
        request: Message,
        response_type: type[R],
        *,
        deadline: float | None,
        failed: Callable[[R], bool] | None = None,
    ) -> R:
        """One unary call, counted; ``failed`` marks an answer the kubelet's client returns as
        an error (counted as one here too)."""
        method = self._method(service, rpc, response_type, stream=False)
        with RuntimeOperation(OPERATION_TYPES[rpc]) as operation:
            try:
                response = await method(request, timeout=deadline)
            except grpc.aio.AioRpcError as exc:
                raise translate(exc, rpc=rpc, endpoint=self.endpoint) from exc
            if not isinstance(response, response_type):  # pragma: no cover - deserializer
                raise TypeError(f"{rpc} returned {type(response).__name__}")
            operation.failed = failed is not None and failed(response)
        return response

    # RuntimeService ----------------------------------------------------------------------

    async def version(self, api_version: str = "v1") -> VersionResponse:
        request = api.VersionRequest(version=api_version)
        return await self._call(
            RUNTIME, "Version", request, VersionResponse, deadline=self._timeout
        )

    async def status(self, *, verbose: bool = False) -> StatusResponse:
        request = api.StatusRequest(verbose=verbose)
        return await self._call(RUNTIME, "Status", request, StatusResponse, deadline=self._timeout)

    async def runtime_config(self) -> RuntimeConfigResponse:
        request = api.RuntimeConfigRequest()
        return await self._call(
            RUNTIME, "RuntimeConfig", request, RuntimeConfigResponse, deadline=self._timeout
        )

    async def update_runtime_config(self, pod_cidr: str) -> None:
        """Hand the node's pod CIDR(s) (comma-separated) to the runtime, as the kubelet's
        ``UpdatePodCIDR`` does: a ``RuntimeConfig`` carrying only ``network_config``."""
        request = api.UpdateRuntimeConfigRequest(
            runtime_config=api.RuntimeConfig(network_config=api.NetworkConfig(pod_cidr=pod_cidr))
        )
        await self._call(
            RUNTIME,
            "UpdateRuntimeConfig",
            request,
            api.UpdateRuntimeConfigResponse,
            deadline=self._timeout,
        )

    async def run_pod_sandbox(self, config: PodSandboxConfig, runtime_handler: str = "") -> str:
        request = api.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler)
        response = await self._call(
            RUNTIME,
            "RunPodSandbox",
            request,
            api.RunPodSandboxResponse,
            deadline=2 * self._timeout,
        )
        return response.pod_sandbox_id

    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None:
        request = api.StopPodSandboxRequest(pod_sandbox_id=pod_sandbox_id)
        await self._call(
            RUNTIME,
            "StopPodSandbox",
            request,
            api.StopPodSandboxResponse,
            deadline=self._timeout,
        )

    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None:
        request = api.RemovePodSandboxRequest(pod_sandbox_id=pod_sandbox_id)
        await self._call(
            RUNTIME,
            "RemovePodSandbox",
            request,
            api.RemovePodSandboxResponse,
            deadline=self._timeout,
        )

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, *, verbose: bool = False
    ) -> PodSandboxStatusResponse:
        request = api.PodSandboxStatusRequest(pod_sandbox_id=pod_sandbox_id, verbose=verbose)
        return await self._call(
            RUNTIME,
            "PodSandboxStatus",
            request,
            PodSandboxStatusResponse,
            deadline=self._timeout,
        )

    async def list_pod_sandbox(self, filter: PodSandboxFilter | None = None) -> list[PodSandbox]:
        request = api.ListPodSandboxRequest(filter=filter)
        response = await self._call(
            RUNTIME,
            "ListPodSandbox",
            request,
            api.ListPodSandboxResponse,
            deadline=self._timeout,
        )
        return list(response.items)

    async def create_container(
        self, pod_sandbox_id: str, config: ContainerConfig, sandbox_config: PodSandboxConfig
    ) -> str:
        request = api.CreateContainerRequest(
            pod_sandbox_id=pod_sandbox_id, config=config, sandbox_config=sandbox_config
        )
        response = await self._call(
            RUNTIME,
            "CreateContainer",
            request,
            api.CreateContainerResponse,
            deadline=self._timeout,
        )
        return response.container_id

    async def start_container(self, container_id: str) -> None:
        request = api.StartContainerRequest(container_id=container_id)
        await self._call(
            RUNTIME,
            "StartContainer",
            request,
            api.StartContainerResponse,
            deadline=self._timeout,
        )

    async def stop_container(self, container_id: str, grace_period: int) -> None:
        request = api.StopContainerRequest(container_id=container_id, timeout=grace_period)
        await self._call(
            RUNTIME,
            "StopContainer",
            request,
            api.StopContainerResponse,
            deadline=self._timeout + max(grace_period, 0),
        )

    async def remove_container(self, container_id: str) -> None:
        request = api.RemoveContainerRequest(container_id=container_id)
        await self._call(
            RUNTIME,
            "RemoveContainer",
            request,
            api.RemoveContainerResponse,
            deadline=self._timeout,
        )

    async def update_container_resources(
        self, container_id: str, linux: LinuxContainerResources
    ) -> None:
        request = api.UpdateContainerResourcesRequest(container_id=container_id, linux=linux)
        await self._call(
            RUNTIME,
            "UpdateContainerResources",
            request,
            api.UpdateContainerResourcesResponse,
            deadline=self._timeout,
        )

    async def list_containers(self, filter: ContainerFilter | None = None) -> list[Container]:
        request = api.ListContainersRequest(filter=filter)
        response = await self._call(
            RUNTIME,
            "ListContainers",
            request,
            api.ListContainersResponse,
            deadline=self._timeout,
        )
        return list(response.containers)

    async def container_status(
        self, container_id: str, *, verbose: bool = False
    ) -> ContainerStatusResponse:
        request = api.ContainerStatusRequest(container_id=container_id, verbose=verbose)
        return await self._call(
            RUNTIME,
            "ContainerStatus",
            request,
            ContainerStatusResponse,
            deadline=self._timeout,
        )

    async def reopen_container_log(self, container_id: str) -> None:
        request = api.ReopenContainerLogRequest(container_id=container_id)
        await self._call(
            RUNTIME,
            "ReopenContainerLog",
            request,
            api.ReopenContainerLogResponse,
            deadline=self._timeout,
        )

    async def list_container_stats(
        self, filter: ContainerStatsFilter | None = None
    ) -> list[ContainerStats]:
        request = api.ListContainerStatsRequest(filter=filter)
        response = await self._call(
            RUNTIME,
            "ListContainerStats",
            request,
            api.ListContainerStatsResponse,
            deadline=self._timeout,
        )
        return list(response.stats)

    async def list_pod_sandbox_stats(
        self, filter: PodSandboxStatsFilter | None = None
    ) -> list[PodSandboxStats]:
        request = api.ListPodSandboxStatsRequest(filter=filter)
        response = await self._call(
            RUNTIME,
            "ListPodSandboxStats",
            request,
            api.ListPodSandboxStatsResponse,
            deadline=self._timeout,
        )
        return list(response.stats)

    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout_seconds: int
    ) -> ExecSyncResponse:
        request = api.ExecSyncRequest(
            container_id=container_id, cmd=list(cmd), timeout=timeout_seconds
        )
        deadline = self._timeout + timeout_seconds if timeout_seconds > 0 else None
        return await self._call(
            RUNTIME,
            "ExecSync",
            request,
            ExecSyncResponse,
            deadline=deadline,
            failed=_exited_non_zero,
        )

    # Streaming: the runtime answers with a URL on its own streaming server, which the
    # kubelet API proxies the client's upgraded connection to.

    async def exec(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        tty: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    ) -> str:
        request = api.ExecRequest(
            container_id=container_id,
            cmd=list(cmd),
            tty=tty,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
        )
        response = await self._call(
            RUNTIME, "Exec", request, api.ExecResponse, deadline=self._timeout
        )
        return str(response.url)

    async def attach(
        self, container_id: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool
    ) -> str:
        request = api.AttachRequest(
            container_id=container_id, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr
        )
        response = await self._call(
            RUNTIME, "Attach", request, api.AttachResponse, deadline=self._timeout
        )
        return str(response.url)

    async def port_forward(self, pod_sandbox_id: str, ports: Sequence[int]) -> str:
        request = api.PortForwardRequest(pod_sandbox_id=pod_sandbox_id, port=list(ports))
        response = await self._call(
            RUNTIME, "PortForward", request, api.PortForwardResponse, deadline=self._timeout
        )
        return str(response.url)

    async def get_container_events(self) -> AsyncIterator[ContainerEventResponse]:
        method = self._method(RUNTIME, "GetContainerEvents", ContainerEventResponse, stream=True)
        with RuntimeOperation(OPERATION_TYPES["GetContainerEvents"]) as operation:
            call = method(api.GetEventsRequest())
            try:
                async for event in call:
                    if isinstance(event, ContainerEventResponse):
                        yield event
                operation.failed = True  # io.EOF: an error to the kubelet's client
            except grpc.aio.AioRpcError as exc:
                raise translate(exc, rpc="GetContainerEvents", endpoint=self.endpoint) from exc
            finally:
                call.cancel()

    # ImageService ------------------------------------------------------------------------

    async def list_images(self, filter: ImageFilter | None = None) -> list[Image]:
        request = api.ListImagesRequest(filter=filter)
        response = await self._call(
            IMAGES, "ListImages", request, api.ListImagesResponse, deadline=self._timeout
        )
        return list(response.images)

    async def image_status(
        self, image: str | ImageSpec, *, verbose: bool = False
    ) -> ImageStatusResponse:
        spec = as_image_spec(image)
        request = api.ImageStatusRequest(image=spec, verbose=verbose)
        response = await self._call(
            IMAGES,
            "ImageStatus",
            request,
            ImageStatusResponse,
            deadline=self._timeout,
            failed=_lacks_id_or_size,
        )
        if _lacks_id_or_size(response):
            # The kubelet refuses such an answer too; a present image always has both.
            details = f'Id or size of image "{spec.image}" is not set'
            raise CriError(
                f'CRI ImageStatus on endpoint "{self.endpoint}": {details}',
                rpc="ImageStatus",
                endpoint=self.endpoint,
                code="OK",
                details=details,
            )
        return response

    async def pull_image(
        self,
        image: str | ImageSpec,
        *,
        auth: AuthConfig | None = None,
        sandbox_config: PodSandboxConfig | None = None,
    ) -> str:
        request = api.PullImageRequest(
            image=as_image_spec(image), auth=auth, sandbox_config=sandbox_config
        )
        # No deadline: the kubelet lets a pull run as long as it makes progress.
        response = await self._call(
            IMAGES, "PullImage", request, api.PullImageResponse, deadline=None
        )
        return response.image_ref

    async def remove_image(self, image: str | ImageSpec) -> None:
        request = api.RemoveImageRequest(image=as_image_spec(image))
        await self._call(
            IMAGES, "RemoveImage", request, api.RemoveImageResponse, deadline=self._timeout
        )

    async def image_fs_info(self) -> ImageFsInfoResponse:
        request = api.ImageFsInfoRequest()
        return await self._call(
            IMAGES, "ImageFsInfo", request, ImageFsInfoResponse, deadline=self._timeout
        )


def _satisfies_protocols(client: CriClient) -> tuple[RuntimeService, ImageService]:
    return client, client  # mypy checks CriClient against both protocols here
