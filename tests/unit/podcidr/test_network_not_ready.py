"""While the runtime's network is not ready only host-network pods start (the kubelet's
SyncPod): the others wait, with the kubelet's NetworkNotReady Event, and start once it is.
``PodSync`` over ``FakeRuntime`` posting to ``FakeApiServer``, in virtual time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from nodeagent.apiserver import EVENTS, PODS
from nodeagent.events import EventRecorder
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.pods.envsource import ApiEnvSource
from nodeagent.pods.sync import PodSync
from nodeagent.podspec import Pod, decode_pod
from nodeagent.status import StatusManager
from nodeagent.status.manager import PlainDeleter
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX, MemoryFiles, pod_object

pytestmark = pytest.mark.looptime

NODE = "node-a"
NS = "team-a"
SETTINGS = PodRuntimeSettings(
    node_name=NODE,
    pod_logs_dir="/var/log/pods",
    container_logs_dir="/var/log/containers",
    cluster_dns=("10.96.0.10",),
    cluster_domain="cluster.local",
    memory_capacity=8 * 2**30,
)
NETWORK = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady"
    " message:Network plugin returns error: cni plugin not initialized"
)


@dataclass
class Env:
    server: FakeApiServer
    runtime: FakeRuntime
    podsync: PodSync
    network: list[str]

    def seed(self, name: str, **kw: object) -> Pod:
        return decode_pod(self.server.seed(PODS, pod_object(name, namespace=NS, node=NODE, **kw)))

    def events(self, name: str) -> list[tuple[str, str, str]]:
        found = [e for e in self.server.objects(EVENTS) if e["involvedObject"]["name"] == name]
        return [(e["type"], e["reason"], e["message"]) for e in found]


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    server = FakeApiServer()
    runtime = FakeRuntime(clock=server.clock, runtime_name="containerd")
    runtime.add_image(BUSYBOX, size=4_400_000)
    recorder = EventRecorder(api=server, clock=server.clock, node_name=NODE)
    network = [NETWORK]

    async def host_dns() -> ResolvConf:
        return ResolvConf(servers=("192.0.2.53",))

    podsync = PodSync(
        runtime=RuntimeManager(
            runtime=runtime,
            images=runtime,
            settings=SETTINGS,
            clock=server.clock,
            files=MemoryFiles(),
        ),
        status=StatusManager(api=server, deleter=PlainDeleter(api=server)),
        clock=server.clock,
        env=ApiEnvSource(api=server, host_ips=lambda: ("192.0.2.10",), allocatable=dict),
        host_dns=host_dns,
        host_ips=lambda: ("192.0.2.10",),
        events=recorder,
        network_errors=lambda: tuple(network),
    )
    task = asyncio.create_task(recorder.run())
    yield Env(server, runtime, podsync, network)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_pod_waits_for_the_network_with_the_kubelets_event_then_starts(env: Env) -> None:
    web = env.seed("web")
    outcome = await env.podsync.sync_pod(web)
    await asyncio.sleep(0.5)  # the recorder posts in the background
    assert outcome.retry_in == 10.0
    assert env.runtime.calls.count("RunPodSandbox") == 0
    assert env.events("web") == [("Warning", "NetworkNotReady", f"network is not ready: {NETWORK}")]

    env.network.clear()
    await env.podsync.sync_pod(web)
    assert env.runtime.calls.count("RunPodSandbox") == 1


async def test_a_host_network_pod_starts_while_the_network_is_not_ready(env: Env) -> None:
    cni = env.seed("cni", hostNetwork=True)
    await env.podsync.sync_pod(cni)
    await asyncio.sleep(0.5)
    assert env.runtime.calls.count("RunPodSandbox") == 1
    assert [e for e in env.events("cni") if e[1] == "NetworkNotReady"] == []
