"""The pods stack (source, PLEG, workers, runtime manager, status) over the fakes, in virtual
time, wired by the daemon's own ``nodeagent.pods.pipeline.wire_pods``: ``FakeApiServer`` for
the API and ``FakeRuntime`` for containerd, both on the event loop's clock, so back-off
timings are exact."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.allocation import AllocationManager
from nodeagent.apiserver import NODES, PODS, WatchCache
from nodeagent.events import ObjectEventSink
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.pods.pipeline import wire_pods
from nodeagent.pods.sync import PodCgroups, PodSync
from nodeagent.pods.syncloop import (
    ALL_SAFE_SYSCTLS,
    SyncLoop,
)
from nodeagent.pods.workers import PodWorkers
from nodeagent.prober import ProbeIO, ProberManager
from nodeagent.status import StatusManager
from nodeagent.sysctl import Allowlist
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX, MemoryFiles
from nodeagent.volumemanager.manager import VolumeManager

NODE = "node-a"
HOST_IP = "192.0.2.10"
SETTINGS = PodRuntimeSettings(
    node_name=NODE,
    pod_logs_dir="/var/log/pods",
    container_logs_dir="/var/log/containers",
    cluster_dns=("10.96.0.10",),
    cluster_domain="cluster.local",
    memory_capacity=8 * 2**30,
)


@dataclass
class Stack:
    server: FakeApiServer
    runtime: FakeRuntime
    files: MemoryFiles
    status: StatusManager
    sync_loop: SyncLoop
    prober: ProberManager
    workers: PodWorkers | None = None
    podsync: PodSync | None = None
    allocation: AllocationManager | None = None
    manager: RuntimeManager | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.server.stored(PODS, name, namespace)

    async def containers(self, name: str | None = None) -> list[cri.ContainerStatus]:
        """Every container the runtime has (of container ``name``), oldest first."""
        out = []
        for listed in await self.runtime.list_containers():
            if name is None or listed.metadata.name == name:
                out.append((await self.runtime.container_status(listed.id)).status)
        return sorted(out, key=lambda s: s.created_at)

    async def running(self, name: str) -> list[cri.ContainerStatus]:
        return [c for c in await self.containers(name) if c.state == cri.CONTAINER_RUNNING]


async def until(check: Callable[[], Any], *, within: float = 30.0, every: float = 0.1) -> Any:
    """Poll in virtual time until ``check()`` (or what it returns, when awaitable) is truthy;
    fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(every)


def make_runtime(server: FakeApiServer) -> FakeRuntime:
    runtime = FakeRuntime(clock=server.clock, runtime_name="containerd")
    runtime.add_image(BUSYBOX)
    return runtime


@contextlib.asynccontextmanager
async def running_stack(
    server: FakeApiServer,
    runtime: FakeRuntime,
    files: MemoryFiles | None = None,
    *,
    volumes: VolumeManager | None = None,
    events: ObjectEventSink | None = None,
    shutting_down: Callable[[], bool] = lambda: False,
    cgroups: PodCgroups | None = None,
    allocation: bool = False,
    allocation_checkpoint: Path | None = None,
    sysctls: Allowlist = ALL_SAFE_SYSCTLS,
) -> AsyncIterator[Stack]:
    files = files or MemoryFiles()
    clock = server.clock
    cache = WatchCache(
        api=server, resource=PODS, field_selector=f"spec.nodeName={NODE}", name="cache:pods"
    )
    node_cache = WatchCache(api=server, resource=NODES, field_selector=f"metadata.name={NODE}")

    async def host_dns() -> ResolvConf:
        return ResolvConf(servers=("192.0.2.53",))

    pipeline = wire_pods(
        node_name=NODE,
        clock=clock,
        settings=SETTINGS,
        runtime=runtime,
        api=server,
        pods_cache=cache,
        static_pods=None,
        get_node=lambda: node_cache.get(NODE),
        node_ips=(HOST_IP,),
        probe_io=ProbeIO(runtime=runtime, user_agent="kube-probe/1.36"),
        host_dns=host_dns,
        files=files,
        volumes=volumes,
        cgroups=cgroups,
        allocation=allocation,
        events=events,
        shutting_down=shutting_down,
        allocation_state=allocation_checkpoint,
        sysctls=sysctls,
    )
    sync_loop, prober = pipeline.sync_loop, pipeline.prober
    stack = Stack(
        server,
        runtime,
        files,
        pipeline.status,
        sync_loop,
        prober,
        pipeline.workers,
        pipeline.podsync,
        allocation=pipeline.allocation,
        manager=pipeline.runtime,
    )
    for runner in (cache.run, node_cache.run, sync_loop.run, prober.run):
        stack.tasks.append(asyncio.create_task(runner()))
    try:
        yield stack
        for task in stack.tasks:
            if task.done() and not task.cancelled() and task.exception():
                raise AssertionError("a manager crashed") from task.exception()
    finally:
        # The sync loop first: once it is stopped nothing writes to the fake API, so no
        # watch event can race with the caches' cancellation (3.11's wait_for, used by the
        # fake's watch, swallows a cancellation that arrives together with a result).
        for task in reversed(stack.tasks):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
