"""The CRI boundary as the agent sees it: only the calls it makes.

``CriClient`` (``remote.py``) implements both protocols over gRPC; ``FakeRuntime``
(``nodeagent/testing/fake_runtime.py``) implements them in memory. Both raise the errors of
``nodeagent.kuberuntime.errors``. Method shapes follow the kubelet's ``internalapi`` interfaces:
ids in, ids or messages out; listing returns plain lists.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

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
)


class RuntimeService(Protocol):
    async def version(self, api_version: str = "v1") -> VersionResponse: ...

    async def status(self, *, verbose: bool = False) -> StatusResponse: ...

    async def runtime_config(self) -> RuntimeConfigResponse: ...

    async def update_runtime_config(self, pod_cidr: str) -> None:
        """UpdateRuntimeConfig with the node's pod CIDR(s), comma-separated."""
        ...

    async def run_pod_sandbox(self, config: PodSandboxConfig, runtime_handler: str = "") -> str:
        """Create and start a sandbox; returns its id."""
        ...

    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None: ...

    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None: ...

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, *, verbose: bool = False
    ) -> PodSandboxStatusResponse: ...

    async def list_pod_sandbox(
        self, filter: PodSandboxFilter | None = None
    ) -> list[PodSandbox]: ...

    async def create_container(
        self, pod_sandbox_id: str, config: ContainerConfig, sandbox_config: PodSandboxConfig
    ) -> str:
        """Create a container in a sandbox; returns its id."""
        ...

    async def start_container(self, container_id: str) -> None: ...

    async def stop_container(self, container_id: str, grace_period: int) -> None:
        """Stop signal, then SIGKILL after ``timeout`` seconds (the grace period)."""
        ...

    async def remove_container(self, container_id: str) -> None: ...

    async def update_container_resources(
        self, container_id: str, linux: LinuxContainerResources
    ) -> None:
        """Change a running container's resources in place (in-place pod resize)."""
        ...

    async def list_containers(self, filter: ContainerFilter | None = None) -> list[Container]: ...

    async def container_status(
        self, container_id: str, *, verbose: bool = False
    ) -> ContainerStatusResponse: ...

    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout_seconds: int
    ) -> ExecSyncResponse:
        """Run ``cmd`` in the container and wait up to ``timeout_seconds`` (0 = no limit)."""
        ...

    async def reopen_container_log(self, container_id: str) -> None:
        """Ask the runtime to reopen the container's log file (after a rotation)."""
        ...

    async def list_container_stats(
        self, filter: ContainerStatsFilter | None = None
    ) -> list[ContainerStats]: ...

    async def list_pod_sandbox_stats(
        self, filter: PodSandboxStatsFilter | None = None
    ) -> list[PodSandboxStats]: ...

    def get_container_events(self) -> AsyncIterator[ContainerEventResponse]:
        """Container lifecycle events until the caller stops iterating."""
        ...


class ImageService(Protocol):
    async def list_images(self, filter: ImageFilter | None = None) -> list[Image]: ...

    async def image_status(
        self, image: str | ImageSpec, *, verbose: bool = False
    ) -> ImageStatusResponse:
        """``response.HasField("image")`` is False when the image is not present."""
        ...

    async def pull_image(
        self,
        image: str | ImageSpec,
        *,
        auth: AuthConfig | None = None,
        sandbox_config: PodSandboxConfig | None = None,
    ) -> str:
        """Pull an image; returns the image reference the runtime resolved it to."""
        ...

    async def remove_image(self, image: str | ImageSpec) -> None: ...

    async def image_fs_info(self) -> ImageFsInfoResponse: ...
