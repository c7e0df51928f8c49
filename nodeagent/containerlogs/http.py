"""``GET /containerLogs/{namespace}/{pod}/{container}`` for the kubelet API server.

Register ``routes`` on the server's application and set ``app[LOGS]`` to a
:class:`ContainerLogs`. Errors are plain text with the kubelet's status codes and messages;
the log itself is streamed (chunked), each chunk written as soon as it is read, which is what
``kubectl logs -f`` needs.
"""

from __future__ import annotations

import contextlib

from aiohttp import web

from nodeagent.containerlogs.options import LogOptionsError, parse_options
from nodeagent.containerlogs.service import ContainerLogs, LogRequestError

LOGS = web.AppKey("containerlogs", ContainerLogs)

routes = web.RouteTableDef()


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
    await response.prepare(request)

    def client_alive() -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    stream = logs.read(target, options, client_alive=client_alive)
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
