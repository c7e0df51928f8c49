"""``GET /containerLogs/{namespace}/{pod}/{container}`` for the kubelet API server.

Register ``routes`` on the server's application and set ``app[LOGS]`` to a
:class:`ContainerLogs`. Errors are plain text with the kubelet's status codes and messages;
the log itself is streamed (chunked), each chunk written as soon as it is read, which is what
``kubectl logs -f`` needs: a follower's new lines are written to the connection from the inotify
callback (:class:`_ChunkSink`), framed as HTTP/1.1 chunks as aiohttp frames its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from aiohttp import web

from nodeagent.containerlogs.options import LogOptionsError, parse_options
from nodeagent.containerlogs.service import ContainerLogs, LogRequestError

LOGS = web.AppKey("containerlogs", ContainerLogs)

# Above this many bytes unsent to a slow client, new lines wait in the task (which waits for
# the connection to drain) instead of being written from the callback.
HIGH_WATER: Final = 64 << 10

routes = web.RouteTableDef()


class _ChunkSink:
    """Writes a chunk of a prepared chunked response straight to its transport. Sound because
    aiohttp writes a prepared ``StreamResponse``'s headers at once and each ``write`` through to
    the transport (nothing of the body is buffered in between), so the two kinds of writes go
    out in the order they are made."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def writable(self) -> bool:
        t = self._transport
        return not t.is_closing() and t.get_write_buffer_size() < HIGH_WATER

    def write(self, data: bytes) -> None:
        self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n", content_type="text/plain")


@routes.get("/containerLogs/{namespace}/{pod}/{container}")
async def container_logs(request: web.Request) -> web.StreamResponse:
    logs = request.app[LOGS]
    try:
        options = parse_options(request.query, now=logs.clock.now())
    except LogOptionsError as e:
        return _error(400, str(e))
    m = request.match_info
    try:
        target = await logs.target(
            m["namespace"], m["pod"], m["container"], previous=options.previous
        )
    except LogRequestError as e:
        return _error(e.status, str(e))
    response = web.StreamResponse(status=200)
    response.content_type = "text/plain"
    response.charset = "utf-8"
    chunked = request.version >= (1, 1)
    if chunked:
        response.enable_chunked_encoding()  # what the sink frames (an HTTP/1.0 client: no sink)
    await response.prepare(request)
    transport = request.transport
    sink = _ChunkSink(transport) if chunked and options.follow and transport is not None else None

    def client_alive() -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    stream = logs.read(target, options, client_alive=client_alive, sink=sink)
    try:
        async for chunk in stream:
            await response.write(chunk)
    except (ConnectionResetError, ConnectionError):
        return response  # the client went away
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()  # type: ignore[attr-defined]  # an async generator
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response
