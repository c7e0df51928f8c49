"""``/runningpods/``: what the runtime runs, in the kubelet's ``PodList`` shape, from the
runtime (a pod gone from the API is still listed while it runs; a stopped one is not)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from nodeagent.clock import FrozenClock
from nodeagent.kuberuntime import CriError
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME, POD_NAME, POD_NAMESPACE, POD_UID
from nodeagent.server import Dependencies, RequestAuth, build_app
from nodeagent.server.attributes import request_attributes
from nodeagent.server.auth import AlwaysAllow
from nodeagent.server.streaming import StreamingDeps
from nodeagent.testing.fake_runtime import FakeRuntime

Client = TestClient[Any, Any]
Served = tuple[Client, FakeRuntime, FrozenClock]


async def start_pod(
    runtime: FakeRuntime, clock: FrozenClock, name: str, uid: str, *containers: str
) -> str:
    clock.advance(1)  # each pod (and container) a second after the one before
    sandbox = cri.sandbox_config(name=name, namespace="default", uid=uid)
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    for container in containers:
        runtime.add_image("busybox")
        config = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=container),
            image=cri.ImageSpec(image="busybox"),
            labels={
                CONTAINER_NAME: container,
                POD_NAME: name,
                POD_NAMESPACE: "default",
                POD_UID: uid,
            },
        )
        clock.advance(1)
        cid = await runtime.create_container(sandbox_id, config, sandbox)
        await runtime.start_container(cid)
    return sandbox_id


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    clock = FrozenClock()
    runtime = FakeRuntime(clock=clock)
    app = build_app(
        auth=RequestAuth(tokens=None, authorizer=AlwaysAllow(), anonymous=True),
        deps=Dependencies(),  # no API pods at all: the list comes from the runtime
        stream=StreamingDeps(runtime=runtime, find_pod=lambda ns, name: None),
    )
    async with TestClient(TestServer(app)) as client:
        yield client, runtime, clock


async def test_no_pods_is_a_pod_list_with_null_items(served: Served) -> None:
    client, _, _ = served
    r = await client.get("/runningpods/")
    assert r.headers["Content-Type"] == "application/json"
    assert await r.json() == {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": None}


async def test_running_pods_in_the_kubelets_shape(served: Served) -> None:
    client, runtime, clock = served
    await start_pod(runtime, clock, "old", "uid-old", "app")
    await start_pod(runtime, clock, "web", "uid-web", "app", "sidecar")
    gone = await start_pod(runtime, clock, "stopped", "uid-stopped", "app")
    await runtime.stop_pod_sandbox(gone)
    for path in ("/runningpods/", "/runningpods"):
        body = await (await client.get(path)).json()
        assert body["items"] == [
            {
                "metadata": {
                    "name": "web",
                    "namespace": "default",
                    "uid": "uid-web",
                    "creationTimestamp": None,
                },
                "spec": {
                    "containers": [
                        {"name": "sidecar", "image": "busybox", "resources": {}},
                        {"name": "app", "image": "busybox", "resources": {}},
                    ]
                },
                "status": {},
            },
            {
                "metadata": {
                    "name": "old",
                    "namespace": "default",
                    "uid": "uid-old",
                    "creationTimestamp": None,
                },
                "spec": {"containers": [{"name": "app", "image": "busybox", "resources": {}}]},
                "status": {},
            },
        ]


async def test_a_runtime_error_is_a_500(served: Served) -> None:
    client, runtime, _ = served
    runtime.inject_error("ListPodSandbox", CriError("runtime down", rpc="ListPodSandbox"))
    r = await client.get("/runningpods/")
    assert r.status == 500
    assert "runtime down" in await r.text()


def test_authorized_as_nodes_pods_then_proxy() -> None:
    attrs = request_attributes("GET", "/runningpods/", "node-a")
    assert [(a.verb, a.subresource) for a in attrs] == [("get", "pods"), ("get", "proxy")]
