"""Resource quantities as the apiserver writes them (canonical ``resource.Quantity`` form).

``format_decimal`` is DecimalSI (cpu, pods): ``2``, ``1900m``, ``110``, ``1k``.
``format_binary`` is BinarySI (memory, ephemeral-storage, hugepages): exact multiples of a power
of 1024 take the largest suffix (``24576Mi``, ``2Gi``); other integers stay plain digits.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Final

from nodeagent.config.units import parse_percentage, parse_quantity

__all__ = ["format_binary", "format_decimal", "parse_percentage", "parse_quantity"]

_BINARY: Final = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)
_DECIMAL: Final = (
    ("E", 18),
    ("P", 15),
    ("T", 12),
    ("G", 9),
    ("M", 6),
    ("k", 3),
    ("", 0),
    ("m", -3),
    ("u", -6),
    ("n", -9),
)


def format_decimal(value: Fraction | int) -> str:
    v = Fraction(value)
    if v == 0:
        return "0"
    for suffix, exp in _DECIMAL:
        scaled = v / Fraction(10) ** exp
        if scaled.denominator == 1 and (exp <= 0 or scaled.numerator % 1000 != 0 or exp == 18):
            return f"{scaled.numerator}{suffix}"
    # finer than nano: round up, as the apiserver does
    return f"{-(-v.numerator * 10**9 // v.denominator)}n"


def format_binary(value: Fraction | int) -> str:
    v = Fraction(value)
    if v.denominator != 1:
        return format_decimal(v)
    n = v.numerator
    if n == 0:
        return "0"
    for suffix, unit in _BINARY:
        if abs(n) >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
