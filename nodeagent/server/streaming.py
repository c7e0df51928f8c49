"""``/exec``, ``/attach`` and ``/portForward``: ask the runtime for a streaming URL over CRI,
then proxy the client's upgraded connection to it, as the kubelet's streaming proxy does.

SPDY/3.1 (a POST) and WebSocket (a GET) are both HTTP/1.1 upgrades, so one proxy serves both:
the client's request is replayed to the runtime's streaming server (its path and query those
of the runtime's URL, ``Host`` rewritten, credentials dropped), the runtime's answer is relayed
(a refusal as is; a ``101`` switches both sides), then bytes are spliced both ways until one
side closes. The runtime speaks the streaming protocols itself (stdin/stdout/stderr/error/resize
channels, exit codes), so kubectl sees what it would see through the kubelet.

With ``ExtendWebSocketsToKubelet`` declared, the apiserver passes clients' WebSockets through
untouched, and this side does what the kubelet does with them (:func:`plan`): a
``v5.channel.k8s.io`` exec/attach is translated to the runtime's SPDY streams (or, without
stdin, served by the runtime as ``v4``, the same frames), and a port-forward WebSocket
offering ``SPDY/3.1+portforward.k8s.io`` is unwrapped into the runtime's SPDY connection.
The byte paths run in the transports' callbacks (:mod:`nodeagent.server.bridge`).

aiohttp parses only ``websocket`` and ``tcp`` upgrades, so the connection is taken over at the
protocol level once the runtime has accepted (see :func:`_take_over`): after the ``101`` the
client's bytes go to the runtime unparsed.

Query parameters, as the kubelet reads them: ``command`` (repeated), ``input``/``stdin``,
``output``/``stdout``, ``error``/``stderr``, ``tty`` (``1`` or ``true``); ``port`` (repeated)
for port forwarding. At least one of stdin, stdout and stderr must be asked for; a TTY merges
stderr into stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from aiohttp import web
from multidict import CIMultiDict

from nodeagent.kuberuntime import CriError
from nodeagent.kuberuntime.labels import CONTAINER_NAME, POD_UID
from nodeagent.kuberuntime.types import (
    CONTAINER_RUNNING,
    SANDBOX_READY,
    Container,
    ContainerFilter,
    ExecSyncResponse,
    PodSandbox,
    PodSandboxFilter,
)
from nodeagent.log import get_logger
from nodeagent.server import wire
from nodeagent.server.bridge import (
    HEAD_LIMIT,
    Bridge,
    ClientSide,
    SpdyTranslator,
    Splice,
    Tunnel,
    Upstream,
    V4Relay,
)

_log = get_logger("server")

UPSTREAM_TIMEOUT: Final = 30.0
"""Seconds the runtime's streaming server gets to answer the upgrade."""
# Headers never replayed to the runtime.
_DROP: Final = frozenset(
    h.lower() for h in ("Host", "Authorization", "Content-Length", "Transfer-Encoding")
)


class StreamingRuntime(Protocol):
    async def exec(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        tty: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    ) -> str: ...

    async def attach(
        self, container_id: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool
    ) -> str: ...

    async def port_forward(self, pod_sandbox_id: str, ports: Sequence[int]) -> str: ...

    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout_seconds: int
    ) -> ExecSyncResponse: ...

    async def list_containers(self, filter: ContainerFilter | None = None) -> list[Container]: ...

    async def list_pod_sandbox(
        self, filter: PodSandboxFilter | None = None
    ) -> list[PodSandbox]: ...


@dataclass(frozen=True)
class StreamingDeps:
    runtime: StreamingRuntime
    find_pod: Callable[[str, str], dict[str, Any] | None]
    """(namespace, name) -> the pod as the agent sees it, or None."""
    websockets: bool = True
    """``ExtendWebSocketsToKubelet``: translate ``v5`` and tunneling WebSockets (else splice
    every request to the runtime as it comes)."""


STREAMING: Final = web.AppKey("nodeagent.server.streaming", StreamingDeps)


class BadOptions(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class StreamOptions:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


def _flag(query: Mapping[str, str], *names: str) -> bool:
    return any(query.get(n, "") in ("1", "true", "True") for n in names)


def stream_options(query: Mapping[str, str]) -> StreamOptions:
    """The kubelet's remotecommand options from a request's query (pure)."""
    stdin = _flag(query, "input", "stdin")
    stdout = _flag(query, "output", "stdout")
    stderr = _flag(query, "error", "stderr")
    tty = _flag(query, "tty")
    if not (stdin or stdout or stderr):
        raise BadOptions("you must specify at least 1 of stdin, stdout, stderr")
    if tty and stderr:
        stderr = False  # a TTY has one output stream, as the kubelet does
    return StreamOptions(stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)


def forward_ports(values: Sequence[str]) -> list[int]:
    ports: list[int] = []
    for raw in values:
        for part in raw.split(","):
            if not part:
                continue
            try:
                port = int(part)
            except ValueError:
                raise BadOptions(f"invalid port {part!r}") from None
            if not 0 < port < 65536:
                raise BadOptions(f"port {port} must be > 0 and < 65536")
            ports.append(port)
    return ports


def _error(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


def _pod(request: web.Request) -> dict[str, Any] | None:
    deps = request.app[STREAMING]
    ns, name = request.match_info["ns"], request.match_info["pod"]
    pod: dict[str, Any] | None = deps.find_pod(ns, name)
    uid = request.match_info.get("uid")
    if pod is not None and uid and (pod.get("metadata") or {}).get("uid") != uid:
        return None
    return pod


def _status_container_id(pod: Mapping[str, Any], container: str) -> str | None:
    """The running container's ID as the pod's status (the agent's newest) says, without its
    ``<runtime>://`` prefix; None if the status does not say it runs."""
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or ():
            if cs.get("name") == container and "running" in (cs.get("state") or {}):
                cid = str(cs.get("containerID") or "").partition("://")[2]
                return cid or None
    return None


async def _container_id(runtime: StreamingRuntime, pod_uid: str, container: str) -> str | None:
    found = await runtime.list_containers(
        ContainerFilter(label_selector={POD_UID: pod_uid, CONTAINER_NAME: container})
    )
    running = [c for c in found if c.state == CONTAINER_RUNNING]
    if not running:
        return None
    return max(running, key=lambda c: c.created_at).id


async def _exec_or_attach(request: web.Request, *, attach: bool) -> web.StreamResponse:
    try:
        opts = stream_options(request.query)
    except BadOptions as e:
        return _error(400, str(e))
    pod = _pod(request)
    if pod is None:
        return _error(404, "pod does not exist")
    runtime = request.app[STREAMING].runtime
    container = request.match_info["container"]
    uid = str((pod.get("metadata") or {}).get("uid", ""))

    async def stream_url(cid: str) -> str:
        if attach:
            return await runtime.attach(
                cid, tty=opts.tty, stdin=opts.stdin, stdout=opts.stdout, stderr=opts.stderr
            )
        return await runtime.exec(
            cid,
            request.query.getall("command", []),
            tty=opts.tty,
            stdin=opts.stdin,
            stdout=opts.stdout,
            stderr=opts.stderr,
        )

    # The pod's status names the running container: one CRI call instead of two. It may be
    # a moment old (the container just restarted): the runtime refuses a container that is
    # not running, and then the runtime's own list decides, as it always does for the kubelet.
    hinted = _status_container_id(pod, container)
    url = None
    try:
        if hinted is not None:
            with contextlib.suppress(CriError):
                url = await stream_url(hinted)
        if url is None:
            cid = await _container_id(runtime, uid, container)
            if cid is None:
                return _error(500, f"container not found ({container!r})".replace("'", '"'))
            url = await stream_url(cid)
    except CriError as e:
        return _error(500, str(e))
    return await proxy_upgrade(request, url, opts)


async def exec_handler(request: web.Request) -> web.StreamResponse:
    return await _exec_or_attach(request, attach=False)


async def attach_handler(request: web.Request) -> web.StreamResponse:
    return await _exec_or_attach(request, attach=True)


async def port_forward_handler(request: web.Request) -> web.StreamResponse:
    try:
        ports = forward_ports(request.query.getall("port", []))
    except BadOptions as e:
        return _error(400, str(e))
    pod = _pod(request)
    if pod is None:
        return _error(404, "pod does not exist")
    runtime = request.app[STREAMING].runtime
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    try:
        sandboxes = await runtime.list_pod_sandbox(PodSandboxFilter(label_selector={POD_UID: uid}))
        ready = [s for s in sandboxes if s.state == SANDBOX_READY]
        if not ready:
            return _error(500, f"pod not found ({uid!r})".replace("'", '"'))
        sandbox = max(ready, key=lambda s: s.created_at)
        url = await runtime.port_forward(sandbox.id, ports)
    except CriError as e:
        return _error(500, str(e))
    return await proxy_upgrade(request, url)


async def run_handler(request: web.Request) -> web.StreamResponse:
    """``POST /run/...?cmd=<command>``: run the command (split on spaces, as the kubelet
    does for this legacy endpoint) and answer its stdout then stderr; a non-zero exit is a
    500 naming the command and the code."""
    pod = _pod(request)
    if pod is None:
        return _error(404, "pod does not exist")
    runtime = request.app[STREAMING].runtime
    container = request.match_info["container"]
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    cmd = request.query.get("cmd", "").split(" ")
    try:
        cid = await _container_id(runtime, uid, container)
        if cid is None:
            return _error(500, f"container not found ({container!r})".replace("'", '"'))
        result = await runtime.exec_sync(cid, cmd, 0)
    except CriError as e:
        return _error(500, str(e))
    output = bytes(result.stdout) + bytes(result.stderr)
    if result.exit_code != 0:
        printed = output.decode(errors="replace")
        return _error(500, f"command '{' '.join(cmd)}' exited with {result.exit_code}: {printed}")
    return web.Response(body=output, content_type="application/json")


routes = web.RouteTableDef()
for _method in ("GET", "POST"):
    routes.route(_method, "/exec/{ns}/{pod}/{container}")(exec_handler)
    routes.route(_method, "/exec/{ns}/{pod}/{uid}/{container}")(exec_handler)
    routes.route(_method, "/attach/{ns}/{pod}/{container}")(attach_handler)
    routes.route(_method, "/attach/{ns}/{pod}/{uid}/{container}")(attach_handler)
    routes.route(_method, "/portForward/{ns}/{pod}")(port_forward_handler)
    routes.route(_method, "/portForward/{ns}/{pod}/{uid}")(port_forward_handler)
routes.post("/run/{ns}/{pod}/{container}")(run_handler)
routes.post("/run/{ns}/{pod}/{uid}/{container}")(run_handler)


# --- the proxy ---------------------------------------------------------------------------


def upstream_request(
    request: web.Request, url: str, *, protocols: Sequence[str] | None = None
) -> tuple[str, int, bytes]:
    """(host, port, request head) replaying ``request`` to the runtime's ``url`` (pure
    apart from reading the request); ``protocols`` replace the WebSocket protocols offered."""
    host, port, target, netloc = _target(url)
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {netloc}"]
    for name, value in request.headers.items():
        low = name.lower()
        if low in _DROP or (protocols is not None and low == "sec-websocket-protocol"):
            continue
        lines.append(f"{name}: {value}")
    if protocols is not None:
        lines.append(f"Sec-WebSocket-Protocol: {', '.join(protocols)}")
    return host, port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_head(head: bytes) -> tuple[int, str, CIMultiDict[str]]:
    """(status, reason, headers) of an HTTP/1.1 response head."""
    text = head.decode("latin-1")
    status_line, *header_lines = text.split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"malformed status line {status_line!r}")
    headers: CIMultiDict[str] = CIMultiDict()
    for line in header_lines:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers.add(name.strip(), value.strip())
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers


class Plan:
    """How one streaming request is carried (see :mod:`nodeagent.server.bridge`)."""

    SPLICE: Final = "splice"
    V5_AS_V4: Final = "v5-as-v4"
    TRANSLATE: Final = "translate"
    TUNNEL: Final = "tunnel"


def plan(
    headers: Mapping[str, str],
    offered: Sequence[str],
    opts: StreamOptions | None,
    *,
    websockets: bool = True,
) -> tuple[str, list[str]]:
    """(plan, protocols for the runtime) for a request with ``headers`` offering the WebSocket
    ``offered`` protocols; ``opts`` for exec/attach, None for port forwarding (pure).

    As the kubelet with ``ExtendWebSocketsToKubelet``: a ``v5.channel.k8s.io`` WebSocket is
    translated to the runtime's SPDY streams (the runtime knows WebSocket only up to ``v4``,
    which has no close of stdin: without stdin, ``v5`` is ``v4`` on the wire and is spliced
    as such); a port-forward WebSocket offering ``SPDY/3.1+portforward.k8s.io`` is a tunnel
    for SPDY; everything else is spliced as it comes."""
    if not websockets or headers.get("Upgrade", "").lower() != "websocket":
        return Plan.SPLICE, []
    if opts is None:
        tunneled = wire.tunneled_protocols(offered)
        return (Plan.TUNNEL, tunneled) if tunneled else (Plan.SPLICE, [])
    if wire.V5_CHANNEL not in offered:
        return Plan.SPLICE, []
    if opts.stdin:
        return Plan.TRANSLATE, [wire.V4_CHANNEL]
    return Plan.V5_AS_V4, [wire.V4_CHANNEL]


def spdy_upgrade_request(url: str, protocols: Sequence[str]) -> tuple[str, int, bytes]:
    """(host, port, head) of a SPDY/3.1 upgrade to the runtime's ``url`` (pure)."""
    host, port, target, netloc = _target(url)
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {netloc}",
        "Connection: Upgrade",
        "Upgrade: SPDY/3.1",
        *(f"X-Stream-Protocol-Version: {p}" for p in protocols),
        "Content-Length: 0",
    ]
    return host, port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _target(url: str) -> tuple[str, int, str, str]:
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", ""):
        raise ValueError(f"unsupported streaming URL scheme {u.scheme!r} in {url!r}")
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    return u.hostname or "127.0.0.1", u.port or 80, target, u.netloc


async def proxy_upgrade(
    request: web.Request, url: str, opts: StreamOptions | None = None
) -> web.StreamResponse:
    """Connect the client's upgrade to the runtime's streaming ``url``; ``opts`` for
    exec/attach (the streams asked of the runtime), None for port forwarding."""
    offered = wire.subprotocols(request.headers.getall("Sec-WebSocket-Protocol", []))
    how, protocols = plan(
        request.headers, offered, opts, websockets=request.app[STREAMING].websockets
    )
    _log.v(2).info(
        "Streaming",
        path=request.path,
        method=request.method,
        upgrade=request.headers.get("Upgrade", ""),
        protocols=", ".join(offered) or request.headers.get("X-Stream-Protocol-Version", ""),
        bridge=how,
    )
    key = request.headers.get("Sec-WebSocket-Key", "")
    if how in (Plan.TRANSLATE, Plan.TUNNEL) and not key:
        return _error(400, "unable to upgrade: missing Sec-WebSocket-Key")
    if how in (Plan.TRANSLATE, Plan.TUNNEL):
        host, port, head = spdy_upgrade_request(url, protocols)
    else:
        host, port, head = upstream_request(request, url, protocols=protocols or None)
    body = await request.read() if how == Plan.SPLICE and request.body_exists else b""
    loop = asyncio.get_running_loop()
    try:
        transport, upstream = await loop.create_connection(Upstream, host, port)
    except OSError as e:
        return _error(502, f"error dialing backend: {e}")
    client: _Client | None = None
    try:
        transport.write(head + body)
        raw = await asyncio.wait_for(upstream.head, UPSTREAM_TIMEOUT)
        status, reason, headers = parse_head(raw)
        if status != 101:
            length = min(int(headers.get("Content-Length", "0") or 0), HEAD_LIMIT)
            return web.Response(
                status=status,
                reason=reason or None,
                body=await asyncio.wait_for(upstream.body(length), UPSTREAM_TIMEOUT),
                content_type=headers.get("Content-Type", "text/plain").split(";")[0],
            )
        response = _switching(how, key, reason, headers)
        if response.status != 101:
            return response
        client = _take_over(request)
        bridge = _bridge(how, opts, client.transport, transport)
        await response.prepare(request)
        bridge.start()
        upstream.attach(bridge)
        client.protocol.attach(bridge)
        await bridge.done
        return response
    except (OSError, ValueError) as e:
        _log.warning("Streaming proxy failed", url=url, error=str(e))
        return _error(502, f"streaming proxy failed: {e}")
    finally:
        transport.close()
        if client is not None:
            client.transport.close()


def _switching(how: str, key: str, reason: str, headers: Mapping[str, str]) -> web.StreamResponse:
    """The client's ``101`` for the runtime's ``101`` (``headers``); an error response when
    the runtime did not switch to SPDY where this side translates."""
    response = web.StreamResponse(status=101, reason=reason or "Switching Protocols")
    if how in (Plan.TRANSLATE, Plan.TUNNEL):
        if "spdy/3.1" not in headers.get("Upgrade", "").lower():
            return _error(500, "unable to upgrade: missing upgrade headers in response")
        chosen = headers.get("X-Stream-Protocol-Version", "").strip()
        if how == Plan.TRANSLATE:
            chosen = wire.V5_CHANNEL
        elif chosen:
            chosen = wire.TUNNEL_PREFIX + chosen
        response.headers["Upgrade"] = "websocket"
        response.headers["Connection"] = "Upgrade"
        response.headers["Sec-WebSocket-Accept"] = wire.accept_key(key)
        if chosen:
            response.headers["Sec-WebSocket-Protocol"] = chosen
        return response
    for name, value in headers.items():
        low = name.lower()
        if low in ("content-length", "transfer-encoding", "date"):
            continue
        if how == Plan.V5_AS_V4 and low == "sec-websocket-protocol":
            response.headers.add(name, wire.V5_CHANNEL)
        else:
            response.headers.add(name, value)
    return response


def _bridge(
    how: str,
    opts: StreamOptions | None,
    client: asyncio.Transport,
    upstream: asyncio.Transport,
) -> Bridge:
    if how == Plan.TUNNEL:
        return Tunnel(client, upstream)
    if how == Plan.V5_AS_V4:
        return V4Relay(client, upstream)
    if how != Plan.TRANSLATE:
        return Splice(client, upstream)
    assert opts is not None
    translator = SpdyTranslator(
        client, upstream, stdin=opts.stdin, stdout=opts.stdout, stderr=opts.stderr, tty=opts.tty
    )
    upstream.write(translator.open_streams())
    return translator


@dataclass(frozen=True)
class _Client:
    transport: asyncio.Transport
    protocol: ClientSide


def _take_over(request: web.Request) -> _Client:
    """Route the connection's further bytes to a bridge instead of aiohttp's HTTP parser.

    ``transport.set_protocol`` puts a :class:`ClientSide` in front of aiohttp's request
    handler. The client sends nothing before it has the ``101`` (both protocols wait for it);
    a WebSocket's early bytes that aiohttp kept as the upgrade's tail are taken first."""
    protocol: Any = request.protocol
    transport = request.transport
    assert isinstance(transport, asyncio.Transport)
    tail = bytes(getattr(protocol, "_message_tail", b"") or b"")
    if tail:
        protocol._message_tail = b""
    side = ClientSide(protocol, tail)
    transport.set_protocol(side)
    return _Client(transport, side)
