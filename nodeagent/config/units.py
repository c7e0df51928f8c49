"""Kubernetes value syntaxes: durations, resource quantities, percentages, Go booleans.

``Duration`` reads and writes Go's ``time.Duration`` text (``300ms``, ``10s``, ``1m30s``,
``2h0m0s``), as ``metav1.Duration`` does in KubeletConfiguration. Parsers raise ``ValueError``
with a message saying what is allowed.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Final, final

from nodeagent import gotext, quantity

MAX_TEXT: Final = 100  # longer durations, quantities and percentages are refused unparsed
SHOWN: Final = 100
DURATION_HELP: Final = "a duration such as 300ms, 10s, 1m30s or 2h (units ns, us, ms, s, m, h)"


def quoted(text: str) -> str:
    """``text`` as a JSON string for a message, cut to its first 100 characters; anything not
    printable (line separators such as U+0085 and U+2028 too) is escaped, so it stays one line."""
    if len(text) <= SHOWN:
        return printable(json.dumps(text, ensure_ascii=False))
    return f"{printable(json.dumps(text[:SHOWN], ensure_ascii=False))}... ({len(text)} characters)"


def printable(text: str) -> str:
    """``text`` with anything unprintable (controls, line separators) escaped as ``\\uXXXX``."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"
        for c in text
    )


@final
class Duration:
    """A span of time with nanosecond precision, written like a Go ``time.Duration``.

    Immutable, hashable and ordered. (Deliberately not a dataclass: msgspec would encode a
    dataclass as a mapping instead of as ``10s``.)
    """

    __slots__ = ("_ns",)

    def __init__(self, nanoseconds: int) -> None:
        self._ns = nanoseconds

    @property
    def nanoseconds(self) -> int:
        return self._ns

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other._ns == self._ns

    def __hash__(self) -> int:
        return hash(self._ns)

    def __lt__(self, other: Duration) -> bool:
        return self._ns < other._ns

    def __le__(self, other: Duration) -> bool:
        return self._ns <= other._ns

    def __gt__(self, other: Duration) -> bool:
        return self._ns > other._ns

    def __ge__(self, other: Duration) -> bool:
        return self._ns >= other._ns

    @classmethod
    def parse(cls, text: str) -> Duration:
        """Parse Go duration syntax (``gotext.parse_duration``); ``ValueError`` saying what is
        allowed if ``text`` is not one."""
        if len(text) > MAX_TEXT:
            raise ValueError(f"{quoted(text)} is too long for {DURATION_HELP}")
        try:
            return cls(gotext.parse_duration(text))
        except gotext.DurationRangeError:
            raise ValueError(
                f"{quoted(text)} is out of range (at most 2562047h47m16.854775807s)"
            ) from None
        except ValueError:
            raise ValueError(f"{quoted(text)} is not {DURATION_HELP}") from None

    @classmethod
    def of(
        cls, *, hours: int = 0, minutes: int = 0, seconds: float = 0, milliseconds: int = 0
    ) -> Duration:
        """Build from parts; fractional seconds are rounded to the nearest nanosecond."""
        total = Fraction(hours * 3600 + minutes * 60) + Fraction(seconds)
        return cls(round(total * 1_000_000_000) + milliseconds * 1_000_000)

    @property
    def seconds(self) -> float:
        """The duration in (fractional) seconds, for ``asyncio.sleep`` and timeouts."""
        return self.nanoseconds / 1_000_000_000

    def __str__(self) -> str:
        return gotext.duration(self.nanoseconds)

    def __repr__(self) -> str:
        return f"Duration({str(self)!r})"


QUANTITY_HELP: Final = "a quantity such as 100Mi, 1Gi, 500m, 2 or 1e3"


def parse_quantity(text: str) -> Fraction:
    """Parse a Kubernetes resource quantity (``100Mi``, ``500m``, ``1e3``) exactly; the
    arithmetic is :func:`nodeagent.quantity.parse_quantity`, the message is the config's."""
    try:
        return quantity.parse_quantity(text)
    except ValueError as e:
        if str(e).startswith("a quantity may be at most"):
            raise ValueError(
                f"{quoted(text)} is out of range (at most {quantity.MAX_MAGNITUDE})"
            ) from None
        raise ValueError(f"{quoted(text)} is not {QUANTITY_HELP}") from None


_PERCENT = re.compile(r"([0-9]+(?:\.[0-9]+)?)%")


def parse_percentage(text: str) -> Fraction | None:
    """``"10%"`` -> 10; ``None`` when ``text`` is not a percentage at all."""
    if len(text) > MAX_TEXT:
        return None
    m = _PERCENT.fullmatch(text.strip())
    return Fraction(m.group(1)) if m else None


def parse_reserve_percentage(v: str) -> int:
    """The kubelet's ``parsePercentage`` (``qosReserved`` values), with its errors."""
    if not v.endswith("%"):
        raise ValueError(f"percentage expected, got '{v}'")
    try:
        pct = int(v.rstrip("%"), 10)
    except ValueError:
        raise ValueError(f"invalid number in percentage '{v}'") from None
    if pct < 0 or pct > 100:
        raise ValueError("percentage must be between 0 and 100")
    return pct


_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``, as kubelet boolean flags accept it."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise ValueError(f"{quoted(text)} is not a boolean (true or false)")
