"""With a TTY, the translated exec starts only once the terminal size is known."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

from nodeagent.server import bridge, wire

KEY = b"\x01\x02\x03\x04"
SIZE = b'{"Width":111,"Height":33}'


class Transport:
    def __init__(self) -> None:
        self.out = bytearray()

    def write(self, data: bytes) -> None:
        self.out += data

    def __getattr__(self, name: str) -> Any:  # pause_reading & co.: nothing to do here
        return lambda *a, **k: None


def _streams(data: bytes) -> list[tuple[str, Any]]:
    """(``syn:<streamType>`` or ``data:<stream id>``, payload) of each SPDY frame sent."""
    unzip, out = zlib.decompressobj(), []
    for f in wire.SpdyReader().feed(data):
        if f.control and f.kind == wire.SYN_STREAM:
            raw = unzip.decompress(f.data[10:])
            n = int.from_bytes(raw[4:8], "big")
            m = int.from_bytes(raw[8 + n : 12 + n], "big")
            out.append((f"syn:{raw[12 + n : 12 + n + m].decode()}", None))
        elif not f.control:
            out.append((f"data:{f.kind}", f.data))
    return out


def _translator(client: Transport, runtime: Transport) -> bridge.SpdyTranslator:
    t = bridge.SpdyTranslator(
        client,  # type: ignore[arg-type]
        runtime,  # type: ignore[arg-type]
        stdin=True,
        stdout=True,
        stderr=False,
        tty=True,
    )
    runtime.write(t.open_streams())
    t.start()
    return t


async def test_the_resize_stream_opens_with_the_clients_first_size() -> None:
    client, runtime = Transport(), Transport()
    t = _translator(client, runtime)
    # Every stream but resize: the runtime does not start the command yet.
    assert [k for k, _ in _streams(bytes(runtime.out))] == ["syn:error", "syn:stdin", "syn:stdout"]
    t.from_client(wire.mask_frame(wire.OP_BINARY, bytes((wire.RESIZE,)) + SIZE, KEY))
    sent = _streams(bytes(runtime.out))
    assert sent[3:] == [("syn:resize", None), ("data:7", SIZE)]
    # Later sizes go on the open stream.
    t.from_client(wire.mask_frame(wire.OP_BINARY, bytes((wire.RESIZE,)) + SIZE, KEY))
    assert _streams(bytes(runtime.out))[5:] == [("data:7", SIZE)]
    t.finish()


async def test_without_a_size_the_resize_stream_opens_after_the_wait(monkeypatch: Any) -> None:
    monkeypatch.setattr(bridge, "RESIZE_WAIT", 0.01)
    client, runtime = Transport(), Transport()
    t = _translator(client, runtime)
    await asyncio.sleep(0.05)
    assert [k for k, _ in _streams(bytes(runtime.out))][-1] == "syn:resize"
    t.finish()
