"""An in-memory container runtime implementing the CRI ``RuntimeService`` and ``ImageService``.

It behaves like containerd where callers can tell: ids are 64 hex digits, sandboxes get pod IPs
(none with host networking), removal is idempotent, unknown ids raise ``CriNotFound``, a second
container with the same name and attempt in a sandbox is refused, images must be present (or
pullable from ``registry``) before a container uses them. Tests drive what containerd would do
on its own with ``exit_container`` (or ``lose_container``: state unknown) and script failures
with ``inject_error``. A verbose ``Status`` names ``sandbox_image`` as containerd's config does.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import itertools
import json
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast, final

from nodeagent.clock import Clock, FrozenClock
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.service import ImageService, RuntimeService
from nodeagent.testing.fake_images import FakeImageService, image_ref_of

ExecHandler = Callable[[str, Sequence[str]], cri.ExecSyncResponse]
NODE = 2  # NamespaceMode.NODE: host networking


@dataclass(slots=True)
class _Sandbox:
    id: str
    config: cri.PodSandboxConfig
    runtime_handler: str
    created_at: int
    ip: str
    state: cri.PodSandboxState = cri.SANDBOX_READY


@dataclass(slots=True)
class _Container:
    id: str
    sandbox_id: str
    config: cri.ContainerConfig
    image: cri.Image
    created_at: int
    state: cri.ContainerState = cri.CONTAINER_CREATED
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""


@final
class FakeRuntime(FakeImageService):
    """Implements ``RuntimeService`` and ``ImageService`` in memory."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        endpoint: str = "unix:///run/fake-cri.sock",
        runtime_name: str = "fake",
        runtime_version: str = "1.0.0",
        exec_handler: ExecHandler | None = None,
    ) -> None:
        super().__init__(endpoint=endpoint)
        self._clock = clock or FrozenClock()
        self.version_response = cri.VersionResponse(
            version="0.1.0",
            runtime_name=runtime_name,
            runtime_version=runtime_version,
            runtime_api_version="v1",
        )
        self.runtime_ready = True
        self.sandbox_image = "registry.k8s.io/pause:3.10"  # sandboxImage of a verbose Status
        self.network_ready = True
        # UpdateRuntimeConfig's pod CIDRs, in order; `on_pod_cidr` plays the runtime's part
        # (containerd writes its CNI config from a template and turns NetworkReady true).
        self.pod_cidrs: list[str] = []
        self.on_pod_cidr: Callable[[str], None] | None = None
        self.closed = 0
        self.cgroup_driver = 1  # CGROUPFS; 0 is SYSTEMD
        self.stop_exit_code = 137
        self.grace_periods: dict[str, int] = {}  # StopContainer timeouts received
        # How long a container runs on after its StopContainer (its SIGTERM handler's work),
        # at most the grace period; it stays running, and answers ExecSync, meanwhile.
        self.stop_seconds = 0.0
        self.exec_handler = exec_handler or (lambda _cid, _cmd: cri.ExecSyncResponse(exit_code=0))
        # Streaming: the URL Exec/Attach/PortForward answer, and the requests they got.
        self.streaming_url = "http://127.0.0.1:1/stream"
        self.streaming_requests: list[tuple[str, dict[str, object]]] = []
        self._sandboxes: dict[str, _Sandbox] = {}
        self._containers: dict[str, _Container] = {}
        self._ids = itertools.count(1)
        self._ips = itertools.count(2)
        self._injected: defaultdict[str, deque[CriError]] = defaultdict(deque)
        self._subscribers: list[asyncio.Queue[cri.ContainerEventResponse]] = []
        self.reopened: list[str] = []  # ReopenContainerLog calls, in order
        self.updates: list[tuple[str, cri.LinuxContainerResources]] = []
        self.update_error: str | None = None
        # What ListContainerStats reports per container id: (cpu ns total, working set bytes)
        self.usage: dict[str, tuple[int, int]] = {}
        # ... and its writable layer (bytes, inodes), as containerd's snapshotter measures it
        self.writable: dict[str, tuple[int, int]] = {}
        # Seconds a call of RunPodSandbox or CreateContainer takes before it answers: a
        # runtime under load (the sandbox waiting on CNI, the container on the snapshotter).
        self.latency: dict[str, float] = {}

    # Test controls -------------------------------------------------------------------------

    def inject_error(self, rpc: str, error: CriError) -> None:
        """Make the next call of ``rpc`` (CRI name, e.g. "StartContainer") raise ``error``."""
        self._injected[rpc].append(error)

    def exit_container(
        self, container_id: str, *, exit_code: int, reason: str = "", message: str = ""
    ) -> None:
        """The container's process ends on its own (or is OOM-killed: reason "OOMKilled")."""
        ctr = self._container(container_id, rpc="exit_container")
        self._finish(ctr, exit_code=exit_code, reason=reason, message=message)

    def report_oom(self, container_id: str) -> None:
        """The runtime learns of the OOM kill of a container that has already exited (the
        OOM event reaching containerd after the exit)."""
        ctr = self._container(container_id, rpc="report_oom")
        ctr.reason = "OOMKilled"

    def lose_container(self, container_id: str) -> None:
        """The runtime no longer knows the container's state (CONTAINER_UNKNOWN)."""
        self._container(container_id, rpc="lose_container").state = cri.CONTAINER_UNKNOWN

    @property
    def sandbox_ids(self) -> list[str]:
        return list(self._sandboxes)

    def sandbox_config(self, sandbox_id: str) -> cri.PodSandboxConfig:
        """The config the sandbox was created with (a copy)."""
        return copy.deepcopy(self._sandbox(sandbox_id, rpc="sandbox_config").config)

    @property
    def container_ids(self) -> list[str]:
        return list(self._containers)

    def container_config(self, container_id: str) -> cri.ContainerConfig:
        """The config the container was created with (a copy)."""
        return copy.deepcopy(self._container(container_id, rpc="container_config").config)

    # Helpers -------------------------------------------------------------------------------

    def _enter(self, rpc: str) -> None:
        super()._enter(rpc)
        if self._injected[rpc]:
            raise self._injected[rpc].popleft()

    async def _answer_after(self, rpc: str) -> None:
        if self.latency.get(rpc):
            await asyncio.sleep(self.latency[rpc])

    def _now(self) -> int:
        return int(self._clock.now().timestamp() * 1_000_000_000)

    def _new_id(self, kind: str) -> str:
        return hashlib.sha256(f"{kind}-{next(self._ids)}".encode()).hexdigest()

    def _missing(self, rpc: str, kind: str, object_id: str) -> CriError:
        details = f'an error occurred when try to find {kind} "{object_id}": not found'
        return self._error(rpc, "NotFound", details)

    def _sandbox(self, sandbox_id: str, *, rpc: str) -> _Sandbox:
        if (sandbox := self._sandboxes.get(sandbox_id)) is None:
            raise self._missing(rpc, "sandbox", sandbox_id)
        return sandbox

    def _container(self, container_id: str, *, rpc: str) -> _Container:
        if (ctr := self._containers.get(container_id)) is None:
            raise self._missing(rpc, "container", container_id)
        return ctr

    def _running(self, container_id: str, *, rpc: str) -> _Container:
        """As containerd's Exec and Attach: only a running container streams."""
        ctr = self._container(container_id, rpc=rpc)
        if ctr.state != cri.CONTAINER_RUNNING:
            state = {cri.CONTAINER_CREATED: "CONTAINER_CREATED", cri.CONTAINER_EXITED:
                     "CONTAINER_EXITED"}.get(ctr.state, "CONTAINER_UNKNOWN")  # fmt: skip
            raise self._error(rpc, "Unknown", f"container is in {state} state")
        return ctr

    def _finish(
        self, ctr: _Container, *, exit_code: int, reason: str = "", message: str = ""
    ) -> None:
        if ctr.state == cri.CONTAINER_EXITED:
            return
        ctr.state = cri.CONTAINER_EXITED
        ctr.finished_at = self._now()
        ctr.exit_code = exit_code
        ctr.reason = reason or ("Completed" if exit_code == 0 else "Error")
        ctr.message = message
        self._emit(ctr, cri.CONTAINER_STOPPED_EVENT)

    def _emit(self, ctr: _Container, kind: cri.ContainerEventType) -> None:
        sandbox = self._sandboxes.get(ctr.sandbox_id)
        event = cri.ContainerEventResponse(
            container_id=ctr.id,
            container_event_type=kind,
            created_at=self._now(),
            pod_sandbox_status=self._sandbox_status(sandbox) if sandbox else None,
            containers_statuses=[
                self._container_status(c)
                for c in self._containers.values()
                if c.sandbox_id == ctr.sandbox_id
            ],
        )
        for queue in self._subscribers:
            queue.put_nowait(event)

    def _sandbox_status(self, sb: _Sandbox) -> cri.PodSandboxStatus:
        return cri.PodSandboxStatus(
            id=sb.id,
            metadata=sb.config.metadata,
            state=sb.state,
            created_at=sb.created_at,
            network=cri.PodSandboxNetworkStatus(ip=sb.ip),
            labels=dict(sb.config.labels),
            annotations=dict(sb.config.annotations),
            runtime_handler=sb.runtime_handler,
        )

    def _container_status(self, c: _Container) -> cri.ContainerStatus:
        sandbox = self._sandboxes.get(c.sandbox_id)
        log_dir = sandbox.config.log_directory if sandbox else ""
        log_path = f"{log_dir}/{c.config.log_path}" if log_dir and c.config.log_path else ""
        return cri.ContainerStatus(
            id=c.id,
            metadata=c.config.metadata,
            state=c.state,
            created_at=c.created_at,
            started_at=c.started_at,
            finished_at=c.finished_at,
            exit_code=c.exit_code,
            image=cri.ImageSpec(image=c.config.image.image),
            image_ref=image_ref_of(c.image),
            image_id=c.image.id,
            reason=c.reason,
            message=c.message,
            labels=dict(c.config.labels),
            annotations=dict(c.config.annotations),
            mounts=list(c.config.mounts),
            log_path=log_path,
            resources=cri.ContainerResources(linux=c.config.linux.resources),
        )

    # RuntimeService ------------------------------------------------------------------------

    @property
    def version_info(self) -> cri.VersionResponse:
        """What a connected client learnt from ``Version`` (``RuntimeConnection`` reads it)."""
        return self.version_response

    async def close(self) -> None:
        """Like closing the real client's channel: recorded, nothing else."""
        self.closed += 1

    async def version(self, api_version: str = "v1") -> cri.VersionResponse:
        self._enter("Version")
        return self.version_response

    async def status(self, *, verbose: bool = False) -> cri.StatusResponse:
        self._enter("Status")
        network = cri.RuntimeCondition(type="NetworkReady", status=self.network_ready)
        if not self.network_ready:
            network.reason = "NetworkPluginNotReady"
            network.message = "Network plugin returns error: cni plugin not initialized"
        runtime = cri.RuntimeCondition(type="RuntimeReady", status=self.runtime_ready)
        info = {"config": json.dumps({"sandboxImage": self.sandbox_image})} if verbose else {}
        return cri.StatusResponse(
            status=cri.RuntimeStatus(conditions=[runtime, network]), info=info
        )

    async def runtime_config(self) -> cri.RuntimeConfigResponse:
        self._enter("RuntimeConfig")
        response = cri.RuntimeConfigResponse()
        # The stubs type enum fields as the enum class; on the wire it is a plain int.
        response.linux.cgroup_driver = cast(cri.CgroupDriver, self.cgroup_driver)
        return response

    async def update_runtime_config(self, pod_cidr: str) -> None:
        self._enter("UpdateRuntimeConfig")
        self.pod_cidrs.append(pod_cidr)
        if self.on_pod_cidr is not None:
            self.on_pod_cidr(pod_cidr)

    async def run_pod_sandbox(self, config: cri.PodSandboxConfig, runtime_handler: str = "") -> str:
        self._enter("RunPodSandbox")
        await self._answer_after("RunPodSandbox")
        host_network = config.linux.security_context.namespace_options.network == NODE
        ip = "" if host_network else f"10.88.0.{next(self._ips)}"
        sandbox = _Sandbox(
            id=self._new_id("sandbox"),
            config=copy.deepcopy(config),
            runtime_handler=runtime_handler,
            created_at=self._now(),
            ip=ip,
        )
        self._sandboxes[sandbox.id] = sandbox
        return sandbox.id

    async def stop_pod_sandbox(self, pod_sandbox_id: str) -> None:
        self._enter("StopPodSandbox")
        sandbox = self._sandbox(pod_sandbox_id, rpc="StopPodSandbox")
        for ctr in self._containers.values():
            if ctr.sandbox_id == pod_sandbox_id and ctr.state == cri.CONTAINER_RUNNING:
                self._finish(ctr, exit_code=self.stop_exit_code)
        sandbox.state = cri.SANDBOX_NOTREADY

    async def remove_pod_sandbox(self, pod_sandbox_id: str) -> None:
        self._enter("RemovePodSandbox")
        for ctr in [c for c in self._containers.values() if c.sandbox_id == pod_sandbox_id]:
            self._finish(ctr, exit_code=self.stop_exit_code)
            del self._containers[ctr.id]
            self._emit(ctr, cri.CONTAINER_DELETED_EVENT)
        self._sandboxes.pop(pod_sandbox_id, None)

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, *, verbose: bool = False
    ) -> cri.PodSandboxStatusResponse:
        self._enter("PodSandboxStatus")
        sandbox = self._sandbox(pod_sandbox_id, rpc="PodSandboxStatus")
        return cri.PodSandboxStatusResponse(status=self._sandbox_status(sandbox))

    async def list_pod_sandbox(
        self, filter: cri.PodSandboxFilter | None = None
    ) -> list[cri.PodSandbox]:
        self._enter("ListPodSandbox")
        flt = filter or cri.PodSandboxFilter()
        return [
            cri.PodSandbox(
                id=sb.id,
                metadata=sb.config.metadata,
                state=sb.state,
                created_at=sb.created_at,
                labels=dict(sb.config.labels),
                annotations=dict(sb.config.annotations),
                runtime_handler=sb.runtime_handler,
            )
            for sb in self._sandboxes.values()
            if (not flt.id or flt.id == sb.id)
            and (not flt.HasField("state") or flt.state.state == sb.state)
            and _selects(flt.label_selector, sb.config.labels)
        ]

    async def create_container(
        self,
        pod_sandbox_id: str,
        config: cri.ContainerConfig,
        sandbox_config: cri.PodSandboxConfig,
    ) -> str:
        self._enter("CreateContainer")
        await self._answer_after("CreateContainer")
        sandbox = self._sandbox(pod_sandbox_id, rpc="CreateContainer")
        if sandbox.state != cri.SANDBOX_READY:
            details = f'sandbox "{pod_sandbox_id}" is not ready'
            raise self._error("CreateContainer", "Unknown", details)
        for other in self._containers.values():
            if other.sandbox_id == pod_sandbox_id and other.config.metadata == config.metadata:
                name = f"{config.metadata.name}_{sandbox.config.metadata.name}"
                details = f'failed to reserve container name "{name}": reserved for "{other.id}"'
                raise self._error("CreateContainer", "Unknown", details)
        if (image := self.find_image(config.image.image)) is None:
            details = f'failed to get image "{config.image.image}": not found'
            raise self._error("CreateContainer", "NotFound", details)
        ctr = _Container(
            id=self._new_id("container"),
            sandbox_id=pod_sandbox_id,
            config=copy.deepcopy(config),
            image=image,
            created_at=self._now(),
        )
        self._containers[ctr.id] = ctr
        self._emit(ctr, cri.CONTAINER_CREATED_EVENT)
        return ctr.id

    async def start_container(self, container_id: str) -> None:
        self._enter("StartContainer")
        ctr = self._container(container_id, rpc="StartContainer")
        if ctr.state != cri.CONTAINER_CREATED:
            state = cri.ContainerState.Name(ctr.state)
            raise self._error(
                "StartContainer", "Unknown", f'container "{container_id}" is in {state} state'
            )
        ctr.state = cri.CONTAINER_RUNNING
        ctr.started_at = self._now()
        self._emit(ctr, cri.CONTAINER_STARTED_EVENT)

    async def stop_container(self, container_id: str, grace_period: int) -> None:
        self._enter("StopContainer")
        ctr = self._container(container_id, rpc="StopContainer")
        self.grace_periods[container_id] = grace_period
        if ctr.state == cri.CONTAINER_RUNNING and self.stop_seconds > 0:
            await asyncio.sleep(min(self.stop_seconds, grace_period))
        exit_code = self.stop_exit_code if ctr.state == cri.CONTAINER_RUNNING else 0
        self._finish(ctr, exit_code=exit_code)

    async def update_container_resources(
        self, container_id: str, linux: cri.LinuxContainerResources
    ) -> None:
        """Applies ``linux`` to the container's config (read back in ``ContainerStatus``);
        ``update_error`` (details) makes the call fail as a runtime refusing it would."""
        self._enter("UpdateContainerResources")
        ctr = self._container(container_id, rpc="UpdateContainerResources")
        if ctr.state != cri.CONTAINER_RUNNING:
            raise self._error(
                "UpdateContainerResources", "Unknown", f'container "{container_id}" is not running'
            )
        if self.update_error is not None:
            raise self._error("UpdateContainerResources", "Unknown", self.update_error)
        ctr.config.linux.resources.CopyFrom(linux)
        self.updates.append((container_id, linux))

    async def remove_container(self, container_id: str) -> None:
        self._enter("RemoveContainer")
        ctr = self._containers.pop(container_id, None)
        if ctr is not None:
            self._emit(ctr, cri.CONTAINER_DELETED_EVENT)

    async def list_containers(
        self, filter: cri.ContainerFilter | None = None
    ) -> list[cri.Container]:
        self._enter("ListContainers")
        flt = filter or cri.ContainerFilter()
        return [
            cri.Container(
                id=c.id,
                pod_sandbox_id=c.sandbox_id,
                metadata=c.config.metadata,
                image=cri.ImageSpec(image=c.config.image.image),
                image_ref=image_ref_of(c.image),
                image_id=c.image.id,
                state=c.state,
                created_at=c.created_at,
                labels=dict(c.config.labels),
                annotations=dict(c.config.annotations),
            )
            for c in self._containers.values()
            if (not flt.id or flt.id == c.id)
            and (not flt.pod_sandbox_id or flt.pod_sandbox_id == c.sandbox_id)
            and (not flt.HasField("state") or flt.state.state == c.state)
            and _selects(flt.label_selector, c.config.labels)
        ]

    async def container_status(
        self, container_id: str, *, verbose: bool = False
    ) -> cri.ContainerStatusResponse:
        self._enter("ContainerStatus")
        ctr = self._container(container_id, rpc="ContainerStatus")
        return cri.ContainerStatusResponse(status=self._container_status(ctr))

    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout_seconds: int
    ) -> cri.ExecSyncResponse:
        self._enter("ExecSync")
        ctr = self._container(container_id, rpc="ExecSync")
        if ctr.state != cri.CONTAINER_RUNNING:
            raise self._error(
                "ExecSync", "FailedPrecondition", f'container "{container_id}" is not running'
            )
        return self.exec_handler(container_id, list(cmd))

    async def reopen_container_log(self, container_id: str) -> None:
        self._enter("ReopenContainerLog")
        ctr = self._container(container_id, rpc="ReopenContainerLog")
        if ctr.state != cri.CONTAINER_RUNNING:
            raise self._error(
                "ReopenContainerLog", "FailedPrecondition", "container is not running"
            )
        self.reopened.append(container_id)

    def _stats(self, c: _Container) -> cri.ContainerStats:
        cpu, memory = self.usage.get(c.id, (0, 0))
        used, inodes = self.writable.get(c.id, (0, 0))
        now = self._now()
        return cri.ContainerStats(
            attributes=cri.ContainerAttributes(
                id=c.id,
                metadata=c.config.metadata,
                labels=dict(c.config.labels),
                annotations=dict(c.config.annotations),
            ),
            cpu=cri.CpuUsage(timestamp=now, usage_core_nano_seconds=cri.UInt64Value(value=cpu)),
            memory=cri.MemoryUsage(timestamp=now, working_set_bytes=cri.UInt64Value(value=memory)),
            writable_layer=cri.FilesystemUsage(
                timestamp=now,
                used_bytes=cri.UInt64Value(value=used),
                inodes_used=cri.UInt64Value(value=inodes),
            ),
        )

    async def list_container_stats(
        self, filter: cri.ContainerStatsFilter | None = None
    ) -> list[cri.ContainerStats]:
        self._enter("ListContainerStats")
        return [
            self._stats(c)
            for c in self._containers.values()
            if c.state == cri.CONTAINER_RUNNING
            and (filter is None or not filter.id or filter.id == c.id)
        ]

    async def list_pod_sandbox_stats(
        self, filter: cri.PodSandboxStatsFilter | None = None
    ) -> list[cri.PodSandboxStats]:
        self._enter("ListPodSandboxStats")
        out = []
        for sb in self._sandboxes.values():
            if sb.state != cri.SANDBOX_READY or (filter and filter.id and filter.id != sb.id):
                continue
            stats = [self._stats(c) for c in self._containers.values() if c.sandbox_id == sb.id]
            stats = [
                s for s in stats if self._containers[s.attributes.id].state == cri.CONTAINER_RUNNING
            ]
            now = self._now()
            out.append(
                cri.PodSandboxStats(
                    attributes=cri.PodSandboxAttributes(
                        id=sb.id,
                        metadata=sb.config.metadata,
                        labels=dict(sb.config.labels),
                        annotations=dict(sb.config.annotations),
                    ),
                    linux=cri.LinuxPodSandboxStats(
                        cpu=cri.CpuUsage(
                            timestamp=now,
                            usage_core_nano_seconds=cri.UInt64Value(
                                value=sum(s.cpu.usage_core_nano_seconds.value for s in stats)
                            ),
                        ),
                        memory=cri.MemoryUsage(
                            timestamp=now,
                            working_set_bytes=cri.UInt64Value(
                                value=sum(s.memory.working_set_bytes.value for s in stats)
                            ),
                        ),
                        containers=stats,
                    ),
                )
            )
        return out

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
        self._enter("Exec")
        self._running(container_id, rpc="Exec")
        self.streaming_requests.append(
            (
                "Exec",
                {"container_id": container_id, "cmd": list(cmd), "tty": tty, "stdin": stdin,
                 "stdout": stdout, "stderr": stderr},
            )
        )  # fmt: skip
        return self.streaming_url

    async def attach(
        self, container_id: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool
    ) -> str:
        self._enter("Attach")
        self._running(container_id, rpc="Attach")
        self.streaming_requests.append(
            (
                "Attach",
                {"container_id": container_id, "tty": tty, "stdin": stdin, "stdout": stdout,
                 "stderr": stderr},
            )
        )  # fmt: skip
        return self.streaming_url

    async def port_forward(self, pod_sandbox_id: str, ports: Sequence[int]) -> str:
        self._enter("PortForward")
        self.streaming_requests.append(
            ("PortForward", {"pod_sandbox_id": pod_sandbox_id, "ports": list(ports)})
        )
        return self.streaming_url

    async def get_container_events(self) -> AsyncIterator[cri.ContainerEventResponse]:
        self._enter("GetContainerEvents")
        queue: asyncio.Queue[cri.ContainerEventResponse] = asyncio.Queue()
        self._subscribers.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._subscribers.remove(queue)


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _satisfies_protocols(fake: FakeRuntime) -> tuple[RuntimeService, ImageService]:
    return fake, fake  # mypy checks FakeRuntime against both protocols here
