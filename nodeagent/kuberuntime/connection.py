"""A CRI connection opened by a manager: the client must be created inside the event loop,
and the composition root runs outside it.

:class:`RuntimeConnection` implements ``RuntimeService`` and ``ImageService`` by delegating to
a :class:`CriClient` that ``run()`` opens and validates (``Version`` first: runtime.v1 must be
served), retrying every ``retry`` seconds while the runtime is unreachable. Once connected it
asks the runtime for its cgroup driver (``RuntimeConfig``, else its own configuration from a
verbose ``Status``; see :mod:`.cgroupdriver`) before anything else may use the connection.
Calls made before the connection is up wait for it. ``run()`` closes the client when
cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Final

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.cgroupdriver import ResolvedDriver, resolve_cgroup_driver
from nodeagent.kuberuntime.endpoint import RUNTIME_REQUEST_TIMEOUT
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.negotiate import connect
from nodeagent.kuberuntime.podsettings import CgroupDriver
from nodeagent.kuberuntime.remote import CriClient
from nodeagent.kuberuntime.service import ImageService, RuntimeService
from nodeagent.log import Logger, get_logger

RETRY: Final = 2.0


class RuntimeConnection:
    def __init__(
        self,
        *,
        endpoint: str,
        runtime_request_timeout: float = RUNTIME_REQUEST_TIMEOUT,
        opener: Callable[[str], Awaitable[CriClient]] | None = None,
        retry: float = RETRY,
        cgroup_driver: CgroupDriver = "cgroupfs",
        log: Logger | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._timeout = runtime_request_timeout
        self._opener = opener
        self._retry = retry
        self._log = (log or get_logger("kuberuntime")).bind(endpoint=endpoint)
        self._configured_driver: CgroupDriver = cgroup_driver
        self._driver: ResolvedDriver | None = None
        self._client: CriClient | None = None
        self._ready = asyncio.Event()

    @property
    def name(self) -> str:
        return "cri"

    @property
    def version_info(self) -> cri.VersionResponse | None:
        return self._client.version_info if self._client is not None else None

    async def cgroup_driver(self) -> CgroupDriver:
        """The driver pods' cgroups follow: the runtime's answer, else ``kubelet.cgroupDriver``.
        Waits for the connection."""
        await self._ready.wait()
        assert self._driver is not None
        return self._driver.driver

    async def _open(self) -> CriClient:
        if self._opener is not None:
            return await self._opener(self._endpoint)
        return await connect(self._endpoint, runtime_request_timeout=self._timeout)

    async def run(self) -> None:
        last_error = ""
        try:
            while self._client is None:
                try:
                    self._client = await self._open()
                except CriError as e:
                    if str(e) != last_error:
                        self._log.error("Cannot connect to the container runtime", error=str(e))
                        last_error = str(e)
                    await asyncio.sleep(self._retry)
            info = self._client.version_info
            self._log.info(
                "Connected to the container runtime",
                runtime=f"{info.runtime_name}://{info.runtime_version}" if info else "",
            )
            client = self._client
            self._driver = await resolve_cgroup_driver(
                client.runtime_config,
                status=lambda: client.status(verbose=True),
                configured=self._configured_driver,
                log=self._log,
            )
            self._ready.set()
            await asyncio.Event().wait()
        finally:
            self._ready.clear()
            if self._client is not None:
                client, self._client = self._client, None
                await asyncio.shield(client.close())

    async def _c(self) -> CriClient:
        await self._ready.wait()
        assert self._client is not None
        return self._client

    # RuntimeService ----------------------------------------------------------------------

    async def version(self, api_version: str = "v1") -> cri.VersionResponse:
        return await (await self._c()).version(api_version)

    async def status(self, *, verbose: bool = False) -> cri.StatusResponse:
        return await (await self._c()).status(verbose=verbose)

    async def runtime_config(self) -> cri.RuntimeConfigResponse:
        return await (await self._c()).runtime_config()

    async def update_runtime_config(self, pod_cidr: str) -> None:
        await (await self._c()).update_runtime_config(pod_cidr)

    async def run_pod_sandbox(self, config: cri.PodSandboxConfig, runtime_handler: str = "") -> str:
        return await (await self._c()).run_pod_sandbox(config, runtime_handler)

    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None:
        await (await self._c()).stop_pod_sandbox(pod_sandbox_id)

    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None:
        await (await self._c()).remove_pod_sandbox(pod_sandbox_id)

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, *, verbose: bool = False
    ) -> cri.PodSandboxStatusResponse:
        return await (await self._c()).pod_sandbox_status(pod_sandbox_id, verbose=verbose)

    async def list_pod_sandbox(
        self, filter: cri.PodSandboxFilter | None = None
    ) -> list[cri.PodSandbox]:
        return await (await self._c()).list_pod_sandbox(filter)

    async def create_container(
        self,
        pod_sandbox_id: str,
        config: cri.ContainerConfig,
        sandbox_config: cri.PodSandboxConfig,
    ) -> str:
        return await (await self._c()).create_container(pod_sandbox_id, config, sandbox_config)

    async def start_container(self, container_id: str) -> None:
        await (await self._c()).start_container(container_id)

    async def stop_container(self, container_id: str, grace_period: int) -> None:
        await (await self._c()).stop_container(container_id, grace_period)

    async def remove_container(self, container_id: str) -> None:
        await (await self._c()).remove_container(container_id)

    async def update_container_resources(
        self, container_id: str, linux: cri.LinuxContainerResources
    ) -> None:
        await (await self._c()).update_container_resources(container_id, linux)

    async def list_containers(
        self, filter: cri.ContainerFilter | None = None
    ) -> list[cri.Container]:
        return await (await self._c()).list_containers(filter)

    async def container_status(
        self, container_id: str, *, verbose: bool = False
    ) -> cri.ContainerStatusResponse:
        return await (await self._c()).container_status(container_id, verbose=verbose)

    async def reopen_container_log(self, container_id: str) -> None:
        await (await self._c()).reopen_container_log(container_id)

    async def list_container_stats(
        self, filter: cri.ContainerStatsFilter | None = None
    ) -> list[cri.ContainerStats]:
        return await (await self._c()).list_container_stats(filter)

    async def list_pod_sandbox_stats(
        self, filter: cri.PodSandboxStatsFilter | None = None
    ) -> list[cri.PodSandboxStats]:
        return await (await self._c()).list_pod_sandbox_stats(filter)

    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout_seconds: int
    ) -> cri.ExecSyncResponse:
        return await (await self._c()).exec_sync(container_id, cmd, timeout_seconds)

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
        return await (await self._c()).exec(
            container_id, cmd, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr
        )

    async def attach(
        self, container_id: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool
    ) -> str:
        return await (await self._c()).attach(
            container_id, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr
        )

    async def port_forward(self, pod_sandbox_id: str, ports: Sequence[int]) -> str:
        return await (await self._c()).port_forward(pod_sandbox_id, ports)

    async def get_container_events(self) -> AsyncIterator[cri.ContainerEventResponse]:
        async for event in (await self._c()).get_container_events():
            yield event

    # ImageService ------------------------------------------------------------------------

    async def list_images(self, filter: cri.ImageFilter | None = None) -> list[cri.Image]:
        return await (await self._c()).list_images(filter)

    async def image_status(
        self, image: str | cri.ImageSpec, *, verbose: bool = False
    ) -> cri.ImageStatusResponse:
        return await (await self._c()).image_status(image, verbose=verbose)

    async def pull_image(
        self,
        image: str | cri.ImageSpec,
        *,
        auth: cri.AuthConfig | None = None,
        sandbox_config: cri.PodSandboxConfig | None = None,
    ) -> str:
        return await (await self._c()).pull_image(image, auth=auth, sandbox_config=sandbox_config)

    async def remove_image(self, image: str | cri.ImageSpec) -> None:
        await (await self._c()).remove_image(image)

    async def image_fs_info(self) -> cri.ImageFsInfoResponse:
        return await (await self._c()).image_fs_info()


def _satisfies_protocols(c: RuntimeConnection) -> tuple[RuntimeService, ImageService]:
    return c, c  # mypy checks RuntimeConnection against both protocols here
