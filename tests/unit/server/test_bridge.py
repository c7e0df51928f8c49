"""The WebSockets the apiserver passes through once the node declares
``ExtendWebSocketsToKubelet``: what a ``v5.channel.k8s.io`` or port-forward tunneling client
receives from the kubelet API, and what the runtime's streaming server (a fake on a local
socket, speaking WebSocket ``v4`` or SPDY) is sent."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME, POD_UID
from nodeagent.server import Dependencies, RequestAuth, build_app, wire
from nodeagent.server.auth import AlwaysAllow
from nodeagent.server.streaming import StreamingDeps
from nodeagent.testing.fake_runtime import FakeRuntime

KEY = b"\x11\x22\x33\x44"
UID = "uid-web"
POD = {"metadata": {"name": "web", "namespace": "default", "uid": UID}}
SUCCESS = b'{"metadata":{},"status":"Success"}'

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]]


class Runtime:
    """A streaming server: records each request head, then runs ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.heads: list[str] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head.decode())
        try:
            await self.handler(reader, writer, head)
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/stream/tok"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


def header(head: bytes | str, name: str) -> str:
    text = head.decode() if isinstance(head, bytes) else head
    for line in text.split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return ""


async def running_container(runtime: FakeRuntime) -> None:
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


@pytest.fixture
async def node() -> AsyncIterator[tuple[TestServer, FakeRuntime]]:
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
        await running_container(runtime)
        yield srv, runtime


class Client:
    """A WebSocket client as the apiserver passes it on: masked frames out, frames in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames = wire.FrameReader()
        self.pending: list[wire.Frame] = []

    @classmethod
    async def connect(cls, srv: TestServer, path: str, protocol: str) -> tuple[Client, bytes, str]:
        assert srv.port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: node:10250\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Protocol: {protocol}\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        return cls(reader, writer), head, key

    def send(self, payload: bytes, opcode: int = wire.OP_BINARY, *, fin: bool = True) -> None:
        self.writer.write(wire.mask_frame(opcode, payload, KEY, fin=fin))

    async def frame(self) -> wire.Frame:
        while not self.pending:
            data = await asyncio.wait_for(self.reader.read(65536), 5)
            assert data, "the connection closed"
            self.pending += self.frames.feed(data)
        return self.pending.pop(0)

    async def until_close(self) -> list[wire.Frame]:
        got = []
        while (f := await self.frame()).opcode != wire.OP_CLOSE:
            got.append(f)
        got.append(f)
        assert await asyncio.wait_for(self.reader.read(), 5) == b""
        self.writer.close()
        return got


# --- v5 without stdin: the runtime's own v4 WebSocket, spliced -------------------------------


async def v4_runtime(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes
) -> None:
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + f"Sec-WebSocket-Accept: {wire.accept_key(header(head, 'Sec-WebSocket-Key'))}\r\n".encode()
        + b"Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
    )
    writer.write(wire.ws_message(wire.STDOUT, b""))
    writer.write(wire.ws_message(wire.STDOUT, b"out\n") + wire.ws_message(wire.STDERR, b"err\n"))
    writer.write(wire.ws_message(wire.ERROR, SUCCESS) + wire.ws_close())
    await writer.drain()


async def test_v5_without_stdin_is_the_runtimes_v4_on_the_wire(
    node: tuple[TestServer, FakeRuntime],
) -> None:
    srv, runtime = node
    rt = Runtime(v4_runtime)
    async with rt as url:
        runtime.streaming_url = url
        client, head, key = await Client.connect(
            srv, "/exec/default/web/app?command=true&output=1&error=1", "v5.channel.k8s.io"
        )
        assert head.startswith(b"HTTP/1.1 101 ")
        assert header(head, "Sec-WebSocket-Protocol") == "v5.channel.k8s.io"
        assert header(head, "Sec-WebSocket-Accept") == wire.accept_key(key)
        frames = await client.until_close()
    assert [f.payload for f in frames] == [
        b"\x01",
        b"\x01out\n",
        b"\x02err\n",
        b"\x03" + SUCCESS,
        b"\x03\xe8",
    ]
    assert header(rt.heads[-1], "Sec-WebSocket-Protocol") == "v4.channel.k8s.io"
    assert header(rt.heads[-1], "Sec-WebSocket-Key") == key


async def test_v5_without_stdin_gets_the_translators_exit_status(
    node: tuple[TestServer, FakeRuntime],
) -> None:
    async def exits_7(reader: Any, writer: asyncio.StreamWriter, head: bytes) -> None:
        key = wire.accept_key(header(head, "Sec-WebSocket-Key"))
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + f"Sec-WebSocket-Accept: {key}\r\n".encode()
            + b"Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
        )
        status = b'{"metadata":{},"status":"Failure","message":"exit code 7","reason":'
        rest = b'"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"7"}]}}'
        writer.write(wire.ws_message(wire.STDOUT, b"") + wire.ws_message(wire.STDOUT, b"o"))
        # The status in a message of two frames, then the runtime's close.
        writer.write(wire.ws_header(wire.OP_BINARY, len(status) + 1, fin=False) + b"\x03" + status)
        writer.write(wire.ws_header(wire.OP_CONTINUATION, len(rest)) + rest + wire.ws_close())
        await writer.drain()

    srv, runtime = node
    async with Runtime(exits_7) as url:
        runtime.streaming_url = url
        client, head, _ = await Client.connect(
            srv, "/exec/default/web/app?command=false&output=1", "v5.channel.k8s.io"
        )
        assert header(head, "Sec-WebSocket-Protocol") == "v5.channel.k8s.io"
        frames = await client.until_close()
    assert [f.payload[:1] for f in frames] == [b"\x01", b"\x01", b"\x03", b"\x03"]
    assert frames[1].payload == b"\x01o"
    assert json.loads(frames[2].payload[1:])["message"] == (
        "command terminated with non-zero exit code: command terminated with exit code 7"
    )
    assert frames[3] == wire.Frame(True, wire.OP_CLOSE, b"\x03\xe8")


# --- v5 with stdin: translated to the runtime's SPDY streams ----------------------------------


class SpdyRuntime:
    """A runtime's SPDY exec: answers every stream, upper-cases stdin to stdout once stdin is
    closed, then sends the exit status and closes."""

    def __init__(self, status: bytes = SUCCESS) -> None:
        self.streams: dict[int, str] = {}
        self.received: dict[str, bytes] = {}
        self.fins: list[str] = []
        self.status = status
        self.pinged = False
        self.ended = False

    async def __call__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes
    ) -> None:
        try:
            await self._serve(reader, writer)
        finally:
            self.ended = True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
        )
        spdy, unzip = wire.SpdyReader(), zlib.decompressobj()
        writer.write(wire.ping_frame(2))  # a server ping: answered with the same id
        while True:
            data = await reader.read(65536)
            if not data:
                return
            for f in spdy.feed(data):
                if f.control and f.kind == wire.SYN_STREAM:
                    sid = int.from_bytes(f.data[:4], "big")
                    raw = unzip.decompress(f.data[10:])
                    n = int.from_bytes(raw[4:8], "big")
                    assert raw[8 : 8 + n] == b"streamtype"
                    self.streams[sid] = raw[12 + n :].decode()
                elif f.control and f.kind == wire.PING:
                    self.pinged = f.data == b"\x00\x00\x00\x02"
                elif not f.control:
                    kind = self.streams[f.kind]
                    self.received[kind] = self.received.get(kind, b"") + f.data
                    if f.flags & wire.FLAG_FIN:
                        self.fins.append(kind)
                    if kind == "stdin" and f.flags & wire.FLAG_FIN:
                        ids = {v: k for k, v in self.streams.items()}
                        out = self.received.get("stdin", b"").upper()
                        writer.write(
                            wire.data_frame(ids["stdout"], out)
                            + wire.data_frame(ids["error"], self.status)
                        )
                        await writer.drain()
                        return


async def test_v5_with_stdin_is_translated_to_spdy_streams(
    node: tuple[TestServer, FakeRuntime],
) -> None:
    srv, runtime = node
    spdy = SpdyRuntime()
    rt = Runtime(spdy)
    async with rt as url:
        runtime.streaming_url = url
        client, head, key = await Client.connect(
            srv,
            "/exec/default/web/app?command=cat&input=1&output=1&tty=1",
            "v5.channel.k8s.io",
        )
        assert head.startswith(b"HTTP/1.1 101 ")
        assert header(head, "Upgrade").lower() == "websocket"
        assert header(head, "Sec-WebSocket-Protocol") == "v5.channel.k8s.io"
        assert header(head, "Sec-WebSocket-Accept") == wire.accept_key(key)
        # The session is open: an empty message on the first output channel.
        assert (await client.frame()).payload == b"\x01"
        client.send(b"\x00abc", fin=False)  # a message in two frames
        client.send(b"def", wire.OP_CONTINUATION)
        client.send(b'\x04{"Width":80,"Height":24}')
        client.send(b"ping", wire.OP_PING)
        assert await client.frame() == wire.Frame(True, wire.OP_PONG, b"ping")
        client.send(bytes((wire.CLOSE_SIGNAL, wire.STDIN)))  # v5: stdin is done
        frames = await client.until_close()
    assert [f.payload for f in frames] == [b"\x01ABCDEF", b"\x03" + SUCCESS, b"\x03\xe8"]
    # The streams a v4 SPDY client opens for stdin + stdout + TTY, in its order.
    assert spdy.streams == {1: "error", 3: "stdin", 5: "stdout", 7: "resize"}
    assert spdy.received == {"stdin": b"abcdef", "resize": b'{"Width":80,"Height":24}'}
    assert spdy.fins == ["stdin"]
    assert spdy.pinged
    upgrade = rt.heads[-1]
    assert upgrade.startswith("POST /stream/tok HTTP/1.1\r\n")
    assert header(upgrade, "Upgrade") == "SPDY/3.1"
    assert header(upgrade, "X-Stream-Protocol-Version") == "v4.channel.k8s.io"
    assert header(upgrade, "Sec-WebSocket-Key") == ""
    assert runtime.streaming_requests[-1][1]["stdin"] is True


async def test_a_client_that_goes_away_ends_the_runtimes_session(
    node: tuple[TestServer, FakeRuntime],
) -> None:
    srv, runtime = node
    spdy = SpdyRuntime()
    async with Runtime(spdy) as url:
        runtime.streaming_url = url
        client, head, _ = await Client.connect(
            srv, "/attach/default/web/app?input=1&output=1&error=1", "v5.channel.k8s.io"
        )
        assert head.startswith(b"HTTP/1.1 101 ")
        assert (await client.frame()).payload == b"\x01"
        client.send(b"\x00partial")
        client.send(wire.CLOSE_NORMAL.to_bytes(2, "big"), wire.OP_CLOSE)
        frames = await client.until_close()
        assert frames == [wire.Frame(True, wire.OP_CLOSE, b"\x03\xe8")]
        for _ in range(200):  # the runtime sees its connection end
            if spdy.ended:
                break
            await asyncio.sleep(0.01)
        assert spdy.ended
    assert spdy.streams == {1: "error", 3: "stdin", 5: "stdout", 7: "stderr"}
    assert spdy.received == {"stdin": b"partial"}


# --- port forwarding: SPDY tunneled in WebSocket binary messages ------------------------------


async def tunnel_runtime(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes
) -> None:
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        b"X-Stream-Protocol-Version: portforward.k8s.io\r\n\r\n"
    )
    got = b""
    while not got.endswith(b"bye"):
        data = await reader.read(65536)
        if not data:
            return
        got += data
        writer.write(data.upper())
    await writer.drain()


async def test_port_forward_tunnel_carries_spdy_bytes_both_ways(
    node: tuple[TestServer, FakeRuntime],
) -> None:
    srv, runtime = node
    rt = Runtime(tunnel_runtime)
    async with rt as url:
        runtime.streaming_url = url
        client, head, key = await Client.connect(
            srv, "/portForward/default/web", "SPDY/3.1+portforward.k8s.io"
        )
        assert head.startswith(b"HTTP/1.1 101 ")
        assert header(head, "Sec-WebSocket-Protocol") == "SPDY/3.1+portforward.k8s.io"
        assert header(head, "Sec-WebSocket-Accept") == wire.accept_key(key)
        big = os.urandom(100_000).hex().encode()
        client.send(big[:70_000], fin=False)
        client.send(big[70_000:], wire.OP_CONTINUATION)
        echoed = b""
        while len(echoed) < len(big):
            f = await client.frame()
            assert f.opcode == wire.OP_BINARY
            echoed += f.payload
        assert len(echoed) == len(big)
        assert echoed == big.upper(), "not the bytes sent, upper-cased"
        client.send(b"bye")
        assert (await client.frame()).payload == b"BYE"
        frames = await client.until_close()
    assert frames == [wire.Frame(True, wire.OP_CLOSE, b"\x03\xe8")]
    upgrade = rt.heads[-1]
    assert upgrade.startswith("POST /stream/tok HTTP/1.1\r\n")
    assert header(upgrade, "X-Stream-Protocol-Version") == "portforward.k8s.io"
    assert header(upgrade, "Upgrade") == "SPDY/3.1"
    # The tunnel gives CRI no ports: they travel in the SPDY streams' headers.
    assert runtime.streaming_requests[-1] == (
        "PortForward",
        {"pod_sandbox_id": runtime.streaming_requests[-1][1]["pod_sandbox_id"], "ports": []},
    )


async def test_a_runtime_that_refuses_the_spdy_upgrade_is_relayed(
    node: tuple[TestServer, FakeRuntime],
) -> None:
    async def refuse(reader: Any, writer: asyncio.StreamWriter, head: bytes) -> None:
        writer.write(
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n\r\n"
        )
        await writer.drain()
        await asyncio.sleep(0.05)  # the body after the head
        writer.write(b"bad protocol")
        await writer.drain()

    srv, runtime = node
    async with Runtime(refuse) as url:
        runtime.streaming_url = url
        client, head, _ = await Client.connect(
            srv, "/exec/default/web/app?command=cat&input=1&output=1", "v5.channel.k8s.io"
        )
        assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert await client.reader.readexactly(12) == b"bad protocol"
        client.writer.close()
