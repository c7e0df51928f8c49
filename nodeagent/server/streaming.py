"""``/exec``, ``/attach`` and ``/portForward``: ask the runtime for a streaming URL over CRI,
then proxy the client's upgraded connection to it, as the kubelet's streaming proxy does.

SPDY/3.1 (a POST) and WebSocket (a GET) are both HTTP/1.1 upgrades, so one proxy serves both:
the client's request is replayed to the runtime's streaming server (its path and query those
of the runtime's URL, ``Host`` rewritten, credentials dropped), the runtime's answer is relayed
(a refusal as is; a ``101`` switches both sides), then bytes are spliced both ways until one
side closes. The runtime speaks the streaming protocols itself (stdin/stdout/stderr/error/resize
channels, exit codes), so kubectl sees what it would see through the kubelet.

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

_log = get_logger("server")

HEAD_LIMIT: Final = 64 * 1024
CHUNK: Final = 64 * 1024
# Client bytes queued for the runtime before the client's socket stops being read.
PAUSE_AT: Final = 16
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
    return await proxy_upgrade(request, url)


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


def upstream_request(request: web.Request, url: str) -> tuple[str, int, bytes]:
    """(host, port, request head) replaying ``request`` to the runtime's ``url`` (pure
    apart from reading the request)."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", ""):
        raise ValueError(f"unsupported streaming URL scheme {u.scheme!r} in {url!r}")
    host = u.hostname or "127.0.0.1"
    port = u.port or 80
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {u.netloc}"]
    for name, value in request.headers.items():
        if name.lower() not in _DROP:
            lines.append(f"{name}: {value}")
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


async def proxy_upgrade(request: web.Request, url: str) -> web.StreamResponse:
    host, port, head = upstream_request(request, url)
    _log.v(2).info(
        "Streaming",
        path=request.path,
        method=request.method,
        upgrade=request.headers.get("Upgrade", ""),
        protocols=request.headers.get("Sec-WebSocket-Protocol", "")
        or request.headers.get("X-Stream-Protocol-Version", ""),
    )
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as e:
        return _error(502, f"error dialing backend: {e}")
    try:
        writer.write(head)
        body = await request.read() if request.body_exists else b""
        if body:
            writer.write(body)
        await writer.drain()
        raw = await reader.readuntil(b"\r\n\r\n")
        if len(raw) > HEAD_LIMIT:
            raise ValueError("response head too large")
        status, reason, headers = parse_head(raw[:-4])
        if status != 101:
            length = int(headers.get("Content-Length", "0") or 0)
            payload = await reader.readexactly(min(length, HEAD_LIMIT)) if length else b""
            return web.Response(
                status=status,
                reason=reason or None,
                body=payload,
                content_type=headers.get("Content-Type", "text/plain").split(";")[0],
            )
        response = web.StreamResponse(status=101, reason=reason or "Switching Protocols")
        for name, value in headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "date"):
                response.headers.add(name, value)
        incoming = _take_over(request)
        await response.prepare(request)
        await _splice(request, response, incoming, reader, writer)
        return response
    except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
        _log.warning("Streaming proxy failed", url=url, error=str(e))
        return _error(502, f"streaming proxy failed: {e}")
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


class _Incoming:
    """The client's bytes after the switch: a queue fed by the connection's protocol,
    reading paused while the runtime has not taken up to ``PAUSE_AT`` chunks."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._transport = transport
        self._paused = False

    def feed(self, data: bytes) -> None:
        self.queue.put_nowait(data)
        if self.queue.qsize() >= PAUSE_AT and not self._paused:
            self._paused = True
            self._transport.pause_reading()

    def eof(self) -> None:
        self.queue.put_nowait(None)

    def taken(self) -> None:
        if self._paused and self.queue.qsize() < PAUSE_AT // 2:
            self._paused = False
            with contextlib.suppress(Exception):
                self._transport.resume_reading()


class _SplicedProtocol(asyncio.Protocol):
    """Stands in for aiohttp's request handler on the transport after the switch: bytes and
    EOF go to the proxy; loss of the connection and write flow control still reach aiohttp
    (its writer drains on them, and it must learn the connection is gone)."""

    def __init__(self, incoming: _Incoming, original: asyncio.BaseProtocol) -> None:
        self._incoming = incoming
        self._original = original

    def data_received(self, data: bytes) -> None:
        self._incoming.feed(data)

    def eof_received(self) -> bool:
        self._incoming.eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._incoming.eof()
        self._original.connection_lost(exc)

    def pause_writing(self) -> None:
        self._original.pause_writing()

    def resume_writing(self) -> None:
        self._original.resume_writing()


def _take_over(request: web.Request) -> _Incoming:
    """Route the connection's further bytes to the proxy instead of aiohttp's HTTP parser.

    ``transport.set_protocol`` puts a :class:`_SplicedProtocol` in front of aiohttp's
    request handler. The client sends nothing before it has the ``101`` (both protocols wait
    for it); a WebSocket's early bytes that aiohttp kept as the upgrade's tail are taken
    first."""
    protocol: Any = request.protocol
    transport = request.transport
    assert transport is not None
    incoming = _Incoming(transport)
    tail = getattr(protocol, "_message_tail", b"")
    if tail:
        incoming.feed(bytes(tail))
        protocol._message_tail = b""
    transport.set_protocol(_SplicedProtocol(incoming, protocol))
    return incoming


async def _splice(
    request: web.Request,
    response: web.StreamResponse,
    incoming: _Incoming,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    async def up() -> None:
        while (data := await incoming.queue.get()) is not None:
            writer.write(data)
            incoming.taken()
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    async def down() -> None:
        while data := await reader.read(CHUNK):
            await response.write(data)

    tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
    try:
        # The runtime closing ends the session (the exit status has been sent by then).
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if tasks[1] not in done:
            # The client is gone or half-closed: give the runtime a moment to finish.
            await asyncio.wait([tasks[1]], timeout=1.0)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        transport = request.transport
        if transport is not None:
            transport.close()
