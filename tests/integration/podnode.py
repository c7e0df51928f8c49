"""A node running the pod managers on the real containerd, for integration tests.

``running_node(containerd, tmp_path, events=...)`` wires the pod managers as ``pods.managers``
wires them for ``agent.build`` (optionally with an event sink, as ``agent.build`` passes the
node's ``EventRecorder``) against the private containerd of the ``containerd`` fixture; the API
is the in-memory ``FakeApiServer`` on the real clock. Every pod cgroup lives under a per-node
cgroup root that is removed at the end, with the pods' sandboxes.

(``test_pods``, ``test_pod_failures`` and ``agentproc`` share these helpers.)
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from harness.cgroups import remove_cgroup_tree
from harness.fixtures_runtime import RuntimeEnv

from nodeagent.apiserver import PODS
from nodeagent.clock import RealClock
from nodeagent.config import Config
from nodeagent.events import ObjectEventSink
from nodeagent.kuberuntime import CriClient
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_UID
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.pods.managers import PodManagers, pod_managers
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import pod_object

NODE = "it-node"


@dataclass
class Node:
    server: FakeApiServer
    managers: PodManagers
    settings: PodRuntimeSettings
    endpoint: str

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.server.stored(PODS, name, namespace)

    def create(self, name: str, **kw: Any) -> str:
        body = pod_object(name, node=NODE, **kw)
        del body["metadata"]["uid"]
        return str(self.server.seed(PODS, body)["metadata"]["uid"])

    async def runtime_containers(self, uid: str) -> list[cri.Container]:
        async with CriClient.open(self.endpoint) as client:
            flt = cri.ContainerFilter(label_selector={POD_UID: uid})
            return await client.list_containers(flt)

    async def runtime_sandboxes(self, uid: str) -> list[cri.PodSandbox]:
        async with CriClient.open(self.endpoint) as client:
            flt = cri.PodSandboxFilter(label_selector={POD_UID: uid})
            return await client.list_pod_sandbox(flt)


async def until(
    what: str,
    check: Callable[[], Any],
    *,
    within: float,
    every: float = 0.2,
    explain: Callable[[], Any] | None = None,
) -> Any:
    """Poll ``check`` (sync or async) until it is truthy; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            detail = f": {explain()}" if explain else ""
            raise AssertionError(f"timed out after {within:g}s waiting for {what}{detail}")
        await asyncio.sleep(every)


def status_of(pod: dict[str, Any] | None, name: str = "app") -> dict[str, Any]:
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
    return next((s for s in statuses if s["name"] == name), {})


def phase(pod: dict[str, Any] | None) -> str:
    return str((pod or {}).get("status", {}).get("phase", ""))


async def remove_pods_of(endpoint: str, server: FakeApiServer) -> None:
    """Tear down what a test left in containerd (its pods' sandboxes and containers)."""
    uids = {str(p["metadata"]["uid"]) for p in server.objects(PODS)}
    async with CriClient.open(endpoint) as client:
        for sandbox in await client.list_pod_sandbox():
            if sandbox.labels.get(POD_UID) in uids:
                with contextlib.suppress(Exception):
                    await client.stop_pod_sandbox(sandbox.id)
                    await client.remove_pod_sandbox(sandbox.id)


@contextlib.asynccontextmanager
async def running_node(
    containerd: RuntimeEnv,
    tmp_path: Path,
    server: FakeApiServer | None = None,
    *,
    events: ObjectEventSink | None = None,
    configure: Callable[[Config], Config] | None = None,
) -> AsyncIterator[Node]:
    """``configure``: changes to the default configuration (credential plugins, ...)."""
    server = server or FakeApiServer(clock=RealClock())
    cgroup_root = f"na-it-{secrets.token_hex(3)}"
    base = Config()
    config = msgspec.structs.replace(
        base,
        kubelet=msgspec.structs.replace(
            base.kubelet, container_runtime_endpoint=containerd.endpoint, resolv_conf=""
        ),
    )
    if configure is not None:
        config = configure(config)
    settings = PodRuntimeSettings(
        node_name=NODE,
        root_dir=str(tmp_path / "root"),
        pod_logs_dir=str(tmp_path / "pods"),
        container_logs_dir=str(tmp_path / "containers"),
        cluster_dns=("10.96.0.10",),
        cluster_domain="cluster.local",
        node_ips=("192.0.2.10",),
        cgroup_root=f"/{cgroup_root}",
        memory_capacity=8 * 2**30,
    )
    managers = pod_managers(
        config,
        api=server,
        clock=RealClock(),
        node_name=NODE,
        get_node=lambda: None,
        node_ips=("192.0.2.10",),
        settings=settings,
        events=events,
    )
    tasks = [asyncio.create_task(m.run(), name=m.name) for m in managers.managers]
    try:
        yield Node(server, managers, settings, containerd.endpoint)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception():
                raise AssertionError(f"manager {task.get_name()} crashed") from task.exception()
    finally:
        for task in reversed(tasks):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await remove_pods_of(containerd.endpoint, server)
        assert remove_cgroup_tree(cgroup_root) == []
