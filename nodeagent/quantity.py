"""Resource quantities of pod specs (``500m``, ``128Mi``, ``1e3``) as exact fractions.

The pod workers, QoS and admission need the same arithmetic as the kubelet's
``resource.Quantity``: ``milli_value`` and ``value`` round up, as ``MilliValue()`` / ``Value()``
do. Pure functions, no I/O.

Parsing takes bounded time whatever the input: the grammar is Kubernetes' (ASCII digits only,
an integer exponent that fits an int32), the text is at most ``MAX_LENGTH`` characters, and a
quantity larger in magnitude than ``MAX_MAGNITUDE`` (2^63-1, the limit resource.Quantity
documents) is rejected before any big number is built, except that a binary-suffixed one
(``8Ei``) is capped to it, as ``ParseQuantity`` caps. Like ``ParseQuantity``, a non-zero
amount finer than a nano-unit is rounded up (away from zero) to whole nano-units.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

MAX_LENGTH: Final = 128
MAX_MAGNITUDE: Final = 2**63 - 1
_SHOWN: Final = 100
_INT32: Final = 2**31
_NANO: Final = 10**9
# Kubernetes' quantity grammar with ASCII digits only (Python's \d would take any Unicode digit).
_QUANTITY: Final = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?"
    r"(?:([eE])([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|))",
    re.ASCII,
)
_DECIMAL: Final = {
    **{"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6},
    **{"G": 9, "T": 12, "P": 15, "E": 18},
}
_BINARY: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
FORMAT_MESSAGE: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def shown(text: str) -> str:
    """``text`` quoted for an error message, cut to its first 100 characters."""
    if len(text) <= _SHOWN:
        return repr(text)
    return f"{text[:_SHOWN]!r}... ({len(text)} characters)"


def parse_quantity(text: str | int | float) -> Fraction:
    """``"100Mi"`` -> 104857600, ``"500m"`` -> 1/2. Raises ValueError on anything else."""
    if isinstance(text, int | float):
        return _number(text)
    if not isinstance(text, str):
        raise ValueError(f"a quantity must be a string or a number, got {type(text).__name__}")
    body = text.strip()
    if len(body) > MAX_LENGTH:
        raise ValueError(f"a quantity is at most {MAX_LENGTH} characters, got {shown(text)}")
    match = _QUANTITY.fullmatch(body)
    if match is None or not (match.group(2) or match.group(3)):
        raise ValueError(f"{FORMAT_MESSAGE}, got {shown(text)}")
    sign, whole, frac, e, exponent, suffix = match.groups()
    frac = frac or ""
    mantissa = int(whole + frac or "0")
    if e:
        power = int(exponent)  # at most MAX_LENGTH digits: cheap
        if not -_INT32 <= power < _INT32:
            raise ValueError(f"unable to parse quantity's suffix, got {shown(text)}")
        ten, two = power - len(frac), 0
    elif suffix in _BINARY:
        ten, two = -len(frac), _BINARY[suffix]
    else:
        ten, two = _DECIMAL[suffix] - len(frac), 0
    amount = _scaled(mantissa, ten, two, text)
    return -amount if sign == "-" else amount


def _scaled(mantissa: int, ten: int, two: int, text: str) -> Fraction:
    """``mantissa * 10**ten * 2**two``, refused above MAX_MAGNITUDE, rounded up to nano-units."""
    if mantissa == 0:
        return Fraction(0)
    digits = len(str(mantissa))
    # mantissa * 10**ten >= 10**(digits - 1 + ten); 2**two <= 2**60 < 10**19.
    if digits - 1 + ten > 18:
        if two:
            return Fraction(MAX_MAGNITUDE)
        raise _too_large(text)
    if digits + ten + 19 < -9:  # smaller than one nano-unit: round up to it
        return Fraction(1, _NANO)
    amount = Fraction(mantissa) * Fraction(10) ** ten * 2**two
    if amount > MAX_MAGNITUDE:
        if two:
            return Fraction(MAX_MAGNITUDE)
        raise _too_large(text)
    return Fraction(math.ceil(amount * _NANO), _NANO)


def _too_large(text: str) -> ValueError:
    return ValueError(f"a quantity may be at most {MAX_MAGNITUDE} in magnitude, got {shown(text)}")


def _number(number: int | float) -> Fraction:
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"a quantity must be a finite number, got {number}")
    if abs(number) > MAX_MAGNITUDE:
        raise ValueError(f"a quantity may be at most {MAX_MAGNITUDE} in magnitude")
    return Fraction(number)


def milli_value(text: str | int | float) -> int:
    """The quantity in thousandths, rounded up (cpu ``"0.5"`` -> 500)."""
    return math.ceil(parse_quantity(text) * 1000)


def value(text: str | int | float) -> int:
    """The quantity as an integer, rounded up (memory ``"1.5Ki"`` -> 1536)."""
    return math.ceil(parse_quantity(text))


_GROUPS: Final = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""))
_BINARY_UNITS: Final = sorted(_BINARY.items(), key=lambda kv: -kv[1])


def quantity_format(text: str | int | float) -> str:
    """The format ``resource.Quantity`` parses ``text`` in: ``BinarySI`` for a binary suffix
    (``Mi``), ``DecimalExponent`` for ``e``/``E``, else ``DecimalSI`` (numbers too)."""
    if isinstance(text, str):
        body = text.strip()
        if body.endswith(tuple(_BINARY)):
            return "BinarySI"
        if "e" in body or "E" in body:
            return "DecimalExponent"
    return "DecimalSI"


def canonical(amount: Fraction | int, fmt: str = "DecimalSI") -> str:
    """``Quantity.String()``: ``amount`` written canonically in format ``fmt`` (see
    :func:`quantity_format`). BinarySI takes the largest binary suffix that divides it
    exactly (``5Mi``, ``1536Ki``, else plain digits; below 1024 in magnitude it is written as
    DecimalSI); DecimalSI groups trailing zeros by three (``5M``, ``1k``, ``1500``),
    DecimalExponent the same as ``e<n>`` (``5e6``); a fraction in milli-, micro- or
    nano-units (``500m``), rounded up to nano-units."""
    v = Fraction(amount)
    if v == 0:
        return "0"
    if v.denominator != 1:
        nanos = math.ceil(v * _NANO)
        for exp, suffix in ((6, "m"), (3, "u"), (0, "n")):
            if nanos % 10**exp == 0:
                return f"{nanos // 10**exp}{suffix}"
    n = math.ceil(v)
    if fmt == "BinarySI" and abs(n) >= 1024:
        for suffix, bits in _BINARY_UNITS:
            if n % 2**bits == 0:
                return f"{n // 2**bits}{suffix}"
        return str(n)
    for exp, suffix in _GROUPS:
        if n % 10**exp == 0:
            if fmt == "DecimalExponent":
                return f"{n // 10**exp}e{exp}" if exp else str(n)
            return f"{n // 10**exp}{suffix}"
    return str(n)
