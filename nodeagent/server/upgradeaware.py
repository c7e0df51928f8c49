"""The upgrade-aware proxy between a client's upgraded connection and the runtime's
streaming server (the kubelet's ``upgradeaware.go`` and its WebSocket translators).

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
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from multidict import CIMultiDict

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


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """The streams an exec or attach asks for."""

    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


def error_response(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


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
    request: web.Request, url: str, opts: StreamOptions | None = None, *, websockets: bool
) -> web.StreamResponse:
    """Connect the client's upgrade to the runtime's streaming ``url``; ``opts`` for
    exec/attach (the streams asked of the runtime), None for port forwarding; ``websockets``:
    ``ExtendWebSocketsToKubelet`` (translate WebSockets, see :func:`plan`)."""
    offered = wire.subprotocols(request.headers.getall("Sec-WebSocket-Protocol", []))
    how, protocols = plan(request.headers, offered, opts, websockets=websockets)
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
        return error_response(400, "unable to upgrade: missing Sec-WebSocket-Key")
    if how in (Plan.TRANSLATE, Plan.TUNNEL):
        host, port, head = spdy_upgrade_request(url, protocols)
    else:
        host, port, head = upstream_request(request, url, protocols=protocols or None)
    body = await request.read() if how == Plan.SPLICE and request.body_exists else b""
    loop = asyncio.get_running_loop()
    try:
        transport, upstream = await loop.create_connection(Upstream, host, port)
    except OSError as e:
        return error_response(502, f"error dialing backend: {e}")
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
        return error_response(502, f"streaming proxy failed: {e}")
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
            return error_response(500, "unable to upgrade: missing upgrade headers in response")
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
