"""Wire formats of the streaming bridge, pure: WebSocket frames (RFC 6455) and SPDY/3.1
frames, as the kubelet's stream translator and tunnel put them on the wire.

Written from the protocols' descriptions, not from any implementation:

- **WebSocket**: a frame is ``FIN|RSV|opcode`` (1 byte), ``MASK|length`` (7 bits; 126: a
  16-bit length follows, 127: a 64-bit one), the 4-byte masking key when masked, the payload.
  A client's frames are masked, a server's are not. The Kubernetes channel protocols
  (``v4``/``v5.channel.k8s.io``) put the channel number in the first byte of each binary
  message; ``v5`` adds the close signal: a message on channel 255 whose payload names the
  stream the client has finished writing.
- **SPDY/3.1**: a control frame is ``1|version(15)|type(16)|flags(8)|length(24)`` then its
  data; a data frame is ``0|stream-id(31)|flags(8)|length(24)`` then its data. SYN_STREAM's
  header block is zlib-compressed, one compression context per direction for the whole
  connection. This side only sends header blocks (its streams' ``streamType``): they are
  compressed without the preset dictionary (a receiver only needs it when the stream's header
  says so) and the peer's header blocks are skipped, never read.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

# --- WebSocket --------------------------------------------------------------------------------

OP_CONTINUATION: Final = 0x0
OP_TEXT: Final = 0x1
OP_BINARY: Final = 0x2
OP_CLOSE: Final = 0x8
OP_PING: Final = 0x9
OP_PONG: Final = 0xA

CLOSE_NORMAL: Final = 1000
CLOSE_PROTOCOL_ERROR: Final = 1002
CLOSE_TOO_BIG: Final = 1009

# The Kubernetes remote command channels.
STDIN: Final = 0
STDOUT: Final = 1
STDERR: Final = 2
ERROR: Final = 3
RESIZE: Final = 4
CLOSE_SIGNAL: Final = 255

V4_CHANNEL: Final = "v4.channel.k8s.io"
V5_CHANNEL: Final = "v5.channel.k8s.io"
TUNNEL_PREFIX: Final = "SPDY/3.1+"
K8S_SUFFIX: Final = ".k8s.io"

MAX_MESSAGE: Final = 64 * 1024 * 1024
"""A client frame longer than this ends the session (close 1009)."""

_ACCEPT_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WireError(ValueError):
    """The peer broke the framing; ``code`` is the WebSocket close code to answer with."""

    def __init__(self, message: str, code: int = CLOSE_PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1(key.encode() + _ACCEPT_GUID).digest()).decode()


def subprotocols(header_values: Iterable[str]) -> list[str]:
    """The protocols a client offers in its ``Sec-WebSocket-Protocol`` headers, in order."""
    return [p.strip() for value in header_values for p in value.split(",") if p.strip()]


def tunneled_protocols(offered: Iterable[str]) -> list[str]:
    """The SPDY protocols a port-forward tunnel offers (``SPDY/3.1+portforward.k8s.io`` ->
    ``portforward.k8s.io``), as the kubelet's tunneling handler filters them."""
    return [
        p.removeprefix(TUNNEL_PREFIX)
        for p in offered
        if p.startswith(TUNNEL_PREFIX) and p.endswith(K8S_SUFFIX)
    ]


def ws_header(opcode: int, length: int, *, fin: bool = True) -> bytes:
    """The head of an unmasked (server) frame carrying ``length`` payload bytes."""
    first = (0x80 if fin else 0) | opcode
    if length < 126:
        return bytes((first, length))
    if length < 1 << 16:
        return bytes((first, 126)) + length.to_bytes(2, "big")
    return bytes((first, 127)) + length.to_bytes(8, "big")


def ws_frame(opcode: int, payload: bytes = b"") -> bytes:
    return ws_header(opcode, len(payload)) + payload


def ws_close(code: int = CLOSE_NORMAL, reason: str = "") -> bytes:
    return ws_frame(OP_CLOSE, code.to_bytes(2, "big") + reason.encode()[:120])


def ws_message(channel: int, data: bytes) -> bytes:
    """A binary message on a Kubernetes channel, in one frame."""
    return ws_header(OP_BINARY, len(data) + 1) + bytes((channel,)) + data


def unmask(key: bytes, data: bytes) -> bytes:
    """XOR ``data`` with the repeating 4-byte ``key`` (in C, through big integers)."""
    n = len(data)
    if not n:
        return b""
    pad = key * (n // 4 + 1)
    return (int.from_bytes(data, "little") ^ int.from_bytes(pad[:n], "little")).to_bytes(
        n, "little"
    )


def mask_frame(opcode: int, payload: bytes, key: bytes, *, fin: bool = True) -> bytes:
    """A masked (client) frame: tests and clients only."""
    n = len(payload)
    first = (0x80 if fin else 0) | opcode
    if n < 126:
        head = bytes((first, 0x80 | n))
    elif n < 1 << 16:
        head = bytes((first, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((first, 0x80 | 127)) + n.to_bytes(8, "big")
    return head + key + unmask(key, payload)


@dataclass(frozen=True, slots=True)
class Frame:
    fin: bool
    opcode: int
    payload: bytes


class FrameReader:
    """Incremental WebSocket frame parser: :meth:`feed` returns the frames completed."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos, end = 0, len(buf)
        while end - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            if b0 & 0x70:
                raise WireError("reserved bits set (no extension was negotiated)")
            length, at = b1 & 0x7F, pos + 2
            if length == 126:
                if end - at < 2:
                    break
                length, at = int.from_bytes(buf[at : at + 2], "big"), at + 2
            elif length == 127:
                if end - at < 8:
                    break
                length, at = int.from_bytes(buf[at : at + 8], "big"), at + 8
            if length > MAX_MESSAGE:
                raise WireError(f"frame of {length} bytes is too large", CLOSE_TOO_BIG)
            masked = b1 & 0x80
            if end - at < length + (4 if masked else 0):
                break
            if masked:
                key = bytes(buf[at : at + 4])
                at += 4
                payload = unmask(key, bytes(buf[at : at + length]))
            else:
                payload = bytes(buf[at : at + length])
            frames.append(Frame(bool(b0 & 0x80), b0 & 0x0F, payload))
            pos = at + length
        if pos:
            del buf[:pos]
        return frames


# --- SPDY/3.1 ---------------------------------------------------------------------------------

SPDY_VERSION: Final = 3
SYN_STREAM: Final = 1
SYN_REPLY: Final = 2
RST_STREAM: Final = 3
SETTINGS: Final = 4
PING: Final = 6
GOAWAY: Final = 7
HEADERS: Final = 8
WINDOW_UPDATE: Final = 9

FLAG_FIN: Final = 0x01
MAX_DATA: Final = (1 << 24) - 1


def _control(kind: int, flags: int, data: bytes) -> bytes:
    return (
        (0x8000 | SPDY_VERSION).to_bytes(2, "big")
        + kind.to_bytes(2, "big")
        + bytes((flags,))
        + len(data).to_bytes(3, "big")
        + data
    )


def data_frame(stream_id: int, data: bytes, *, fin: bool = False) -> bytes:
    """One or more DATA frames (a frame holds at most 16 MiB - 1)."""
    out = bytearray()
    view = memoryview(data)
    while True:
        chunk, view = view[:MAX_DATA], view[MAX_DATA:]
        last = not len(view)
        flags = FLAG_FIN if (fin and last) else 0
        out += (stream_id & 0x7FFFFFFF).to_bytes(4, "big")
        out += bytes((flags,)) + len(chunk).to_bytes(3, "big")
        out += chunk
        if last:
            return bytes(out)


def ping_frame(ping_id: int) -> bytes:
    return _control(PING, 0, ping_id.to_bytes(4, "big"))


class HeaderCompressor:
    """The sending side's header compression context (one per connection)."""

    __slots__ = ("_z",)

    def __init__(self) -> None:
        self._z = zlib.compressobj(6, zlib.DEFLATED, 15)

    def block(self, headers: Iterable[tuple[str, str]]) -> bytes:
        pairs = list(headers)
        raw = bytearray(len(pairs).to_bytes(4, "big"))
        for name, value in pairs:
            n, v = name.lower().encode(), value.encode()
            raw += len(n).to_bytes(4, "big") + n + len(v).to_bytes(4, "big") + v
        return self._z.compress(bytes(raw)) + self._z.flush(zlib.Z_SYNC_FLUSH)


def syn_stream(
    compressor: HeaderCompressor,
    stream_id: int,
    headers: Iterable[tuple[str, str]],
    *,
    fin: bool = False,
    priority: int = 0,
) -> bytes:
    body = (
        (stream_id & 0x7FFFFFFF).to_bytes(4, "big")
        + (0).to_bytes(4, "big")  # associated-to stream: none
        + bytes(((priority & 0x7) << 5, 0))  # priority, slot
        + compressor.block(headers)
    )
    return _control(SYN_STREAM, FLAG_FIN if fin else 0, body)


@dataclass(frozen=True, slots=True)
class SpdyFrame:
    control: bool
    kind: int
    """The control frame's type; for a data frame, its stream ID."""
    flags: int
    data: bytes


class SpdyReader:
    """Incremental SPDY frame parser."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[SpdyFrame]:
        buf = self._buf
        buf += data
        frames: list[SpdyFrame] = []
        pos, end = 0, len(buf)
        while end - pos >= 8:
            length = int.from_bytes(buf[pos + 5 : pos + 8], "big")
            if end - pos < 8 + length:
                break
            word = int.from_bytes(buf[pos : pos + 4], "big")
            control = bool(word & 0x80000000)
            kind = word & 0xFFFF if control else word & 0x7FFFFFFF
            if control and (word >> 16) & 0x7FFF != SPDY_VERSION:
                raise WireError(f"SPDY version {(word >> 16) & 0x7FFF} (want 3)")
            frames.append(
                SpdyFrame(control, kind, buf[pos + 4], bytes(buf[pos + 8 : pos + 8 + length]))
            )
            pos += 8 + length
        if pos:
            del buf[:pos]
        return frames


# --- the exit status, as the kubelet's stream translator writes it ----------------------------


def _go_json(value: object) -> bytes:
    """JSON as Go's encoder writes it: compact, with ``<``, ``>``, ``&`` escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return text.encode()


def _internal_error(message: str) -> bytes:
    return _go_json(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"Internal error occurred: {message}",
            "reason": "InternalError",
            "details": {"causes": [{"message": message}]},
            "code": 500,
        }
    )


def translated_status(raw: bytes) -> bytes:
    """The status the kubelet's translator sends a ``v5`` client for the runtime's ``v4``
    status ``raw`` (everything the runtime wrote on the error stream): the runtime's status
    decoded as a remote command client decodes it, then written as the translator writes
    the outcome (pure)."""
    if not raw:
        return _go_json({"metadata": {}, "status": "Success"})
    try:
        status = json.loads(raw)
        if not isinstance(status, dict):
            raise ValueError("not an object")
    except ValueError as e:
        return _internal_error(
            f"error stream protocol error: {e} in {raw.decode(errors='replace')!r}"
        )
    outcome = status.get("status")
    if outcome == "Success":
        return _go_json({"metadata": {}, "status": "Success"})
    if outcome != "Failure":
        return _internal_error("error stream protocol error: unknown error")
    if status.get("reason") != "NonZeroExitCode":
        return _internal_error(str(status.get("message") or ""))
    causes = (status.get("details") or {}).get("causes") or []
    for cause in causes:
        if cause.get("reason") != "ExitCode":
            continue
        text = str(cause.get("message", ""))
        if not (text.isdigit() and int(text) < 256):
            return _internal_error(f"error stream protocol error: invalid exit code value {text!r}")
        code = int(text)
        return _go_json(
            {
                "metadata": {},
                "status": "Failure",
                "message": "command terminated with non-zero exit code: "
                f"command terminated with exit code {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }
        )
    return _internal_error("error stream protocol error: no ExitCode cause given")
