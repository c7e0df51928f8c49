"""exec/attach/portForward: options from the query, the CRI request, and the byte splice
between the client's upgraded connection and the runtime's streaming server (a fake one on a
local socket)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME, POD_UID
from nodeagent.server import Dependencies, RequestAuth, build_app
from nodeagent.server.auth import AlwaysAllow
from nodeagent.server.streaming import (
    BadOptions,
    StreamingDeps,
    forward_ports,
    stream_options,
)
from nodeagent.server.upgradeaware import StreamOptions
from nodeagent.testing.fake_runtime import FakeRuntime

UID = "uid-web"
POD = {"metadata": {"name": "web", "namespace": "default", "uid": UID}}


def test_stream_options_kubelet_names_and_api_names() -> None:
    assert stream_options({"input": "1", "output": "1", "error": "1"}) == StreamOptions(
        stdin=True, stdout=True, stderr=True, tty=False
    )
    assert stream_options({"stdout": "true"}) == StreamOptions(
        stdin=False, stdout=True, stderr=False, tty=False
    )
    # A TTY has no separate stderr.
    assert stream_options({"output": "1", "error": "1", "tty": "1"}) == StreamOptions(
        stdin=False, stdout=True, stderr=False, tty=True
    )
    with pytest.raises(BadOptions, match="at least 1 of stdin, stdout, stderr"):
        stream_options({"tty": "1"})


def test_forward_ports() -> None:
    assert forward_ports(["80", "8080,9090"]) == [80, 8080, 9090]
    with pytest.raises(BadOptions, match="invalid port 'x'"):
        forward_ports(["x"])
    with pytest.raises(BadOptions, match="port 0 must be > 0"):
        forward_ports(["0"])


class Backend:
    """A streaming server: answers the upgrade, then echoes upper-cased until EOF."""

    def __init__(self, *, refuse: bool = False) -> None:
        self.heads: list[bytes] = []
        self.refuse = refuse
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.heads.append(await reader.readuntil(b"\r\n\r\n"))
        if self.refuse:
            writer.write(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
                b"Content-Length: 12\r\n\r\nbad protocol"
            )
            await writer.drain()
            writer.close()
            return
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
        )
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()
            if data.upper().endswith(b"BYE"):
                break
        writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/exec/token123"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def running_container(runtime: FakeRuntime) -> str:
    sandbox = cri.sandbox_config(name="web", namespace="default", uid=UID)
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="app"),
        image=cri.ImageSpec(image="busybox"),
        labels={CONTAINER_NAME: "app", POD_UID: UID},
    )
    runtime.add_image("busybox")
    cid = await runtime.create_container(sandbox_id, config, sandbox)
    await runtime.start_container(cid)
    return cid


@pytest.fixture
async def server() -> AsyncIterator[tuple[TestServer, FakeRuntime]]:
    runtime = FakeRuntime()
    app = build_app(
        auth=RequestAuth(tokens=None, authorizer=AlwaysAllow(), anonymous=True),
        deps=Dependencies(),
        stream=StreamingDeps(
            runtime=runtime,
            find_pod=lambda ns, name: POD if (ns, name) == ("default", "web") else None,
        ),
    )
    async with TestServer(app) as srv:
        yield srv, runtime


async def raw_request(srv: TestServer, head: str) -> tuple[asyncio.StreamReader, Any, bytes]:
    assert srv.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(head.encode())
    await writer.drain()
    response = await reader.readuntil(b"\r\n\r\n")
    return reader, writer, response


UPGRADE = (
    "Host: node:10250\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
    "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nAuthorization: Bearer secret\r\n"
    "Content-Length: 0\r\n\r\n"
)


async def test_exec_upgrades_and_splices_both_ways(
    server: tuple[TestServer, FakeRuntime],
) -> None:
    srv, runtime = server
    cid = await running_container(runtime)
    backend = Backend()
    async with backend as url:
        runtime.streaming_url = url
        reader, writer, head = await raw_request(
            srv,
            "POST /exec/default/web/app?command=sh&command=-c&command=cat&input=1&output=1"
            f"&error=1 HTTP/1.1\r\n{UPGRADE}",
        )
        assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
        assert b"X-Stream-Protocol-Version: v4.channel.k8s.io" in head
        writer.write(b"hello")
        await writer.drain()
        assert await reader.readexactly(5) == b"HELLO"
        writer.write(b"bye")
        await writer.drain()
        assert await reader.readexactly(3) == b"BYE"
        assert await reader.read() == b""  # the runtime closed: so does the session
        writer.close()
    assert runtime.streaming_requests == [
        (
            "Exec",
            {
                "container_id": cid,
                "cmd": ["sh", "-c", "cat"],
                "tty": False,
                "stdin": True,
                "stdout": True,
                "stderr": True,
            },
        )
    ]
    replayed = backend.heads[0].decode()
    assert replayed.startswith("POST /exec/token123 HTTP/1.1\r\n")
    assert f"Host: {url.split('/')[2]}\r\n" in replayed
    assert "Upgrade: SPDY/3.1" in replayed
    assert "Authorization" not in replayed


async def test_refusal_of_the_runtime_is_relayed(server: tuple[TestServer, FakeRuntime]) -> None:
    srv, runtime = server
    await running_container(runtime)
    async with Backend(refuse=True) as url:
        runtime.streaming_url = url
        reader, writer, head = await raw_request(
            srv, f"POST /attach/default/web/app?output=1 HTTP/1.1\r\n{UPGRADE}"
        )
        assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert b"bad protocol" in await reader.read(100)
        writer.close()
    assert runtime.streaming_requests[0][0] == "Attach"


async def test_port_forward_asks_for_the_pods_sandbox(
    server: tuple[TestServer, FakeRuntime],
) -> None:
    srv, runtime = server
    await running_container(runtime)
    sandbox = (await runtime.list_pod_sandbox())[0]
    async with Backend() as url:
        runtime.streaming_url = url
        _, writer, head = await raw_request(
            srv, f"POST /portForward/default/web?port=8080 HTTP/1.1\r\n{UPGRADE}"
        )
        assert head.startswith(b"HTTP/1.1 101")
        writer.close()
    assert runtime.streaming_requests == [
        ("PortForward", {"pod_sandbox_id": sandbox.id, "ports": [8080]})
    ]


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/exec/default/nope/app?output=1", 404, "pod does not exist\n"),
        ("/exec/default/web/other-uid/app?output=1", 404, "pod does not exist\n"),
        ("/exec/default/web/app", 400, "you must specify at least 1 of stdin, stdout, stderr\n"),
        ("/exec/default/web/missing?output=1", 500, 'container not found ("missing")\n'),
        ("/portForward/default/web?port=x", 400, "invalid port 'x'\n"),
    ],
)
async def test_refused_requests(
    server: tuple[TestServer, FakeRuntime], path: str, status: int, text: str
) -> None:
    srv, runtime = server
    await running_container(runtime)
    reader, writer, head = await raw_request(srv, f"POST {path} HTTP/1.1\r\n{UPGRADE}")
    assert head.startswith(f"HTTP/1.1 {status} ".encode())
    length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
                 .split(b":")[1])  # fmt: skip
    assert (await reader.readexactly(length)).decode() == text
    writer.close()
    assert runtime.streaming_requests == []


async def test_run_answers_the_output_or_the_exit_code(
    server: tuple[TestServer, FakeRuntime],
) -> None:
    srv, runtime = server
    cid = await running_container(runtime)
    calls: list[tuple[str, list[str]]] = []

    def handler(container_id: str, cmd: list[str]) -> cri.ExecSyncResponse:
        calls.append((container_id, cmd))
        code = 3 if cmd[0] == "false" else 0
        return cri.ExecSyncResponse(stdout=b"out\n", stderr=b"err\n", exit_code=code)

    runtime.exec_handler = handler
    async with TestClient(srv) as client:
        resp = await client.post("/run/default/web/app?cmd=echo hi")
        assert (resp.status, await resp.text()) == (200, "out\nerr\n")
        resp = await client.post("/run/default/web/app?cmd=false now")
        assert resp.status == 500
        assert await resp.text() == "command 'false now' exited with 3: out\nerr\n\n"
        resp = await client.post("/run/default/nope/app?cmd=true")
        assert resp.status == 404
    assert calls == [(cid, ["echo", "hi"]), (cid, ["false", "now"])]


def pod_with_status(container_id: str, *, running: bool = True) -> dict[str, Any]:
    state = {"running": {}} if running else {"terminated": {"exitCode": 0}}
    status = {"name": "app", "containerID": f"containerd://{container_id}", "state": state}
    return {**POD, "status": {"containerStatuses": [status]}}


@pytest.fixture
async def with_status() -> AsyncIterator[tuple[TestServer, FakeRuntime, list[dict[str, Any]]]]:
    """A server whose pod is the last of the list the test fills (status included)."""
    runtime, pods = FakeRuntime(), [POD]
    app = build_app(
        auth=RequestAuth(tokens=None, authorizer=AlwaysAllow(), anonymous=True),
        deps=Dependencies(),
        stream=StreamingDeps(runtime=runtime, find_pod=lambda ns, name: pods[-1]),
    )
    async with TestServer(app) as srv:
        yield srv, runtime, pods


async def test_exec_in_the_container_the_status_names_asks_the_runtime_once(
    with_status: tuple[TestServer, FakeRuntime, list[dict[str, Any]]],
) -> None:
    srv, runtime, pods = with_status
    cid = await running_container(runtime)
    pods.append(pod_with_status(cid))
    async with Backend() as url:
        runtime.streaming_url = url
        runtime.calls.clear()
        _, writer, head = await raw_request(
            srv, f"POST /exec/default/web/app?command=true&output=1 HTTP/1.1\r\n{UPGRADE}"
        )
        assert head.startswith(b"HTTP/1.1 101")
        writer.close()
    assert runtime.calls == ["Exec"]
    assert runtime.streaming_requests[0][1]["container_id"] == cid


async def test_a_status_a_restart_behind_falls_back_to_the_runtimes_list(
    with_status: tuple[TestServer, FakeRuntime, list[dict[str, Any]]],
) -> None:
    srv, runtime, pods = with_status
    old = await running_container(runtime)
    await runtime.stop_container(old, 0)
    new = await running_container(runtime)
    pods.append(pod_with_status(old))  # still says the old one runs
    async with Backend() as url:
        runtime.streaming_url = url
        runtime.calls.clear()
        _, writer, head = await raw_request(
            srv, f"POST /attach/default/web/app?output=1 HTTP/1.1\r\n{UPGRADE}"
        )
        assert head.startswith(b"HTTP/1.1 101")
        writer.close()
    assert runtime.calls == ["Attach", "ListContainers", "Attach"]
    assert [r[1]["container_id"] for r in runtime.streaming_requests] == [new]
    # A status that says the container is not running is not used at all.
    pods.append(pod_with_status(new, running=False))
    await runtime.stop_container(new, 0)
    reader, writer, head = await raw_request(
        srv, f"POST /exec/default/web/app?output=1 HTTP/1.1\r\n{UPGRADE}"
    )
    assert head.startswith(b"HTTP/1.1 500")
    assert b'container not found ("app")' in await reader.read(200)
    writer.close()
