"""The kubelet API server (the kubelet's ``pkg/kubelet/server``), on aiohttp.

``:10250`` (``address``/``port``), HTTPS, every request authenticated (client certificate,
bearer token through TokenReview, anonymous only if enabled) and authorized
(SubjectAccessReview on ``nodes/<subresource>``); ``/healthz`` also plain on
``healthzBindAddress:healthzPort``. Modules: :mod:`.attributes` (path -> authorization
attributes, pure), :mod:`.auth` (authenticators, authorizers, caches), :mod:`.tls` (serving
pair, TLS context), :mod:`.endpoints` (``/healthz``, ``/pods``, ``/configz``, ``/metrics``),
:mod:`.streaming` (exec/attach/portForward proxy), :mod:`.app` (application factories),
:mod:`.listener` (the socket: idle and head limits, a cap on connections), :mod:`.manager`
(the manager the agent runs).

Adding routes from another package
----------------------------------
A package that serves endpoints on the kubelet API (container logs, stats, ...) exports an
``aiohttp.web.RouteTableDef`` and the ``web.AppKey`` values its handlers read, and the
composition root (``nodeagent/agent.py``) passes an :class:`Extension` for it::

    # nodeagent/containerlogs/http.py
    LOGS: Final = web.AppKey("nodeagent.containerlogs", LogReader)
    routes = web.RouteTableDef()

    @routes.get("/containerLogs/{ns}/{pod}/{container}")
    async def container_logs(request: web.Request) -> web.StreamResponse:
        reader = request.app[LOGS]
        ...

    # nodeagent/agent.py
    from nodeagent.containerlogs import http as logs_http

    Extension(routes=logs_http.routes, install=lambda app: app.__setitem__(logs_http.LOGS, r))

``build_app(..., extensions=[...])`` adds each extension's routes, then calls its
``install(app)``. The auth middleware covers them (the path decides the subresource: see
:func:`.attributes.request_attributes`); ``request[USER]`` holds the authenticated user.
Handlers must not block the loop (``asyncio.to_thread`` for file I/O that may stall).
"""

from __future__ import annotations

from nodeagent.server.app import Extension, build_app, build_healthz_app
from nodeagent.server.auth import RequestAuth, User
from nodeagent.server.endpoints import Dependencies
from nodeagent.server.keys import USER
from nodeagent.server.manager import KubeletServer, ServerSettings

__all__ = [
    "USER",
    "Dependencies",
    "Extension",
    "KubeletServer",
    "RequestAuth",
    "ServerSettings",
    "User",
    "build_app",
    "build_healthz_app",
]
