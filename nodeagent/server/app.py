"""The aiohttp applications: the authenticated kubelet API and the plain ``/healthz`` one.

:func:`build_app` assembles the API: the auth middleware (every route, 401/403 as the
kubelet), the server's own routes (``/healthz``, ``/pods``, ``/configz``, ``/metrics``, the
streaming ones and ``/runningpods/``) and each :class:`Extension`'s routes; each
extension then sets the ``web.AppKey`` values its handlers read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from nodeagent.apiserver import ApiError
from nodeagent.log import get_logger
from nodeagent.server import endpoints, keys, runningpods, streaming
from nodeagent.server.attributes import request_attributes
from nodeagent.server.auth import AUTH, RequestAuth, forbidden_message
from nodeagent.server.metrics import metrics_middleware

_log = get_logger("server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Large enough for a kubectl cp of a big file: aiohttp's default is 1 MiB.
CLIENT_MAX_SIZE: Final = 64 * 1024 * 1024


@dataclass(frozen=True)
class Extension:
    """Routes another package serves on the kubelet API, and how it provides their
    dependencies: ``install(app)`` sets the ``web.AppKey`` values its handlers read
    (``request.app[KEY]``). Authentication and authorization apply to its routes as to all."""

    routes: web.RouteTableDef
    install: Callable[[web.Application], None] = field(default=lambda app: None)


def _text(status: int, text: str) -> web.Response:
    # As Go's resp.WriteErrorString: the text, a newline, text/plain.
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    auth = request.app[AUTH]
    subject: Any = None
    transport = request.transport
    if transport is not None:
        cert = transport.get_extra_info("peercert")
        if cert:
            subject = cert.get("subject")
    try:
        user = await auth.authenticate(
            peer_subject=subject, authorization=request.headers.get("Authorization")
        )
    except ApiError as e:
        _log.error("Unable to authenticate the request due to an error", error=str(e))
        return _text(401, "Unauthorized")
    if user is None:
        return _text(401, "Unauthorized")
    attrs = request_attributes(
        request.method,
        request.path,
        auth.node_name,
        fine_grained=auth.fine_grained,
        streaming_create=auth.streaming_create,
    )
    for attr in attrs:
        try:
            allowed = await auth.authorizer.authorize(user, attr)
        except ApiError as e:
            msg = (
                f"Authorization error (user={user.name}, verb={attr.verb},"
                f" resource={attr.resource}, subresource={attr.subresource})"
            )
            _log.error(msg, error=str(e))
            return _text(500, msg)
        if allowed:
            request[keys.USER] = user
            return await handler(request)
    msg = forbidden_message(user, attrs[-1])
    _log.v(2).info("Forbidden", user=user.name, verb=attrs[-1].verb, path=request.path)
    return _text(403, msg)


def build_app(
    *,
    auth: RequestAuth,
    deps: endpoints.Dependencies,
    stream: streaming.StreamingDeps | None,
    extensions: Sequence[Extension] = (),
) -> web.Application:
    """The kubelet API on ``port`` (behind TLS and authentication)."""
    app = web.Application(
        middlewares=[metrics_middleware, auth_middleware], client_max_size=CLIENT_MAX_SIZE
    )
    app[AUTH] = auth
    endpoints.install(app, deps)
    app.add_routes(endpoints.routes)
    if stream is not None:
        app[streaming.STREAMING] = stream
        app.add_routes(streaming.routes)
        app[runningpods.RUNTIME] = stream.runtime
        app.add_routes(runningpods.routes)
    for ext in extensions:
        app.add_routes(ext.routes)
        ext.install(app)
    return app


def build_healthz_app(deps: endpoints.Dependencies) -> web.Application:
    """``/healthz`` alone, without authentication (``healthzBindAddress:healthzPort``)."""
    app = web.Application()
    endpoints.install(app, deps)
    app.add_routes(endpoints.healthz_routes)
    return app
