"""The byte paths between a client's upgraded connection and the runtime's streaming server,
run from the transports' protocol callbacks: each chunk is written on (or translated and
written on) in the ``data_received`` that brought it, with no queue and no task per chunk.
Flow control pairs the two sides: a side whose write buffer is full pauses reading the other.

Three bridges, chosen by :mod:`nodeagent.server.streaming`:

- :class:`Splice`: bytes both ways, unchanged (SPDY clients, WebSocket ``v4`` and older);
- :class:`V4Relay`: ``v5`` without stdin, which the runtime serves as ``v4`` (the same frames),
  its exit status written as the kubelet's translator writes it;
- :class:`Tunnel`: a port-forward WebSocket that carries SPDY (``SPDY/3.1+portforward.k8s.io``,
  the kubelet's tunneling handler): binary messages in, their payload to the runtime's SPDY
  connection; the runtime's bytes out as binary messages;
- :class:`SpdyTranslator`: a ``v5.channel.k8s.io`` WebSocket exec/attach with stdin, to the
  runtime's SPDY (``v4.channel.k8s.io``) streams, as the kubelet's stream translator does (the
  runtime speaks only ``v4`` over WebSocket, which cannot carry the close of stdin).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from nodeagent.server import wire

HEAD_LIMIT: Final = 64 * 1024
FINISH_GRACE: Final = 1.0
"""Seconds the runtime gets to finish after the client half-closed a spliced connection."""


class Bridge:
    """Both transports and the end of the session (``done``)."""

    def __init__(self, client: asyncio.Transport, upstream: asyncio.Transport) -> None:
        self.client = client
        self.upstream = upstream
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def start(self) -> None:
        """Called once the client has the ``101``."""

    def from_client(self, data: bytes) -> None:
        raise NotImplementedError

    def from_upstream(self, data: bytes) -> None:
        raise NotImplementedError

    def client_closed(self) -> None:
        self.finish()

    def upstream_closed(self) -> None:
        self.finish()

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    # flow control: a side that cannot write stops the other side's reading
    def client_full(self, full: bool) -> None:
        _reading(self.upstream, not full)

    def upstream_full(self, full: bool) -> None:
        _reading(self.client, not full)


def _reading(transport: asyncio.Transport, on: bool) -> None:
    with contextlib.suppress(Exception):
        if on:
            transport.resume_reading()
        else:
            transport.pause_reading()


class Splice(Bridge):
    def from_client(self, data: bytes) -> None:
        self.upstream.write(data)

    def from_upstream(self, data: bytes) -> None:
        self.client.write(data)

    def client_closed(self) -> None:
        # Half-closed or gone: the runtime gets a moment to send what it still has (the exit
        # status follows the end of stdin).
        if self.done.done():
            return
        with contextlib.suppress(Exception):
            if self.upstream.can_write_eof():
                self.upstream.write_eof()
        asyncio.get_running_loop().call_later(FINISH_GRACE, self.finish)


class V4Relay(Splice):
    """A ``v5`` client's exec/attach without stdin, served by the runtime's own ``v4``
    WebSocket: the client's frames go on unchanged (``v5`` without stdin is ``v4`` on the wire);
    the runtime's are passed back but for the exit status, which the client gets at the end as
    the kubelet's translator writes it (:func:`wire.translated_status`)."""

    def __init__(self, client: asyncio.Transport, upstream: asyncio.Transport) -> None:
        super().__init__(client, upstream)
        self._frames = wire.FrameReader()
        self._channel = -1
        self._status = bytearray()
        self._ended = False

    def from_upstream(self, data: bytes) -> None:
        try:
            frames = self._frames.feed(data)
        except wire.WireError:
            self.upstream_closed()
            return
        out = []
        for f in frames:
            payload = f.payload
            if f.opcode == wire.OP_BINARY and payload:
                self._channel = payload[0]
                if self._channel == wire.ERROR:
                    self._status += payload[1:]
                    continue
            elif f.opcode == wire.OP_CONTINUATION and self._channel == wire.ERROR:
                self._status += payload
                continue
            elif f.opcode == wire.OP_CLOSE:
                continue  # the close follows the status, at the end
            out.append(wire.ws_header(f.opcode, len(payload), fin=f.fin) + payload)
        if out:
            self.client.write(b"".join(out))

    def upstream_closed(self) -> None:
        if not self._ended:
            self._ended = True
            with contextlib.suppress(Exception):
                self.client.write(
                    wire.ws_message(wire.ERROR, wire.translated_status(bytes(self._status)))
                    + wire.ws_close()
                )
        self.finish()


class _WebSocketClient(Bridge):
    """The client side is a WebSocket this bridge frames itself."""

    def __init__(self, client: asyncio.Transport, upstream: asyncio.Transport) -> None:
        super().__init__(client, upstream)
        self._frames = wire.FrameReader()
        self._closing = False

    def from_client(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            frames = self._frames.feed(data)
        except wire.WireError as e:
            self.close(e.code)
            return
        for frame in frames:
            op = frame.opcode
            if op in (wire.OP_BINARY, wire.OP_CONTINUATION):
                self.message(frame)
            elif op == wire.OP_PING:
                self.client.write(wire.ws_frame(wire.OP_PONG, frame.payload))
            elif op == wire.OP_CLOSE:
                self.close(wire.CLOSE_NORMAL)
                return
            elif op != wire.OP_PONG:
                self.close(wire.CLOSE_PROTOCOL_ERROR)
                return

    def message(self, frame: wire.Frame) -> None:
        raise NotImplementedError

    def close(self, code: int) -> None:
        """Send the close frame and end the session."""
        if not self._closing:
            self._closing = True
            with contextlib.suppress(Exception):
                self.client.write(wire.ws_close(code))
        self.finish()

    def upstream_closed(self) -> None:
        self.close(wire.CLOSE_NORMAL)


class Tunnel(_WebSocketClient):
    def message(self, frame: wire.Frame) -> None:
        if frame.payload:
            self.upstream.write(frame.payload)

    def from_upstream(self, data: bytes) -> None:
        if not self._closing:
            self.client.write(wire.ws_header(wire.OP_BINARY, len(data)) + data)


class SpdyTranslator(_WebSocketClient):
    """``v5.channel.k8s.io`` on the client side, the runtime's SPDY streams on the other."""

    def __init__(
        self,
        client: asyncio.Transport,
        upstream: asyncio.Transport,
        *,
        stdin: bool,
        stdout: bool,
        stderr: bool,
        tty: bool,
    ) -> None:
        super().__init__(client, upstream)
        self._spdy = wire.SpdyReader()
        self._channel = -1
        kinds = [("error", wire.ERROR)]
        kinds += [("stdin", wire.STDIN)] if stdin else []
        kinds += [("stdout", wire.STDOUT)] if stdout else []
        kinds += [("stderr", wire.STDERR)] if stderr else []
        kinds += [("resize", wire.RESIZE)] if tty else []
        self._ids = {channel: 1 + 2 * i for i, (_, channel) in enumerate(kinds)}
        self._kinds = kinds
        self._out = {
            sid: ch for ch, sid in self._ids.items() if ch not in (wire.STDIN, wire.RESIZE)
        }
        self._stdin_open = stdin
        self._first = wire.STDOUT if stdout else wire.STDERR if stderr else wire.ERROR
        self._status = bytearray()

    def open_streams(self) -> bytes:
        """The SYN_STREAM frames of every stream, to be sent at once (the runtime answers
        each; nothing waits for the answers)."""
        z = wire.HeaderCompressor()
        return b"".join(
            wire.syn_stream(z, self._ids[ch], [("streamType", kind)]) for kind, ch in self._kinds
        )

    def start(self) -> None:
        # As the kubelet's translator: an empty message on the first output channel tells the
        # client the session is open.
        self.client.write(wire.ws_message(self._first, b""))

    def message(self, frame: wire.Frame) -> None:
        payload = frame.payload
        if frame.opcode == wire.OP_BINARY:
            if not payload:
                return
            self._channel, payload = payload[0], payload[1:]
        channel = self._channel
        if channel == wire.STDIN:
            if self._stdin_open and payload:
                self.upstream.write(wire.data_frame(self._ids[wire.STDIN], payload))
        elif channel == wire.RESIZE:
            sid = self._ids.get(wire.RESIZE)
            if sid is not None and payload:
                self.upstream.write(wire.data_frame(sid, payload))
        elif (
            channel == wire.CLOSE_SIGNAL
            and payload[:1] == bytes((wire.STDIN,))
            and self._stdin_open
        ):
            self._stdin_open = False
            self.upstream.write(wire.data_frame(self._ids[wire.STDIN], b"", fin=True))

    def from_upstream(self, data: bytes) -> None:
        try:
            frames = self._spdy.feed(data)
        except wire.WireError:
            self.close(wire.CLOSE_PROTOCOL_ERROR)
            return
        for f in frames:
            if not f.control:
                channel = self._out.get(f.kind)
                if channel == wire.ERROR:
                    self._status += f.data
                elif channel is not None and f.data and not self._closing:
                    self.client.write(wire.ws_message(channel, f.data))
            elif f.kind == wire.PING:
                self.upstream.write(wire.ping_frame(int.from_bytes(f.data[:4], "big")))
            # SYN_REPLY, RST_STREAM, SETTINGS, GOAWAY, HEADERS, WINDOW_UPDATE: nothing to do;
            # the runtime closes the connection after the exit status.

    def upstream_closed(self) -> None:
        if not self._closing:
            status = wire.translated_status(bytes(self._status))
            with contextlib.suppress(Exception):
                self.client.write(wire.ws_message(wire.ERROR, status))
        self.close(wire.CLOSE_NORMAL)


# --- the protocols ----------------------------------------------------------------------------


class Upstream(asyncio.Protocol):
    """The connection to the runtime's streaming server: its response head first (``head``:
    the head's bytes without the blank line), then every byte to the bridge."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.head: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._buf = bytearray()
        self._bridge: Bridge | None = None
        self._closed = False
        self._body: tuple[int, asyncio.Future[bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._bridge is not None:
            self._bridge.from_upstream(data)
            return
        self._buf += data
        if self.head.done():
            self._body_ready()
            return
        end = self._buf.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(self._buf[:end])
            del self._buf[: end + 4]
            self.head.set_result(head)
        elif len(self._buf) > HEAD_LIMIT:
            self.head.set_exception(ValueError("response head too large"))

    def body(self, length: int) -> asyncio.Future[bytes]:
        """The ``length`` bytes after the head (a refusal's text), or fewer if the runtime
        closes first."""
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._body = (length, future)
        self._body_ready()
        return future

    def _body_ready(self) -> None:
        if self._body is None:
            return
        length, future = self._body
        if (len(self._buf) >= length or self._closed) and not future.done():
            future.set_result(bytes(self._buf[:length]))

    def eof_received(self) -> bool:
        self._lost()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost()

    def _lost(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._body_ready()
        if not self.head.done():
            self.head.set_exception(ConnectionError("the runtime closed the connection"))
        if self._bridge is not None:
            self._bridge.upstream_closed()

    def attach(self, bridge: Bridge) -> None:
        """From now on bytes go to ``bridge`` (those already received first)."""
        self._bridge = bridge
        if self._buf:
            data = bytes(self._buf)
            self._buf.clear()
            bridge.from_upstream(data)
        if self._closed:
            bridge.upstream_closed()

    def pause_writing(self) -> None:
        if self._bridge is not None:
            self._bridge.upstream_full(True)

    def resume_writing(self) -> None:
        if self._bridge is not None:
            self._bridge.upstream_full(False)


class ClientSide(asyncio.Protocol):
    """Stands in for aiohttp's request handler on the client's transport after the switch:
    bytes and EOF go to the bridge; loss of the connection and write flow control still reach
    aiohttp too (it must learn the connection is gone)."""

    def __init__(self, original: asyncio.BaseProtocol, early: bytes) -> None:
        self._original = original
        self._early = bytearray(early)
        self._bridge: Bridge | None = None
        self._closed = False

    def attach(self, bridge: Bridge) -> None:
        self._bridge = bridge
        if self._early:
            data = bytes(self._early)
            self._early.clear()
            bridge.from_client(data)
        if self._closed:
            bridge.client_closed()

    def data_received(self, data: bytes) -> None:
        if self._bridge is None:
            self._early += data
        else:
            self._bridge.from_client(data)

    def eof_received(self) -> bool:
        self._close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._close()
        self._original.connection_lost(exc)

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._bridge is not None:
                self._bridge.client_closed()

    def pause_writing(self) -> None:
        self._original.pause_writing()
        if self._bridge is not None:
            self._bridge.client_full(True)

    def resume_writing(self) -> None:
        self._original.resume_writing()
        if self._bridge is not None:
            self._bridge.client_full(False)
