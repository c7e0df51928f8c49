"""The kubelet API's listening socket, with the bounds of the Go HTTP server the kubelet runs
(``pkg/kubelet/server``: ``IdleTimeout`` 90 s, ``MaxHeaderBytes`` 1 MiB) and a few of its own.

- **Request heads up to Go's size**: a request line plus headers of up to ``MaxHeaderBytes``
  + 4096 bytes (Go's read limit for a head) is accepted on every route, so ``kubectl exec``
  with a long command line works (its arguments travel in the URL); beyond that the answer is
  Go's ``431 Request Header Fields Too Large`` and the connection is closed. aiohttp's own
  per-line limits (8 KiB) are raised to that size and the total is counted here
  (:class:`BoundedRequestHandler`).
- **Idle connections are closed**: a connection gets ``IdleTimeout`` to send the head of its
  first request and between requests (Go waits ``ReadTimeout``, 4 h, for a first request: a
  client that completes TLS and sends nothing would hold its descriptor that long); a TLS
  handshake gets ``HANDSHAKE_TIMEOUT``. A request being served is never cut: ``logs -f``,
  exec, attach and port-forward streams run as long as both ends keep them (Go's 4 h
  ``ReadTimeout``/``WriteTimeout`` are not applied to them either).
- **A cap on open connections** (``max_connections``, counting those still in their TLS
  handshake): one more is closed at once, before any TLS work, while the others go on.

Connections are accepted as plain TCP, and TLS is started on each (``loop.start_tls``) so that
the cap is checked before the handshake; aiohttp's request handler then runs on the TLS
transport as it would under ``TCPSite``.
"""

from __future__ import annotations

import asyncio
import resource
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from nodeagent.log import Logger, get_logger
from nodeagent.tasks import cancel_and_wait

IDLE_TIMEOUT: Final = 90.0
"""The kubelet's ``IdleTimeout`` ("matches http.DefaultTransport keep-alive timeout")."""
MAX_HEADER_BYTES: Final = 1 << 20
"""The kubelet's ``MaxHeaderBytes``."""
HEAD_SLOP: Final = 4096
"""Go reads a head up to ``MaxHeaderBytes`` + 4096 before answering 431."""
MAX_HEADERS: Final = 1024
"""Header lines per request (Go counts only bytes; 1024 lines is far past any client)."""
HANDSHAKE_TIMEOUT: Final = 10.0
"""Seconds a client gets to finish TLS: Go's HTTP clients (the apiserver's, kubectl's) give up
a handshake after 10 s (``TLSHandshakeTimeout``), so a longer one serves nobody."""
TOO_LARGE: Final = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
    b"431 Request Header Fields Too Large"
)


def default_max_connections() -> int:
    """A quarter of the process's descriptor limit (a stream holds two: the client's and the
    runtime's; the rest of the agent needs its own), at least 64."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(64, soft // 4)


@dataclass(frozen=True, kw_only=True)
class Limits:
    idle_timeout: float = IDLE_TIMEOUT
    max_head_bytes: int = MAX_HEADER_BYTES + HEAD_SLOP
    max_headers: int = MAX_HEADERS
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    max_connections: int = 0
    """0: :func:`default_max_connections`."""

    def connections(self) -> int:
        return self.max_connections or default_max_connections()


class BoundedRequestHandler(web.RequestHandler):
    """aiohttp's request handler with Go's bound on a request head as a whole (request line
    and headers), counted from the first byte of a head until the parser has it; ``on_lost``
    is called once when the connection ends. The bytes of a request body are not counted.
    It reads the handler's parsing state (``_payload_parser``, ``_upgraded``,
    ``_request_count``, ``_messages``: aiohttp 3.14); ``tests/unit/server/test_listener.py``
    fails if an aiohttp upgrade moves them."""

    def __init__(
        self,
        manager: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        limits: Limits,
        on_lost: Callable[[], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=limits.idle_timeout,
            max_line_size=limits.max_head_bytes,
            max_field_size=limits.max_head_bytes,
            max_headers=limits.max_headers,
            **kwargs,
        )
        self._head_limit = limits.max_head_bytes
        self._head_bytes = 0
        self._last_payload: Any = None
        self._on_lost: Callable[[], None] | None = on_lost

    def _reading_head(self) -> bool:
        if self._payload_parser is not None or self._upgraded:
            return False  # a WebSocket's frames or an upgraded stream: not HTTP
        body = self._last_payload
        return body is None or body.is_eof()

    def data_received(self, data: bytes) -> None:
        if self._reading_head():
            self._head_bytes += len(data)
            if self._head_bytes > self._head_limit:
                self._refuse_head()
                return
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._head_bytes = 0
            self._last_payload = self._messages[-1][1] if self._messages else None

    def _refuse_head(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(TOO_LARGE)
        self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        if self._on_lost is not None:
            on_lost, self._on_lost = self._on_lost, None
            on_lost()


class _Refused(asyncio.Protocol):
    """Over the cap: closed before anything is read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _Handshaking(asyncio.Protocol):
    """Holds a new connection while its TLS handshake runs: TLS bytes go to the handshake;
    application bytes that arrive before the request handler takes over are kept for it."""

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self.early = bytearray()
        self.eof = False
        self.lost = False
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # start_tls reads the ClientHello, not this protocol
        self._task = self._listener.spawn(self._listener.upgrade(transport, self))

    def data_received(self, data: bytes) -> None:
        self.early += data

    def eof_received(self) -> bool:
        self.eof = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True

    def gone(self) -> bool:
        return self.lost


class Listener:
    """Accepts connections for ``server`` (an aiohttp low-level server: ``runner.server``)
    on ``host:port``, TLS with ``ssl_context`` when given, within ``limits``."""

    def __init__(
        self,
        server: web.Server,
        *,
        ssl_context: ssl.SSLContext | None,
        limits: Limits | None = None,
        log: Logger | None = None,
    ) -> None:
        self._server = server
        self._ssl = ssl_context
        self._limits = limits or Limits()
        self._max = self._limits.connections()
        self._log = log or get_logger("server")
        self._socket_server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.open = 0
        """Connections accepted and not yet closed (in their handshake or served)."""
        self.refused = 0
        self._full = False

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._socket_server = await loop.create_server(
            self._accept, host, port, reuse_address=True, backlog=512
        )

    @property
    def port(self) -> int:
        assert self._socket_server is not None
        return int(self._socket_server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop accepting; handshakes in flight are dropped (served connections are the
        runner's to close)."""
        if self._socket_server is not None:
            self._socket_server.close()
        await cancel_and_wait(*self._tasks)

    def spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _accept(self) -> asyncio.Protocol:
        if self.open >= self._max:
            self.refused += 1
            if not self._full:  # once per time the cap is reached, not per connection
                self._full = True
                self._log.warning(
                    "Refusing connections: too many open", open=self.open, limit=self._max
                )
            return _Refused()
        self.open += 1
        if self._ssl is None:
            return self._handler()
        return _Handshaking(self)

    def _release(self) -> None:
        self.open -= 1
        if self._full and self.open < self._max:
            self._full = False
            self._log.info("Accepting connections again", open=self.open, refused=self.refused)

    def _handler(self) -> BoundedRequestHandler:
        return BoundedRequestHandler(
            self._server,
            loop=asyncio.get_running_loop(),
            limits=self._limits,
            on_lost=self._release,
            access_log=None,
        )

    async def upgrade(self, transport: asyncio.Transport, pending: _Handshaking) -> None:
        """TLS on an accepted connection, then aiohttp's handler on it."""
        assert self._ssl is not None
        loop = asyncio.get_running_loop()
        if pending.gone():  # before its handshake began
            self._release()
            return
        try:
            tls = await loop.start_tls(
                transport,
                pending,
                self._ssl,
                server_side=True,
                ssl_handshake_timeout=self._limits.handshake_timeout,
            )
        except BaseException as e:
            transport.close()
            self._release()
            if not isinstance(e, Exception):
                raise
            self._log.v(4).info("TLS handshake failed", error=str(e) or type(e).__name__)
            return
        if tls is None or pending.gone():
            if tls is not None:
                tls.close()
            self._release()
            return
        handler = self._handler()
        tls.set_protocol(handler)
        handler.connection_made(tls)
        if pending.early:
            handler.data_received(bytes(pending.early))
        if pending.eof:
            handler.eof_received()
