"""``/containerLogs`` over HTTP on the fake runtime: the kubelet's errors and the log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nodeagent.clock import FrozenClock
from nodeagent.containerlogs.http import LOGS, routes
from nodeagent.containerlogs.service import ContainerLogs, LogRequestError, choose_container
from nodeagent.kuberuntime import types as cri
from nodeagent.testing.fake_runtime import FakeRuntime

IMAGE = "localhost:5000/busybox:1.36"


def pod(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "app"}]},
        "status": {"containerStatuses": [{"name": "app", **status}]},
    }


@pytest.mark.parametrize(
    ("status", "previous", "message"),
    [
        (
            {"state": {"waiting": {"reason": "ContainerCreating"}}},
            False,
            'container "app" in pod "web" is waiting to start: ContainerCreating',
        ),
        (
            {"state": {"waiting": {"reason": "ErrImagePull"}}},
            False,
            'container "app" in pod "web" is waiting to start: image can\'t be pulled',
        ),
        (
            {"state": {"running": {}}, "containerID": "containerd://b"},
            True,
            'previous terminated container "app" in pod "web" not found',
        ),
        ({}, False, 'container "app" in pod "web" is waiting to start - no logs yet'),
    ],
)
def test_kubelet_messages(status: dict[str, Any], previous: bool, message: str) -> None:
    with pytest.raises(LogRequestError) as err:
        choose_container(pod(status), "app", previous=previous)
    assert str(err.value) == message
    assert err.value.status == 400


def test_previous_and_current_instances() -> None:
    p = pod(
        {
            "containerID": "containerd://b",
            "state": {"running": {}},
            "lastState": {"terminated": {"containerID": "containerd://a"}},
        }
    )
    assert choose_container(p, "app", previous=False) == "b"
    assert choose_container(p, "app", previous=True) == "a"


Served = tuple[TestClient[Any, Any], Path, Callable[[], Awaitable[None]]]
"""The client, the pods' log directory, and a way to stop the container."""


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    runtime = FakeRuntime()
    runtime.publish(IMAGE)
    await runtime.pull_image(IMAGE)
    sandbox = cri.sandbox_config(
        name="web", namespace="default", uid="u1", log_directory=str(tmp_path)
    )
    sid = await runtime.run_pod_sandbox(sandbox)
    cid = await runtime.create_container(
        sid,
        cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="app"),
            image=cri.ImageSpec(image=IMAGE),
            log_path="app/0.log",
        ),
        sandbox,
    )
    await runtime.start_container(cid)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "0.log").write_text(
        "2026-11-25T04:00:01Z stdout F hello\n2026-11-25T04:00:02Z stderr F world\n"
    )
    pods = {
        ("default", "web"): pod({"containerID": f"containerd://{cid}", "state": {"running": {}}})
    }
    app = web.Application()
    app.add_routes(routes)
    app[LOGS] = ContainerLogs(
        runtime=runtime, pods=lambda ns, name: pods.get((ns, name)), clock=FrozenClock()
    )

    async def stop() -> None:
        await runtime.stop_container(cid, 0)

    async with TestClient(TestServer(app)) as client:
        yield client, tmp_path, stop


async def test_the_log_and_the_errors_over_http(served: Served) -> None:
    client, _, _ = served
    r = await client.get("/containerLogs/default/web/app")
    assert (r.status, await r.text()) == (200, "hello\nworld\n")
    r = await client.get("/containerLogs/default/web/app?timestamps=true&stream=Stderr")
    assert await r.text() == "2026-11-25T04:00:02.000000000Z world\n"
    r = await client.get("/containerLogs/default/nope/app")
    assert (r.status, await r.text()) == (404, 'pod "nope" does not exist\n')
    r = await client.get("/containerLogs/default/web/other")
    assert (r.status, await r.text()) == (404, 'container "other" not found in pod "web"\n')
    r = await client.get("/containerLogs/default/web/app?tailLines=-2")
    assert r.status == 400
    assert "tailLines: Invalid value: -2" in await r.text()


async def test_a_followed_log_streams_appended_lines_as_valid_chunks(served: Served) -> None:
    """``follow=true`` over a real connection: the history, then each appended line as it is
    written (those go out from the follower's inotify callback), all in one well-formed chunked
    body (the client's parser checks the framing) that ends when the container stops."""
    client, logs, stop = served
    log = logs / "app" / "0.log"
    r = await client.get("/containerLogs/default/web/app?follow=true")
    assert r.status == 200
    assert r.headers["Transfer-Encoding"] == "chunked"
    assert await r.content.readline() == b"hello\n"
    assert await r.content.readline() == b"world\n"
    for n in range(3):
        with log.open("a") as f:
            f.write(f"2026-11-25T04:00:1{n}Z stdout F line {n}\n")
        async with asyncio.timeout(5):
            assert await r.content.readline() == f"line {n}\n".encode()
    with log.open("a") as f:
        f.write("2026-11-25T04:00:20Z stdout P last \n2026-11-25T04:00:20Z stdout F words\n")
    async with asyncio.timeout(5):
        assert await r.content.readline() == b"last words\n"
    await stop()
    async with asyncio.timeout(10):
        assert await r.content.read() == b""  # the terminating chunk came
    assert r.content.at_eof()
