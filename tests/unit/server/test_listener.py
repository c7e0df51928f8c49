"""The kubelet API's listener on real sockets: Go's head size accepted and refused as Go does,
idle and silent connections closed, a long response never cut, a cap on open connections.
Timeouts are made short (a fraction of a second); the waits are watchdogs, not measurements.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from nodeagent.server import tls
from nodeagent.server.listener import MAX_HEADER_BYTES, TOO_LARGE, Limits, Listener

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
IDLE = 0.5
WATCHDOG = 10.0


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.Response(text=f"{len(request.raw_path)} {len(body)}")


async def slow(request: web.Request) -> web.StreamResponse:
    """Streams one line every IDLE/2 seconds for 4 idle timeouts, as ``logs -f`` does."""
    response = web.StreamResponse()
    await response.prepare(request)
    for i in range(8):
        await response.write(f"line {i}\n".encode())
        await asyncio.sleep(IDLE / 2)
    await response.write_eof()
    return response


@pytest.fixture(scope="module")
def server_tls(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    cert, key = tls.ensure_self_signed(tmp_path_factory.mktemp("pki"), "node-a", [], now=NOW)
    return tls.server_context(cert, key)


def client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class Served:
    def __init__(self, listener: Listener, secure: bool) -> None:
        self.listener = listener
        self.secure = secure

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            "127.0.0.1", self.listener.port, ssl=client_tls() if self.secure else None
        )

    async def ask(self, head: bytes) -> bytes:
        reader, writer = await self.connect()
        writer.write(head)
        try:
            return await asyncio.wait_for(reader.read(), WATCHDOG)
        finally:
            writer.close()


async def serve(context: ssl.SSLContext | None, limits: Limits) -> AsyncIterator[Served]:
    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_get("/echo", echo)
    app.router.add_post("/echo", echo)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    assert runner.server is not None
    listener = Listener(runner.server, ssl_context=context, limits=limits)
    await listener.start("127.0.0.1", 0)
    try:
        yield Served(listener, context is not None)
    finally:
        await listener.close()
        await runner.cleanup()


LIMITS = Limits(idle_timeout=IDLE, handshake_timeout=IDLE, max_connections=8)


@pytest.fixture(params=["tls", "plain"])
async def served(
    request: pytest.FixtureRequest, server_tls: ssl.SSLContext
) -> AsyncIterator[Served]:
    context = server_tls if request.param == "tls" else None
    async for s in serve(context, LIMITS):
        yield s


def get(target: str, *headers: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", "Host: node", *headers, "Connection: close", "", ""]
    return "\r\n".join(lines).encode()


async def test_a_request_line_as_long_as_go_allows_is_served(served: Served) -> None:
    target = "/echo?command=" + "a" * (900 * 1024)  # a 900 KiB command line: Go takes it
    answer = await served.ask(get(target))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
    assert answer.endswith(f"{len(target)} 0".encode())


async def test_many_headers_within_the_total_are_served(served: Served) -> None:
    headers = [f"X-Filler-{i}: {'v' * 900}" for i in range(500)]  # ~450 KiB in 500 lines
    answer = await served.ask(get("/echo", *headers))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:100]


@pytest.mark.parametrize("where", ["request line", "one header", "many headers"])
async def test_a_head_past_go_s_limit_is_431_and_closed(served: Served, where: str) -> None:
    big = MAX_HEADER_BYTES + 8192
    if where == "request line":
        head = get("/echo?x=" + "a" * big)
    elif where == "one header":
        head = get("/echo", "X-Big: " + "b" * big)
    else:
        head = get("/echo", *(f"X-H{i}: {'c' * 2000}" for i in range(big // 2000)))
    assert await served.ask(head) == TOO_LARGE


async def test_a_body_is_not_counted_as_head(served: Served) -> None:
    body = b"x" * (3 * MAX_HEADER_BYTES)
    head = (
        "POST /echo HTTP/1.1\r\nHost: node\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    answer = await served.ask(head + body)
    assert answer.endswith(f"5 {len(body)}".encode()), answer[-100:]


async def test_a_silent_connection_is_closed_after_the_idle_timeout(served: Served) -> None:
    reader, writer = await served.connect()
    assert await asyncio.wait_for(reader.read(), WATCHDOG) == b""
    writer.close()


async def test_a_head_trickling_in_is_closed_after_the_idle_timeout(served: Served) -> None:
    reader, writer = await served.connect()
    writer.write(b"GET /echo HTTP/1.1\r\nHost: node\r\n")
    for _ in range(3):
        await asyncio.sleep(IDLE / 3)
        writer.write(b"X-Slow: 1\r\n")  # never the blank line
    assert await asyncio.wait_for(reader.read(), WATCHDOG) == b""
    writer.close()


async def test_keep_alive_then_idle_is_closed(served: Served) -> None:
    reader, writer = await served.connect()
    writer.write(b"GET /echo HTTP/1.1\r\nHost: node\r\n\r\n")
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WATCHDOG)
    assert first.startswith(b"HTTP/1.1 200")
    rest = await asyncio.wait_for(reader.read(), WATCHDOG)  # the body, then the close
    assert rest.endswith(b"5 0")
    writer.close()


async def test_a_long_response_is_never_cut(served: Served) -> None:
    answer = await served.ask(get("/slow"))
    assert answer.endswith(b"line 7\n\r\n0\r\n\r\n"), answer[-60:]  # 2 s; 0.5 s idle timeout


async def test_a_tls_handshake_that_never_comes_is_dropped(server_tls: ssl.SSLContext) -> None:
    async for s in serve(server_tls, LIMITS):
        reader, writer = await asyncio.open_connection("127.0.0.1", s.listener.port)
        assert await asyncio.wait_for(reader.read(), WATCHDOG) == b""
        writer.close()
        await asyncio.sleep(0.1)
        assert s.listener.open == 0


async def test_connections_over_the_cap_are_closed_before_tls(server_tls: ssl.SSLContext) -> None:
    limits = Limits(idle_timeout=30, handshake_timeout=30, max_connections=3)
    async for s in serve(server_tls, limits):
        held = [await s.connect() for _ in range(3)]
        # the fourth: closed at once, without a handshake (a plain connection sees EOF)
        reader, writer = await asyncio.open_connection("127.0.0.1", s.listener.port)
        assert await asyncio.wait_for(reader.read(), WATCHDOG) == b""
        writer.close()
        assert (s.listener.open, s.listener.refused) == (3, 1)
        # the ones held are still served
        _, w = held[0]
        r = held[0][0]
        w.write(get("/echo"))
        assert (await asyncio.wait_for(r.read(), WATCHDOG)).endswith(b"5 0")
        w.close()
        for _, w in held[1:]:
            w.close()

        for _ in range(int(WATCHDOG / 0.05)):
            if not s.listener.open:
                break
            await asyncio.sleep(0.05)
        assert (await s.ask(get("/echo"))).endswith(b"5 0")  # room again
