"""WebSocket and SPDY/3.1 framing of the streaming bridge (pure)."""

from __future__ import annotations

import json
import zlib

import pytest

from nodeagent.server import wire

KEY = b"\x01\x02\x03\x04"


def test_accept_key_of_the_rfc_example() -> None:
    assert wire.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_offered_and_tunneled_protocols() -> None:
    offered = wire.subprotocols(["SPDY/3.1+portforward.k8s.io, v5.channel.k8s.io", " x "])
    assert offered == ["SPDY/3.1+portforward.k8s.io", "v5.channel.k8s.io", "x"]
    assert wire.tunneled_protocols(offered) == ["portforward.k8s.io"]
    assert wire.tunneled_protocols(["SPDY/3.1+other.example", "portforward.k8s.io"]) == []


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 200_000])
def test_client_frames_of_every_length_are_read_back(size: int) -> None:
    payload = bytes(i % 251 for i in range(size))
    frame = wire.mask_frame(wire.OP_BINARY, payload, KEY)
    assert frame[1] & 0x80  # masked
    reader = wire.FrameReader()
    # Byte by byte for the head, then the rest: partial frames wait for their end.
    got: list[wire.Frame] = []
    for i in range(min(len(frame), 12)):
        got += reader.feed(frame[i : i + 1])
    got += reader.feed(frame[12:])
    assert got == [wire.Frame(True, wire.OP_BINARY, payload)]


def test_several_frames_in_one_read_and_server_frames() -> None:
    data = (
        wire.mask_frame(wire.OP_BINARY, b"\x00abc", KEY, fin=False)
        + wire.mask_frame(wire.OP_CONTINUATION, b"def", KEY)
        + wire.ws_frame(wire.OP_PING, b"p")  # unmasked is read too
        + wire.ws_message(wire.STDOUT, b"x" * 300)[:5]
    )
    reader = wire.FrameReader()
    assert reader.feed(data) == [
        wire.Frame(False, wire.OP_BINARY, b"\x00abc"),
        wire.Frame(True, wire.OP_CONTINUATION, b"def"),
        wire.Frame(True, wire.OP_PING, b"p"),
    ]
    assert reader.feed(wire.ws_message(wire.STDOUT, b"x" * 300)[5:]) == [
        wire.Frame(True, wire.OP_BINARY, b"\x01" + b"x" * 300)
    ]


def test_server_frame_heads() -> None:
    assert wire.ws_header(wire.OP_BINARY, 5) == b"\x82\x05"
    assert wire.ws_header(wire.OP_BINARY, 126) == b"\x82\x7e\x00\x7e"
    assert wire.ws_header(wire.OP_BINARY, 1 << 16) == b"\x82\x7f" + (1 << 16).to_bytes(8, "big")
    assert wire.ws_close() == b"\x88\x02\x03\xe8"
    assert wire.ws_message(wire.ERROR, b"{}") == b"\x82\x03\x03{}"


def test_broken_frames_are_refused_with_their_close_code() -> None:
    with pytest.raises(wire.WireError) as e:
        wire.FrameReader().feed(b"\xc2\x80" + KEY)  # RSV1 without an extension
    assert e.value.code == wire.CLOSE_PROTOCOL_ERROR
    with pytest.raises(wire.WireError) as e:
        wire.FrameReader().feed(b"\x82\xff" + (wire.MAX_MESSAGE + 1).to_bytes(8, "big"))
    assert e.value.code == wire.CLOSE_TOO_BIG


def test_unmask_is_its_own_inverse() -> None:
    data = bytes(range(256)) * 3 + b"xyz"
    assert wire.unmask(KEY, wire.unmask(KEY, data)) == data
    assert wire.unmask(KEY, b"\x00\x00\x00\x00\x00") == KEY + KEY[:1]


def _headers(block: bytes, z: zlib._Decompress) -> list[tuple[str, str]]:
    raw = z.decompress(block)
    count, pos, out = int.from_bytes(raw[:4], "big"), 4, []
    for _ in range(count):
        n = int.from_bytes(raw[pos : pos + 4], "big")
        name = raw[pos + 4 : pos + 4 + n].decode()
        pos += 4 + n
        n = int.from_bytes(raw[pos : pos + 4], "big")
        out.append((name, raw[pos + 4 : pos + 4 + n].decode()))
        pos += 4 + n
    return out


def test_syn_streams_share_one_compression_context() -> None:
    z = wire.HeaderCompressor()
    frames = wire.syn_stream(z, 1, [("streamType", "error")]) + wire.syn_stream(
        z, 3, [("streamType", "stdin")], fin=True
    )
    read = wire.SpdyReader().feed(frames)
    assert [(f.control, f.kind, f.flags) for f in read] == [
        (True, wire.SYN_STREAM, 0),
        (True, wire.SYN_STREAM, wire.FLAG_FIN),
    ]
    unzip = zlib.decompressobj()
    got = []
    for f in read:
        stream_id = int.from_bytes(f.data[:4], "big")
        assert f.data[4:8] == b"\x00\x00\x00\x00"  # no associated stream
        got.append((stream_id, _headers(f.data[10:], unzip)))
    # Names go lower-case on the wire, as SPDY wants.
    assert got == [(1, [("streamtype", "error")]), (3, [("streamtype", "stdin")])]
    assert frames[:2] == b"\x80\x03"  # control bit, version 3


def test_data_and_ping_frames() -> None:
    data = wire.data_frame(5, b"hello") + wire.data_frame(3, b"", fin=True) + wire.ping_frame(2)
    reader = wire.SpdyReader()
    assert reader.feed(data[:7]) == []
    assert reader.feed(data[7:]) == [
        wire.SpdyFrame(False, 5, 0, b"hello"),
        wire.SpdyFrame(False, 3, wire.FLAG_FIN, b""),
        wire.SpdyFrame(True, wire.PING, 0, b"\x00\x00\x00\x02"),
    ]
    with pytest.raises(wire.WireError, match="SPDY version 2"):
        wire.SpdyReader().feed(b"\x80\x02\x00\x06\x00\x00\x00\x04" + b"\x00" * 4)


RUNTIME_EXIT_7 = (
    b'{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code:'
    b' error executing command [sh -c exit 7], exit code 7","reason":"NonZeroExitCode",'
    b'"details":{"causes":[{"reason":"ExitCode","message":"7"}]}}'
)


@pytest.mark.parametrize(
    ("runtime", "client"),
    [
        (b"", b'{"metadata":{},"status":"Success"}'),
        (b'{"metadata":{},"status":"Success"}', b'{"metadata":{},"status":"Success"}'),
        (
            RUNTIME_EXIT_7,
            b'{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit'
            b' code: command terminated with exit code 7","reason":"NonZeroExitCode",'
            b'"details":{"causes":[{"reason":"ExitCode","message":"7"}]}}',
        ),
        (
            b'{"status":"Failure","message":"container <x> not running","reason":"Gone"}',
            b'{"metadata":{},"status":"Failure","message":"Internal error occurred: container'
            b' \\u003cx\\u003e not running","reason":"InternalError","details":{"causes":'
            b'[{"message":"container \\u003cx\\u003e not running"}]},"code":500}',
        ),
        (
            b'{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[]}}',
            b'{"metadata":{},"status":"Failure","message":"Internal error occurred: error stream'
            b' protocol error: no ExitCode cause given","reason":"InternalError","details":'
            b'{"causes":[{"message":"error stream protocol error: no ExitCode cause given"}]},'
            b'"code":500}',
        ),
    ],
)
def test_exit_status_as_the_kubelets_translator_writes_it(runtime: bytes, client: bytes) -> None:
    assert wire.translated_status(runtime) == client


def test_an_unreadable_status_is_an_internal_error() -> None:
    status = json.loads(wire.translated_status(b"{nope"))
    assert (status["reason"], status["code"]) == ("InternalError", 500)
    assert status["message"].startswith("Internal error occurred: error stream protocol error")
