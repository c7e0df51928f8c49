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
  as ``d.Truncate(unit)`` is. :func:`parse_duration` is ``time.ParseDuration`` (what
  ``metav1.Duration`` reads in a configuration file or a plugin's response), with Go's errors.
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


_UNITS: Final = {
    b"ns": NANOSECOND,
    b"us": MICROSECOND,
    "\u00b5s".encode(): MICROSECOND,  # micro sign
    "\u03bcs".encode(): MICROSECOND,  # Greek mu
    b"ms": MILLISECOND,
    b"s": SECOND,
    b"m": MINUTE,
    b"h": HOUR,
}
_DIGITS: Final = b"0123456789"
_LIMIT: Final = 1 << 63


class DurationRangeError(ValueError):
    """A duration beyond Go's int64 nanoseconds (``2562047h47m16.854775807s``)."""


def _time_quote(raw: bytes) -> str:
    """The ``time`` package's own ``quote``: printable ASCII kept (``"`` and ``\\``
    escaped), every byte of anything else ``\\xNN``."""
    out = ['"']
    for b in raw:
        if b < 0x20 or b >= 0x80:
            out.append(f"\\x{b:02x}")
        else:
            out.append(("\\" if b in b'"\\' else "") + chr(b))
    out.append('"')
    return "".join(out)


def _leading(raw: bytes, pos: int) -> int:
    while pos < len(raw) and raw[pos] in _DIGITS:
        pos += 1
    return pos


class _Invalid(Exception):
    """One part of a duration text is wrong: ``what`` Go says of it."""

    def __init__(self, what: str = "invalid duration", *, too_large: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.too_large = too_large


def _duration_part(body: bytes, pos: int) -> tuple[int, int]:
    """The nanoseconds of the part of ``body`` at ``pos`` (``1.5h``), and where it ends."""
    if body[pos] != 0x2E and body[pos] not in _DIGITS:  # [0-9.]
        raise _Invalid()
    end = _leading(body, pos)
    digits = body[pos:end].lstrip(b"0")
    if len(digits) > 19 or int(digits or b"0") > _LIMIT:
        raise _Invalid(too_large=True)
    whole, pre, pos = int(digits or b"0"), end > pos, end
    fraction, scale, post = 0, 1.0, False
    if body[pos : pos + 1] == b".":
        end = _leading(body, pos + 1)
        post = end > pos + 1
        for digit in body[pos + 1 : end]:  # precision stops where uint64 would overflow
            if fraction > (_LIMIT - 1) // 10 or fraction * 10 + digit - 48 > _LIMIT:
                break
            fraction, scale = fraction * 10 + digit - 48, scale * 10
        pos = end
    if not pre and not post:
        raise _Invalid()
    end = pos
    while end < len(body) and body[end] != 0x2E and body[end] not in _DIGITS:
        end += 1
    if end == pos:
        raise _Invalid("missing unit in duration")
    unit = _UNITS.get(body[pos:end])
    if unit is None:
        raise _Invalid(f"unknown unit {_time_quote(body[pos:end])} in duration")
    if whole > _LIMIT // unit:
        raise _Invalid(too_large=True)
    value = whole * unit
    if fraction:
        value += int(float(fraction) * (float(unit) / scale))  # Go's float64 arithmetic
    return value, end


def parse_duration(text: str) -> int:
    """Go's ``time.ParseDuration``: ``text`` (``300ms``, ``-1.5h``, ``2h45m``, ``0``) in
    nanoseconds; ``ValueError`` with Go's message (``time: unknown unit "d" in duration
    "1d"``), :class:`DurationRangeError` beyond int64. A fraction counts as Go counts it: in
    float64, truncated per part."""
    raw = text.encode("utf-8", "surrogateescape")
    body, negative = raw, False
    if body[:1] in (b"-", b"+"):
        negative, body = body[:1] == b"-", body[1:]
    if body == b"0":
        return 0
    total, pos = 0, 0
    try:
        if not body:
            raise _Invalid()
        while pos < len(body):
            value, pos = _duration_part(body, pos)
            total += value
            if value > _LIMIT or total > _LIMIT:
                raise _Invalid(too_large=True)
        if not negative and total > _LIMIT - 1:
            raise _Invalid(too_large=True)
    except _Invalid as e:
        error = DurationRangeError if e.too_large else ValueError
        raise error(f"time: {e.what} {_time_quote(raw)}") from None
    return -total if negative else total


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
