"""The CRI container log format, as the runtime writes it (pure functions, no I/O).

One record a line: ``<RFC3339Nano timestamp> <stdout|stderr> <tags> <content>\\n``. ``tags`` is
``F`` (the content ends a line) or ``P`` (the runtime split a long line; the content continues
in the next ``P``/``F`` record of the same stream), possibly followed by ``:``-separated
extras. :class:`LogParser` turns bytes into whole :class:`Entry` lines, joining partial
records per stream; a malformed record is skipped and counted, as the kubelet logs and skips it.
"""

from __future__ import annotations

import datetime as dt
from typing import Final, NamedTuple

STDOUT: Final = b"stdout"
STDERR: Final = b"stderr"
_STREAMS: Final = (STDOUT, STDERR)


class Entry(NamedTuple):
    timestamp: bytes
    """As written by the runtime, e.g. ``2026-11-25T04:12:23.1234Z``."""
    stream: bytes
    """``stdout`` or ``stderr``."""
    content: bytes
    """The line, with its ``\\n`` unless it is an unterminated partial line at the end."""


class LogParser:
    """Feed bytes in any chunking; get whole entries back."""

    def __init__(self) -> None:
        self._carry = b""
        self._partial: dict[bytes, tuple[bytes, list[bytes]]] = {}
        self.malformed = 0

    def feed(self, data: bytes) -> list[Entry]:
        data = self._carry + data
        lines = data.split(b"\n")
        self._carry = lines.pop()
        out: list[Entry] = []
        for line in lines:
            self._record(line, out)
        return out

    def flush(self) -> list[Entry]:
        """At the end of the log: an unterminated record, then partial lines never finished."""
        out: list[Entry] = []
        if self._carry:
            carry, self._carry = self._carry, b""
            self._record(carry, out)
        for stream, (ts, chunks) in self._partial.items():
            out.append(Entry(ts, stream, b"".join(chunks)))
        self._partial.clear()
        return out

    def _record(self, line: bytes, out: list[Entry]) -> None:
        parts = line.split(b" ", 3)
        if len(parts) < 3 or parts[1] not in _STREAMS or not parts[2]:
            if line:
                self.malformed += 1
            return
        ts, stream, tags = parts[0], parts[1], parts[2]
        content = parts[3] if len(parts) == 4 else b""
        pending = self._partial.get(stream)
        if tags.split(b":", 1)[0] == b"P":
            if pending is None:
                self._partial[stream] = (ts, [content])
            else:
                pending[1].append(content)
            return
        if pending is not None:
            del self._partial[stream]
            out.append(Entry(pending[0], stream, b"".join([*pending[1], content, b"\n"])))
        else:
            out.append(Entry(ts, stream, content + b"\n"))


def timestamp_ns(ts: bytes) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 timestamp with any number of fraction
    digits; None when it does not parse."""
    text = ts.decode("ascii", "replace")
    frac = 0
    dot = text.find(".")
    if dot >= 0:
        end = dot + 1
        while end < len(text) and text[end].isdigit():
            end += 1
        digits = text[dot + 1 : end]
        frac = int((digits + "000000000")[:9]) if digits else 0
        text = text[:dot] + text[end:]
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp()) * 1_000_000_000 + frac


def fixed_timestamp(ts: bytes) -> bytes:
    """The kubelet's output form (RFC3339NanoFixed): always nine fraction digits, so that
    timestamps line up and sort as text."""
    dot = ts.find(b".")
    if dot < 0:
        # no fraction: insert it before the zone (Z or +hh:mm / -hh:mm after the seconds)
        zone = max(ts.rfind(b"Z"), ts.rfind(b"+"), ts.rfind(b"-", 19))
        if zone < 0:
            zone = len(ts)
        return ts[:zone] + b".000000000" + ts[zone:]
    end = dot + 1
    while end < len(ts) and 0x30 <= ts[end] <= 0x39:
        end += 1
    digits = ts[dot + 1 : end]
    return ts[: dot + 1] + (digits + b"000000000")[:9] + ts[end:]
