"""The probes' plain TCP (``nodeagent.prober.sockio``) against loopback servers: the HTTP
probe's reads over a real socket, Go's dial errors, a timeout that closes the socket, and no
reference cycle left behind by a probe."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from nodeagent.prober.http import http_probe, open_stream, request_headers
from nodeagent.prober.kinds import tcp_probe
from nodeagent.prober.outcome import Outcome, ProbeOutcome
from nodeagent.prober.sockio import SocketStream, connect, open_socket_stream

UA = "kube-probe/1.36"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Served:
    """A loopback asyncio server; leaving it waits until ``connections`` were accepted and
    their handlers returned (a client may close before the server has accepted)."""

    def __init__(self, handler: Handler, connections: int = 1) -> None:
        self.handler = handler
        self.connections = connections
        self.handling: set[asyncio.Task[None]] = set()
        self.all_accepted = asyncio.Event()
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handling.add(task)
        if len(self.handling) >= self.connections:
            self.all_accepted.set()
        await self.handler(reader, writer)

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def __aexit__(self, *exc: object) -> None:
        async with asyncio.timeout(5):
            await self.all_accepted.wait()
            await asyncio.gather(*self.handling)
        self.server.close()
        await self.server.wait_closed()


def answering(answer: bytes) -> Handler:
    """Reads the request's head, writes ``answer`` and closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        writer.write(answer)
        await writer.drain()
        writer.close()

    return handle


@pytest.fixture
async def unused_port() -> AsyncIterator[int]:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield port


async def test_an_http_probe_over_the_socket_reads_status_and_chunked_body() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
    )
    async with Served(answering(chunked)) as port:
        outcome = await http_probe(
            open_stream, f"http://127.0.0.1:{port}/healthz", request_headers([], UA), 1
        )
    assert outcome == ProbeOutcome(Outcome.SUCCESS, "abcdefg")


async def test_a_response_cut_short_is_a_failure_naming_the_early_eof() -> None:
    async with Served(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")) as port:
        outcome = await http_probe(
            open_stream, f"http://127.0.0.1:{port}/", request_headers([], UA), 1
        )
    # Content-Length promised 10 bytes: what arrived is the body, as the kubelet reads it
    assert outcome == ProbeOutcome(Outcome.SUCCESS, "abc")
    cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nab"
    async with Served(answering(cut)) as port:
        outcome = await http_probe(
            open_stream, f"http://127.0.0.1:{port}/", request_headers([], UA), 1
        )
    assert outcome.outcome is Outcome.FAILURE
    assert "2 bytes read on a total of 9 expected bytes" in outcome.output


async def test_tcp_probe_success_and_gos_refusal_over_real_sockets(unused_port: int) -> None:
    async with Served(answering(b"")) as port:
        assert await tcp_probe(open_socket_stream, "127.0.0.1", port, 1) == ProbeOutcome(
            Outcome.SUCCESS, ""
        )
    assert await tcp_probe(open_socket_stream, "127.0.0.1", unused_port, 1) == ProbeOutcome(
        Outcome.FAILURE, f"dial tcp 127.0.0.1:{unused_port}: connect: connection refused"
    )


async def test_a_name_is_resolved_and_the_address_that_answers_is_used() -> None:
    async with Served(answering(b"")) as port:
        sock = await connect("localhost", port)
        try:
            assert sock.getpeername()[1] == port
        finally:
            sock.close()


async def test_a_probe_timing_out_on_a_silent_server_closes_its_socket() -> None:
    accepted: list[tuple[str, int]] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer.get_extra_info("peername"))
        await reader.read()  # answers nothing; returns once the client has closed
        writer.close()

    async with Served(silent) as port:
        outcome = await http_probe(
            open_stream, f"http://127.0.0.1:{port}/", request_headers([], UA), 0.2
        )
        # the server sees the client's end close: the handler returns
    assert outcome.outcome is Outcome.FAILURE
    assert "Client.Timeout exceeded while awaiting headers" in outcome.output
    assert len(accepted) == 1


class ThreadServer:
    """A blocking loopback HTTP server on a thread of its own: its sockets make no asyncio
    objects, so whatever the collector finds below is the client's."""

    def __init__(self, answer: bytes) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.answer = answer
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(self.answer)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(timeout=5)


def cyclic_garbage_of(kinds: tuple[type, ...]) -> list[object]:
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return [o for o in gc.garbage if isinstance(o, kinds)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_probes_over_the_socket_leave_no_reference_cycle() -> None:
    server = ThreadServer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    url = f"http://127.0.0.1:{server.port}/healthz"
    headers = request_headers([], UA)
    kinds = (socket.socket, SocketStream, asyncio.BaseTransport, asyncio.StreamWriter)

    async def streams(host: str, port: int, tls: object, name: object) -> tuple[Any, Any]:
        return await asyncio.open_connection(host, port)

    try:
        gc.collect()
        gc.disable()
        for _ in range(10):
            assert (await http_probe(open_stream, url, headers, 1)).outcome is Outcome.SUCCESS
            tcp = await tcp_probe(open_socket_stream, "127.0.0.1", server.port, 1)
            assert tcp.outcome is Outcome.SUCCESS
        await asyncio.sleep(0)
        ours = cyclic_garbage_of(kinds)
        # the same probes over asyncio's streams, which the collector has to find
        for _ in range(10):
            assert (await http_probe(streams, url, headers, 1)).outcome is Outcome.SUCCESS
        await asyncio.sleep(0)
        theirs = cyclic_garbage_of(kinds)
    finally:
        gc.enable()
        server.close()
    assert ours == []
    assert any(isinstance(o, asyncio.BaseTransport) for o in theirs)


async def test_stream_reads_lines_exact_counts_and_eof() -> None:
    left, right = socket.socketpair()
    left.setblocking(False)
    stream = SocketStream(left)
    right.sendall(b"one\ntwo\nrest")
    right.close()
    assert await stream.readline() == b"one\n"
    assert await stream.readexactly(4) == b"two\n"
    assert await stream.read(2) == b"re"
    assert await stream.read() == b"st"
    assert await stream.readline() == b""
    with pytest.raises(asyncio.IncompleteReadError):
        await stream.readexactly(1)
    stream.close()
    assert left.fileno() == -1


def holding(answer: bytes) -> Handler:
    """Reads the request's head, writes ``answer`` and keeps the connection open until the
    client closes it (a pod that never finishes its response)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):  # the client closes with data unread
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            writer.write(answer)
            await writer.drain()
            await reader.read()
        writer.close()

    return handle


async def test_an_endless_header_line_fails_the_probe_before_its_timeout() -> None:
    async with Served(holding(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 200_000)) as port:
        started = asyncio.get_running_loop().time()
        outcome = await http_probe(
            open_stream, f"http://127.0.0.1:{port}/", request_headers([], UA), 30
        )
        took = asyncio.get_running_loop().time() - started
    assert outcome.outcome is Outcome.FAILURE
    assert "a line longer than 65536 bytes" in outcome.output
    assert took < 10


async def test_a_chunk_claiming_a_gigabyte_is_read_only_as_far_as_the_body_is_kept() -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40000000\r\n"
    async with Served(holding(head + b"z" * 20_000)) as port:
        outcome = await http_probe(
            open_stream, f"http://127.0.0.1:{port}/", request_headers([], UA), 30
        )
    assert outcome == ProbeOutcome(Outcome.SUCCESS, "z" * 10240)
