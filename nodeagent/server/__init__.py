"""The kubelet API server (the kubelet's ``pkg/kubelet/server``), on aiohttp.

``:10250`` (``address``/``port``), HTTPS, every request authenticated (client certificate,
bearer token through TokenReview, anonymous only if enabled) and authorized
(SubjectAccessReview on ``nodes/<subresource>``); ``/healthz`` also plain on
``healthzBindAddress:healthzPort``. Modules: :mod:`.attributes` (path -> authorization
attributes, pure), :mod:`.auth` (authenticators, authorizers, caches), :mod:`.tls` (serving
pair, TLS context), :mod:`.endpoints` (``/healthz``, ``/pods``, ``/configz``, ``/metrics``),
:mod:`.streaming` (exec/attach/portForward proxy, with :mod:`.bridge` and :mod:`.wire`),
:mod:`.servingcert`, :mod:`.app` (application factories), :mod:`.listener` (the socket: idle
and head limits, a cap on connections), :mod:`.runningpods`, :mod:`.manager` (the manager the
agent runs); :mod:`.service` wires them. API mode only.

In: ``address:port`` (HTTPS) and ``healthzBindAddress:healthzPort`` (plain); the serving pair
from ``tlsCertFile``, else ``serverTLSBootstrap`` (a kubelet-serving CSR, rotated), else
self-signed in ``<rootDir>/pki`` (the pair and the CSRs made in a child process,
``nodeagent.certificate.isolated``); client certificates checked against
``authentication.x509.clientCAFile``, bearer tokens through TokenReview (cached ``cacheTTL``),
SubjectAccessReview on ``nodes/<subresource>`` (cached); other packages' routes as
:class:`Extension`.

Out: ``/healthz`` (with ``ping``, ``log`` and ``syncloop`` from the sync loop's heartbeat),
``/pods``, ``/runningpods/`` (from the runtime), ``/configz``, ``/metrics`` (the
prometheus_client registry). ``/exec``, ``/attach``, ``/run`` and ``/portForward`` need
``create`` whatever the transport (``node.streamingAuthorization``); ``/exec``, ``/attach``
and ``/portForward`` ask CRI for the runtime's streaming URL (for the container the pod's
newest status names running; the runtime's list when that is stale) and connect the client's
upgraded connection to it from the transports' protocol callbacks (no queue or task per
chunk): SPDY and WebSocket ``v4`` are spliced as they come. Since the node declares
``ExtendWebSocketsToKubelet`` in ``status.declaredFeatures`` (the 1.36 kubelet's
NodeDeclaredFeatures; gates ``ExtendWebSocketsToKubelet``, ``NodeDeclaredFeatures``), the
apiserver passes kubectl's WebSockets through untouched and the node does the kubelet's
translation: ``v5.channel.k8s.io`` with stdin to the runtime's SPDY streams (all SYN_STREAMs
at once), ``v5`` without stdin as the runtime's own ``v4`` WebSocket (the same frames), a
port-forward ``SPDY/3.1+portforward.k8s.io`` WebSocket unwrapped into the runtime's SPDY
connection.

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
