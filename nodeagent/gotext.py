"""Text as Go and the Kubernetes Go types print it, where a user sees our string beside the
kubelet's: Event messages, waiting reasons, API timestamps, log values.

- :func:`quote` is ``strconv.Quote`` (and ``fmt``'s ``%q`` of a string): printable characters
  kept, ``\\a \\b \\f \\n \\r \\t \\v`` named, other controls ``\\xNN``, other non-printable
  characters ``\\uNNNN`` / ``\\UNNNNNNNN``, each byte of invalid UTF-8 ``\\xNN``. "Printable"
  is Python's ``str.isprintable`` (Go's ``strconv.IsPrint``: letters, marks, numbers,
  punctuation, symbols and the ASCII space); Python 3.11 knows Unicode 14 where Go 1.26 knows
  15, so the few characters new in Unicode 15 are escaped here and printed by Go.
- :func:`quote_list` and :func:`join_list` are ``%q`` and ``%v`` of a ``[]string``.
- :func:`duration` is ``time.Duration.String()`` (``0s``, ``1.5µs``, ``500ms``, ``1m30s``,
  ``1h0m0s``); :func:`duration_seconds` the same for a float of seconds, optionally truncated
  as ``d.Truncate(unit)`` is.
- :func:`rfc3339` is ``metav1.Time`` (UTC, whole seconds), :func:`rfc3339_micro`
  ``metav1.MicroTime`` (six fraction digits), :func:`rfc3339_nano_fixed` the CRI log and
  ``kubernetes.io/config.seen`` form (nine fraction digits); :func:`parse_rfc3339` reads any of
  them back. A naive datetime is taken as UTC.
- :func:`grpc_code` is ``codes.Code.String()`` of a gRPC status named as grpc-python names it
  (``DEADLINE_EXCEEDED`` -> ``DeadlineExceeded``, ``CANCELLED`` -> ``Canceled``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Final

NANOSECOND: Final = 1
MICROSECOND: Final = 1_000
MILLISECOND: Final = 1_000_000
SECOND: Final = 1_000_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE

_NAMED: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}
_SURROGATES: Final = range(0xD800, 0xE000)
_ESCAPED_BYTES: Final = range(0xDC80, 0xDD00)  # what surrogateescape makes of a bad byte


def quote(text: str | bytes) -> str:
    """Go's ``strconv.Quote``. ``bytes`` are read as Go reads a string (invalid UTF-8 is
    escaped byte by byte); in a ``str``, the lone surrogates ``surrogateescape`` decoding
    leaves for undecodable bytes are those bytes."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code in _SURROGATES:
            raw = (
                bytes([code - 0xDC00])
                if code in _ESCAPED_BYTES
                else ch.encode("utf-8", "surrogatepass")
            )
            out.append("".join(f"\\x{b:02x}" for b in raw))
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def quote_list(items: Iterable[str]) -> str:
    """``%q`` of a ``[]string``: ``["kube" "reserved"]``."""
    return "[" + " ".join(quote(item) for item in items) + "]"


def join_list(items: Iterable[str]) -> str:
    """``%v`` of a ``[]string``: ``[sh -c exit 1]``."""
    return "[" + " ".join(items) + "]"


def _fraction(value: int, unit: int) -> str:
    whole, rest = divmod(value, unit)
    if not rest:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{rest:0{digits}d}".rstrip("0")


def duration(ns: int) -> str:
    """Go's ``time.Duration.String()`` of ``ns`` nanoseconds."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < MICROSECOND:
        return f"{sign}{u}ns"
    if u < MILLISECOND:
        return f"{sign}{_fraction(u, MICROSECOND)}\u00b5s"
    if u < SECOND:
        return f"{sign}{_fraction(u, MILLISECOND)}ms"
    hours, rest = divmod(u, HOUR)
    minutes, rest = divmod(rest, MINUTE)
    secs = _fraction(rest, SECOND)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


def truncate(ns: int, unit: int) -> int:
    """Go's ``d.Truncate(unit)``: ``ns`` rounded toward zero to a multiple of ``unit``."""
    if unit <= 0:
        return ns
    rest = abs(ns) % unit
    return ns - rest if ns >= 0 else ns + rest


def duration_seconds(seconds: float, *, truncate_to: int = NANOSECOND) -> str:
    """``seconds`` as a Go ``time.Duration`` prints: rounded to the nearest nanosecond, then
    truncated to a multiple of ``truncate_to`` (``MILLISECOND``: ``d.Truncate(time.Millisecond)``
    first)."""
    return duration(truncate(round(seconds * SECOND), truncate_to))


def _utc(moment: dt.datetime) -> dt.datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)


def _seconds_text(u: dt.datetime) -> str:
    # by hand, not strftime: glibc's %Y drops the leading zeros of years before 1000
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"


def rfc3339(moment: dt.datetime) -> str:
    """``metav1.Time`` as JSON: UTC, whole seconds (the fraction truncated)."""
    return _seconds_text(_utc(moment)) + "Z"


def rfc3339_micro(moment: dt.datetime) -> str:
    """``metav1.MicroTime`` as JSON (``RFC3339Micro``): UTC, always six fraction digits."""
    u = _utc(moment)
    return f"{_seconds_text(u)}.{u.microsecond:06d}Z"


def rfc3339_nano_fixed(moment: dt.datetime) -> str:
    """cri-client's ``logs.RFC3339NanoFixed`` in UTC: always nine fraction digits (a datetime
    holds microseconds, so the last three are zeros)."""
    u = _utc(moment)
    return f"{_seconds_text(u)}.{u.microsecond:06d}000Z"


def parse_rfc3339(text: object) -> dt.datetime | None:
    """An RFC 3339 time (any fraction digits, ``Z`` or an offset; a time without one is UTC);
    None for anything else, a non-string or an empty one too. ``fromisoformat`` (C) rather
    than ``strptime``, which was 4 % of the agent's samples with 200 probes a second
    (docs/benchmarks.md)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


_GRPC_CODE_NAMES: Final = {"OK": "OK", "CANCELLED": "Canceled"}


def grpc_code(name: str | None) -> str:
    """Go's name of the gRPC status code grpc-python calls ``name`` (``Unknown`` for None)."""
    if name is None:
        return "Unknown"
    return _GRPC_CODE_NAMES.get(name) or "".join(p.capitalize() for p in name.split("_"))
