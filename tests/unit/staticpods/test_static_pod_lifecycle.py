"""Static pods through the whole pods stack, over the fakes, in virtual time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
from static_stack import NODE, Stack, make_runtime, manifest, static_stack, until

from nodeagent.apiserver import NODES, PODS
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_UID
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_manifests import MemoryManifests
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import pod_object

pytestmark = pytest.mark.looptime

MIRROR = "web-node-a"


def register_node(server: FakeApiServer) -> str:
    return str(server.seed(NODES, {"metadata": {"name": NODE}})["metadata"]["uid"])


def phase(pod: dict[str, Any] | None) -> str:
    return str((pod or {}).get("status", {}).get("phase", ""))


def static_uid(stack: Stack) -> str:
    [pod] = stack.source.items()
    return str(pod["metadata"]["uid"])


async def test_a_static_pod_runs_while_the_api_server_is_down_then_gets_its_mirror_pod() -> None:
    server, runtime, manifests = FakeApiServer(), make_runtime(), MemoryManifests()
    manifests.write("web.yaml", manifest())
    server.set_down(True)
    loop = asyncio.get_running_loop()
    async with static_stack(server, runtime, manifests) as stack:
        [ctr] = await until(stack.running)
        assert loop.time() < 1.5  # first file read, then the next relist
        uid = static_uid(stack)
        assert ctr.labels[POD_UID] == uid
        await asyncio.sleep(30)
        assert server.objects(PODS) == []
        assert stack.mirror_status.held(uid) is not None  # its status waits for a mirror

        server.set_down(False)
        node_uid = register_node(server)
        registered = loop.time()
        mirror = await until(
            lambda: phase(stack.api_pod(MIRROR)) == "Running" and stack.api_pod(MIRROR)
        )
        print(f"mirror Running {loop.time() - registered:.1f}s after the Node was registered")
        assert loop.time() - registered < 32  # the caches' list back-off, then at once

    meta = mirror["metadata"]
    assert meta["annotations"]["kubernetes.io/config.mirror"] == uid
    assert meta["annotations"]["kubernetes.io/config.hash"] == uid
    assert meta["annotations"]["kubernetes.io/config.source"] == "file"
    assert meta["annotations"]["kubernetes.io/config.seen"] == "2026-01-01T00:00:00.000000000Z"
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
    ]
    assert meta["uid"] != uid
    assert mirror["spec"]["nodeName"] == NODE
    [app] = mirror["status"]["containerStatuses"]
    assert app["containerID"] == f"containerd://{ctr.id}"
    assert app["state"]["running"]


@contextlib.asynccontextmanager
async def web_running() -> AsyncIterator[Stack]:
    """A node with the web static pod Running and mirrored. (Not a fixture: fixtures run
    outside looptime's virtual clock, and their timers would never fire in the test.)"""
    server, runtime, manifests = FakeApiServer(), make_runtime(), MemoryManifests()
    register_node(server)
    manifests.write("web.yaml", manifest())
    async with static_stack(server, runtime, manifests) as s:
        await until(lambda: phase(s.api_pod(MIRROR)) == "Running")
        yield s


async def test_a_deleted_mirror_pod_comes_back_and_the_pod_keeps_running() -> None:
    async with web_running() as stack:
        assert stack.server is not None
        [ctr] = await stack.running()
        first = stack.api_pod(MIRROR)
        assert first is not None
        stack.server.remove(PODS, MIRROR, "kube-system")  # kubectl delete pod --force

        again = await until(
            lambda: (p := stack.api_pod(MIRROR)) and phase(p) == "Running" and p, within=5
        )
        assert again["metadata"]["uid"] != first["metadata"]["uid"]
        assert [c.id for c in await stack.running()] == [ctr.id]


async def test_a_mirror_pod_being_deleted_gracefully_is_replaced() -> None:
    async with web_running() as stack:
        assert stack.server is not None
        first = stack.api_pod(MIRROR)
        assert first is not None

        def graceful(obj: dict[str, Any]) -> None:
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"

        stack.server.modify(PODS, MIRROR, graceful, "kube-system")
        again = await until(
            lambda: (
                (p := stack.api_pod(MIRROR))
                and p["metadata"]["uid"] != first["metadata"]["uid"]
                and phase(p) == "Running"
                and p
            ),
            within=5,
        )
        assert "deletionTimestamp" not in again["metadata"]


async def test_removing_the_manifest_stops_the_pod_and_deletes_its_mirror() -> None:
    async with web_running() as stack:
        uid = static_uid(stack)
        stack.manifests.remove("web.yaml")
        loop = asyncio.get_running_loop()
        start = loop.time()
        await until(lambda: stack.api_pod(MIRROR) is None, within=60)
        assert await stack.running(uid) == []
        assert loop.time() - start <= 20 + 5 + 2  # next file check, the grace period, a relist
        assert await stack.runtime.list_pod_sandbox() == []  # cleaned up, not just stopped


async def test_a_changed_manifest_replaces_the_pod_and_its_mirror() -> None:
    async with web_running() as stack:
        old = static_uid(stack)
        mark = len(stack.runtime.calls)
        stack.manifests.write("web.yaml", manifest(command="sleep 7200"))
        new = await until(lambda: (u := static_uid(stack)) != old and u, within=30)

        async def replaced() -> bool:
            running = await stack.running()
            assert len(running) <= 1, "the old and the new pod ran at the same time"
            return [c.labels[POD_UID] for c in running] == [new]

        await until(replaced, within=30)
        calls = stack.runtime.calls[mark:]
        assert calls.index("StopPodSandbox") < calls.index("RunPodSandbox")  # one at a time

        mirror = await until(
            lambda: (
                (p := stack.api_pod(MIRROR))
                and p["metadata"]["annotations"]["kubernetes.io/config.mirror"] == new
                and phase(p) == "Running"
                and p
            ),
            within=30,
        )
        [ctr] = await stack.running()
        assert ctr.labels[POD_UID] == new
        assert mirror["status"]["containerStatuses"][0]["containerID"] == f"containerd://{ctr.id}"
        sandboxes = await stack.runtime.list_pod_sandbox()
        assert {s.labels[POD_UID] for s in sandboxes} == {new}


async def containers_of(runtime: FakeRuntime, uid: str) -> list[cri.Container]:
    return [c for c in await runtime.list_containers() if c.labels.get(POD_UID) == uid]


async def _none(items: Awaitable[list[Any]]) -> bool:
    return not await items


async def test_after_a_restart_the_static_pod_is_adopted_and_only_orphans_are_removed() -> None:
    server, runtime, manifests = FakeApiServer(), make_runtime(), MemoryManifests()
    register_node(server)
    manifests.write("web.yaml", manifest())
    body = pod_object("api-web", node=NODE, grace=1)
    del body["metadata"]["uid"]
    api_uid = server.seed(PODS, body)["metadata"]["uid"]
    async with static_stack(server, runtime, manifests) as stack:
        await until(lambda: stack.running(api_uid))
        uid = static_uid(stack)
        [static_ctr] = await until(lambda: stack.running(uid))

    server.remove(PODS, "api-web", "default")  # deleted while the agent was down
    async with static_stack(server, runtime, manifests) as stack:
        await until(lambda: _none(containers_of(runtime, api_uid)), within=60)
        await asyncio.sleep(30)  # fifteen more housekeepings
        assert [c.id for c in await stack.running()] == [static_ctr.id]
        assert await containers_of(runtime, api_uid) == []
        assert {s.labels[POD_UID] for s in await runtime.list_pod_sandbox()} == {uid}


async def test_a_standalone_node_runs_static_pods_and_keeps_their_status_local() -> None:
    runtime, manifests = make_runtime(), MemoryManifests()
    manifests.write("web.yaml", manifest())
    async with static_stack(None, runtime, manifests) as stack:
        [ctr] = await until(stack.running)
        uid = static_uid(stack)
        held = await until(
            lambda: (h := stack.mirror_status.held(uid)) and h["status"]["phase"] == "Running" and h
        )
        await asyncio.sleep(60)
        assert [c.id for c in await stack.running()] == [ctr.id]
    assert held["status"]["containerStatuses"][0]["containerID"] == f"containerd://{ctr.id}"
