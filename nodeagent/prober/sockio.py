"""Plain TCP for the tcpSocket and plain-HTTP probes: a non-blocking socket driven by the loop's
``sock_*`` calls, without asyncio's transports and streams.

A probe opens a connection, sends one request and closes it, many times a second on a busy
node. ``asyncio.open_connection`` builds a transport, a protocol, a reader and a writer that
refer to one another; each closed connection is a reference cycle that often lives long enough
to reach the oldest generation and waits for a full collection there (7 objects a probe).
Over the socket itself a probe leaves none, and its client costs less CPU: 173 µs instead of
289 for a tcpSocket probe, 299 instead of 338 for an httpGet (bench/probe_client.py,
docs/benchmarks.md). HTTPS probes keep asyncio's streams (TLS).

``connect`` dials as Go's dialer does for the probes: the host's addresses in order (an IP is
used as it is; a name is resolved on the loop's resolver), the first error returned when none
answers.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Final

RECV_SIZE: Final = 65536
LINE_LIMIT: Final = 65536  # a line may not be longer (asyncio's StreamReader limit, as before)


async def _addresses(host: str, port: int) -> list[tuple[int, tuple[str, int]]]:
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [(family, (str(addr[0]), port)) for family, _, _, _, addr in infos]
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    return [(family, (host, port))]


async def connect(host: str, port: int) -> socket.socket:
    """A connected non-blocking socket; the first address's ``OSError`` when none answers.
    Cancelled (the probe's timeout), the socket is closed."""
    loop = asyncio.get_running_loop()
    first: OSError | None = None
    for family, address in await _addresses(host, port):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as e:
            sock.close()
            first = first or e
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise first or OSError(f"no address for {host}")


class SocketStream:
    """A reader and writer over one connected socket (the ``Reader``/``Writer`` the HTTP
    probe reads and writes, and what ``tcp_probe`` closes)."""

    __slots__ = ("_buffer", "_loop", "_out", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._buffer = bytearray()
        self._out = bytearray()

    async def _fill(self) -> bool:
        data = await self._loop.sock_recv(self._sock, RECV_SIZE)
        self._buffer += data
        return bool(data)

    def _take(self, n: int) -> bytes:
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def readline(self) -> bytes:
        """Up to and including the next ``\\n``; what is left at EOF (``b""`` at its end).
        ``ValueError`` once ``LINE_LIMIT`` bytes came without one: the peer (a pod) does not
        get to fill the agent's memory."""
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > LINE_LIMIT:
                raise ValueError(f"a line longer than {LINE_LIMIT} bytes")
            if not await self._fill():
                return self._take(len(self._buffer))
        return self._take(end + 1)

    async def read(self, n: int = -1) -> bytes:
        """What is buffered, else one receive: at most ``n`` bytes, ``b""`` at EOF."""
        if not self._buffer:
            await self._fill()
        return self._take(len(self._buffer) if n < 0 else n)

    async def readexactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            if not await self._fill():
                raise asyncio.IncompleteReadError(self._take(len(self._buffer)), n)
        return self._take(n)

    def write(self, data: bytes) -> None:
        self._out += data

    async def drain(self) -> None:
        data, self._out = bytes(self._out), bytearray()
        await self._loop.sock_sendall(self._sock, data)

    def close(self) -> None:
        self._sock.close()


async def open_socket_stream(host: str, port: int) -> tuple[SocketStream, SocketStream]:
    """``connect``, as a (reader, writer) pair of one stream."""
    stream = SocketStream(await connect(host, port))
    return stream, stream
