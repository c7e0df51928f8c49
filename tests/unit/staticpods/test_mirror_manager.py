"""The mirror pod manager against the fake API server, in virtual time: failures, retries and
pods in the way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from static_stack import NODE, manifest, until

from nodeagent.apiserver import NODES, PODS, Forbidden, ServerError, WatchCache
from nodeagent.log.facade import record_fields
from nodeagent.staticpods import FileSource, MirrorPods
from nodeagent.status.manager import PlainDeleter
from nodeagent.testing.fake_apiserver import FakeApiServer, LoopClock
from nodeagent.testing.fake_manifests import DIRECTORY, MemoryManifests

pytestmark = pytest.mark.looptime

MIRROR = "web-node-a"


@contextlib.asynccontextmanager
async def mirrors(
    server: FakeApiServer, manifests: MemoryManifests, terminating: set[str] | None = None
) -> AsyncIterator[FileSource]:
    source = FileSource(path=DIRECTORY, node_name=NODE, clock=LoopClock(), reader=manifests)
    pods = WatchCache(api=server, resource=PODS, field_selector=f"spec.nodeName={NODE}")
    nodes = WatchCache(api=server, resource=NODES, field_selector=f"metadata.name={NODE}")
    manager = MirrorPods(
        api=server,
        deleter=PlainDeleter(api=server),
        node_name=NODE,
        statics=source,
        api_pods=pods,
        get_node=lambda: nodes.get(NODE),
        terminating=lambda uid: uid in (terminating or set()),
    )
    tasks = [asyncio.create_task(r()) for r in (source.run, pods.run, nodes.run, manager.run)]
    try:
        yield source
    finally:
        for task in reversed(tasks):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def new_server() -> FakeApiServer:
    server = FakeApiServer()
    server.seed(NODES, {"metadata": {"name": NODE}})
    return server


def mirror(server: FakeApiServer) -> dict[str, Any] | None:
    return server.stored(PODS, MIRROR, "kube-system")


async def test_a_refused_mirror_pod_is_retried_with_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, manifests = new_server(), MemoryManifests()
    manifests.write("web.yaml", manifest())
    server.react("create", "pods", Forbidden("pod is forbidden"), ServerError("etcd"), times=1)
    async with mirrors(server, manifests):
        await until(lambda: mirror(server))
    creates = [c.at for c in server.calls_to("create", "pods")]
    assert creates == pytest.approx([creates[0], creates[0] + 1, creates[0] + 3])
    failures = [r for r in caplog.records if r.getMessage() == "Failed creating a mirror pod"]
    assert [record_fields(r)["error"] for r in failures] == [
        "pod is forbidden (403 )",
        "etcd (500 )",
    ]


async def test_an_api_pod_with_the_static_pods_name_is_left_alone_and_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, manifests = new_server(), MemoryManifests()
    squatter = {
        "metadata": {"name": MIRROR, "namespace": "kube-system"},
        "spec": {"nodeName": NODE, "containers": [{"name": "x", "image": "x"}]},
    }
    uid = server.seed(PODS, squatter)["metadata"]["uid"]
    manifests.write("web.yaml", manifest())
    async with mirrors(server, manifests):
        await asyncio.sleep(300)
    pod = mirror(server)
    assert pod is not None and pod["metadata"]["uid"] == uid
    assert server.calls_to("delete", "pods") == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "Cannot create the mirror pod: an API pod that is not a mirror pod has its name"
    ]


async def test_the_mirror_of_a_removed_static_pod_stays_until_the_pod_has_terminated() -> None:
    server, manifests = new_server(), MemoryManifests()
    manifests.write("web.yaml", manifest())
    terminating: set[str] = set()
    async with mirrors(server, manifests, terminating) as source:
        created = await until(lambda: mirror(server))
        [static] = source.items()
        terminating.add(static["metadata"]["uid"])
        manifests.remove("web.yaml")
        await until(lambda: not source.items(), within=21)
        await asyncio.sleep(10)
        assert mirror(server) == created
        terminating.clear()
        loop = asyncio.get_running_loop()
        done = loop.time()
        await until(lambda: mirror(server) is None, within=2)
        assert loop.time() - done <= 1.1  # looked at again every second


async def test_no_mirror_pod_without_the_node_and_one_as_soon_as_it_registers() -> None:
    server, manifests = FakeApiServer(), MemoryManifests()
    manifests.write("web.yaml", manifest())
    async with mirrors(server, manifests):
        await asyncio.sleep(30)
        assert server.calls_to("create", "pods") == []
        server.seed(NODES, {"metadata": {"name": NODE}})
        loop = asyncio.get_running_loop()
        registered = loop.time()
        await until(lambda: mirror(server))
        assert loop.time() - registered <= 1.1
