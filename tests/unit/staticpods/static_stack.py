"""The pods stack with static pods over the fakes in virtual time, wired by the daemon's own
``nodeagent.pods.pipeline.wire_pods``: ``MemoryManifests`` for the manifest directory,
``FakeApiServer`` for the API (``None``: a standalone node) and ``FakeRuntime`` for
containerd."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from nodeagent.apiserver import NODES, PODS, WatchCache
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_UID
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.pods.pipeline import wire_pods
from nodeagent.pods.syncloop import SyncLoop
from nodeagent.staticpods import FileSource, MirrorStatusApi
from nodeagent.testing.fake_apiserver import FakeApiServer, LoopClock
from nodeagent.testing.fake_manifests import DIRECTORY, MemoryManifests
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX, MemoryFiles

NODE = "node-a"
SETTINGS = PodRuntimeSettings(
    node_name=NODE,
    pod_logs_dir="/var/log/pods",
    container_logs_dir="/var/log/containers",
    memory_capacity=8 * 2**30,
)


def manifest(name: str = "web", command: str = "sleep 3600", grace: int = 5) -> str:
    return (
        "apiVersion: v1\nkind: Pod\n"
        f"metadata: {{name: {name}, namespace: kube-system}}\n"
        f"spec:\n  terminationGracePeriodSeconds: {grace}\n  containers:\n"
        f"  - {{name: app, image: {BUSYBOX}, imagePullPolicy: IfNotPresent,"
        f" command: [sh, -c, '{command}']}}\n"
    )


@dataclass
class Stack:
    server: FakeApiServer | None
    runtime: FakeRuntime
    manifests: MemoryManifests
    source: FileSource
    mirror_status: MirrorStatusApi
    sync_loop: SyncLoop
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def api_pod(self, name: str, namespace: str = "kube-system") -> dict[str, Any] | None:
        assert self.server is not None
        return self.server.stored(PODS, name, namespace)

    async def running(self, uid: str | None = None) -> list[cri.Container]:
        """Running containers (of pod ``uid``)."""
        return [
            c
            for c in await self.runtime.list_containers()
            if c.state == cri.CONTAINER_RUNNING and (uid is None or c.labels.get(POD_UID) == uid)
        ]


async def until(check: Callable[[], Any], *, within: float = 60.0, every: float = 0.1) -> Any:
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


def make_runtime() -> FakeRuntime:
    runtime = FakeRuntime(clock=LoopClock(), runtime_name="containerd")
    runtime.add_image(BUSYBOX)
    return runtime


@contextlib.asynccontextmanager
async def static_stack(
    server: FakeApiServer | None, runtime: FakeRuntime, manifests: MemoryManifests
) -> AsyncIterator[Stack]:
    clock = LoopClock()
    source = FileSource(path=DIRECTORY, node_name=NODE, clock=clock, reader=manifests)
    pods_cache = node_cache = None
    if server is not None:
        pods_cache = WatchCache(api=server, resource=PODS, field_selector=f"spec.nodeName={NODE}")
        node_cache = WatchCache(api=server, resource=NODES, field_selector=f"metadata.name={NODE}")

    def get_node() -> dict[str, Any] | None:
        return node_cache.get(NODE) if node_cache is not None else None

    async def host_dns() -> ResolvConf:
        return ResolvConf(servers=("192.0.2.53",))

    pipeline = wire_pods(
        node_name=NODE,
        clock=clock,
        settings=SETTINGS,
        runtime=runtime,
        api=server,
        pods_cache=pods_cache,
        static_pods=source,
        get_node=get_node,
        host_dns=host_dns,
        files=MemoryFiles(),
        allocation=False,
    )
    sync_loop, mirror_status = pipeline.sync_loop, pipeline.mirror_status
    assert mirror_status is not None
    runners: list[Callable[[], Any]] = [source.run, sync_loop.run]
    if pods_cache is not None and node_cache is not None and pipeline.mirrors is not None:
        runners = [pods_cache.run, node_cache.run, *runners, pipeline.mirrors.run]
    stack = Stack(server, runtime, manifests, source, mirror_status, sync_loop)
    for runner in runners:
        stack.tasks.append(asyncio.create_task(runner()))
    try:
        yield stack
        for task in stack.tasks:
            if task.done() and not task.cancelled() and task.exception():
                raise AssertionError("a manager crashed") from task.exception()
    finally:
        for task in reversed(stack.tasks):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
