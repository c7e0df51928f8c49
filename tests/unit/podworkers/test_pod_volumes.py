"""Volumes in the pod sync, over the fakes: a pod whose volume cannot be set up waits in
ContainerCreating with the kubelet's FailedMount Event and starts once it can; containers get
their mounts; the pod directory goes with the pod."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pod_stack import NODE, Stack, running_stack, until

from nodeagent.apiserver import PODS
from nodeagent.events import ObjectReference
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.fake_volumes import FakeContentSource, FakeMounter
from nodeagent.testing.pods import container, pod_object
from nodeagent.volumemanager.manager import VolumeManager

pytestmark = pytest.mark.looptime


@dataclass
class Events:
    seen: list[tuple[str, str, str, str]] = field(default_factory=list)

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        self.seen.append((ref.name, type, reason, message))


@dataclass
class VolumeStack:
    stack: Stack
    events: Events
    content: FakeContentSource
    mounter: FakeMounter
    root: Path


@pytest.fixture
async def vstack(
    server: FakeApiServer, runtime: FakeRuntime, tmp_path: Path
) -> AsyncIterator[VolumeStack]:
    events, content, mounter = Events(), FakeContentSource(), FakeMounter()
    volumes = VolumeManager(root_dir=str(tmp_path / "root"), content=content, mounter=mounter)
    async with running_stack(server, runtime, volumes=volumes, events=events) as stack:
        yield VolumeStack(stack, events, content, mounter, tmp_path / "root")


def seed(server: FakeApiServer, name: str, **kw: Any) -> str:
    body = pod_object(name, node=NODE, **kw)
    del body["metadata"]["uid"]
    return str(server.seed(PODS, body)["metadata"]["uid"])


def waiting(pod: dict[str, Any] | None) -> dict[str, Any]:
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
    return dict(statuses[0].get("state", {}).get("waiting", {}))


async def test_a_failing_volume_waits_with_failed_mount_then_starts(vstack: VolumeStack) -> None:
    s = vstack.stack
    vstack.content.failures = {"cfg": 'configmap "settings" not found'}
    uid = seed(
        s.server,
        "web",
        volumes=[{"name": "cfg", "configMap": {"name": "settings"}}],
        containers=[
            container("app", volumeMounts=[{"name": "cfg", "mountPath": "/etc/cfg"}]),
        ],
    )
    message = 'MountVolume.SetUp failed for volume "cfg" : configmap "settings" not found'
    await until(lambda: ("web", "Warning", "FailedMount", message) in vstack.events.seen)
    await until(lambda: waiting(s.pod("web")).get("reason") == "ContainerCreating")
    assert await s.runtime.list_pod_sandbox() == []
    attempts = len(vstack.content.calls)
    del vstack.content.failures["cfg"]
    [app] = await until(lambda: s.running("app"))
    assert len(vstack.content.calls) > attempts
    [mount] = [m for m in app.mounts if m.container_path == "/etc/cfg"]
    assert mount.host_path == str(
        vstack.root / "pods" / uid / "volumes" / "kubernetes.io~configmap" / "cfg"
    )
    assert mount.readonly


async def test_an_unsupported_volume_never_starts_the_pod(vstack: VolumeStack) -> None:
    s = vstack.stack
    seed(s.server, "db", volumes=[{"name": "data", "csi": {"driver": "x"}}])
    message = (
        'MountVolume.SetUp failed for volume "data" : '
        'volume source "csi" is not supported on this node'
    )
    await until(lambda: ("db", "Warning", "FailedMount", message) in vstack.events.seen)
    await until(lambda: waiting(s.pod("db")).get("reason") == "ContainerCreating", within=60)
    assert await s.runtime.list_containers() == []


async def test_the_pod_directory_goes_with_the_pod(vstack: VolumeStack) -> None:
    s = vstack.stack
    uid = seed(s.server, "web", volumes=[{"name": "m", "emptyDir": {"medium": "Memory"}}])
    await until(lambda: s.running("app"))
    pod_dir = vstack.root / "pods" / uid
    assert pod_dir.is_dir() and len(vstack.mounter.tmpfs) == 1
    s.server.remove(PODS, "web", "default")
    await until(lambda: not pod_dir.exists())
    assert vstack.mounter.tmpfs == {}


async def test_housekeeping_removes_a_pod_directory_no_pod_owns(vstack: VolumeStack) -> None:
    orphan = vstack.root / "pods" / "orphan-uid" / "volumes" / "kubernetes.io~empty-dir" / "m"
    orphan.mkdir(parents=True)
    vstack.mounter.tmpfs[str(orphan)] = None
    await until(lambda: not (vstack.root / "pods" / "orphan-uid").exists())
    assert vstack.mounter.tmpfs == {}


async def test_a_terminated_pod_loses_its_volumes_and_keeps_its_directory(
    vstack: VolumeStack,
) -> None:
    s = vstack.stack
    uid = seed(
        s.server,
        "job",
        restart_policy="Never",
        volumes=[{"name": "m", "emptyDir": {"medium": "Memory"}}, {"name": "d", "emptyDir": {}}],
    )
    [ctr] = await until(lambda: s.running("app"))
    pod_dir = vstack.root / "pods" / uid
    assert (pod_dir / "volumes").is_dir() and vstack.mounter.tmpfs
    s.runtime.exit_container(ctr.id, exit_code=0)
    await until(lambda: (s.pod("job") or {}).get("status", {}).get("phase") == "Succeeded")
    await until(lambda: not (pod_dir / "volumes").exists())
    assert vstack.mounter.tmpfs == {}
    await asyncio.sleep(5)  # housekeeping ran: the pod is still in the API
    assert pod_dir.is_dir()  # until the pod leaves the API, as the kubelet
    s.server.remove(PODS, "job", "default")
    await until(lambda: not pod_dir.exists())


async def test_content_is_refreshed_in_a_running_pod_within_the_sync_period(
    vstack: VolumeStack,
) -> None:
    s = vstack.stack
    vstack.content.files = {"cfg": {"greeting": "v1"}}
    uid = seed(
        s.server,
        "web",
        volumes=[{"name": "cfg", "configMap": {"name": "settings"}}],
        containers=[container("app", volumeMounts=[{"name": "cfg", "mountPath": "/etc/cfg"}])],
    )
    await until(lambda: s.running("app"))
    greeting = (
        vstack.root / "pods" / uid / "volumes" / "kubernetes.io~configmap" / "cfg" / "greeting"
    )
    assert greeting.read_text() == "v1"
    vstack.content.files = {"cfg": {"greeting": "v2"}}
    loop = asyncio.get_running_loop()
    changed_at = loop.time()
    await until(lambda: greeting.read_text() == "v2", within=90)
    assert loop.time() - changed_at <= 61  # syncFrequency: every running pod is synced each 60s
    assert len(await s.running("app")) == 1  # the container kept running
