"""Resource quantities of pod specs (``500m``, ``128Mi``, ``1e3``) as exact fractions.

The pod workers, QoS and admission need the same arithmetic as the kubelet's
``resource.Quantity``: ``milli_value`` and ``value`` round up, as ``MilliValue()`` / ``Value()``
do. Pure functions, no I/O.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

_QUANTITY: Final = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))([eE][+-]?\d+|[a-zA-Z]*)")
_SUFFIX: Final = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse_quantity(text: str | int | float) -> Fraction:
    """``"100Mi"`` -> 104857600, ``"500m"`` -> 1/2. Raises ValueError on anything else."""
    if isinstance(text, int | float):
        return Fraction(text)
    match = _QUANTITY.fullmatch(text.strip())
    if match is None or (match.group(2) not in _SUFFIX and match.group(2)[:1] not in "eE"):
        raise ValueError(f"quantities must match the regular expression, got {text!r}")
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def milli_value(text: str | int | float) -> int:
    """The quantity in thousandths, rounded up (cpu ``"0.5"`` -> 500)."""
    return math.ceil(parse_quantity(text) * 1000)


def value(text: str | int | float) -> int:
    """The quantity as an integer, rounded up (memory ``"1.5Ki"`` -> 1536)."""
    return math.ceil(parse_quantity(text))
