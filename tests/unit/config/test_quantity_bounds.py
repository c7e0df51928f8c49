"""Absurd quantities and durations are refused without big-number work, the value cut short."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from nodeagent import quantity
from nodeagent.config.units import Duration, parse_percentage, parse_quantity


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        pytest.param("5.", Fraction(5), id="digits and a dot"),
        pytest.param(".5", Fraction(1, 2), id="a dot and digits"),
        pytest.param("-1m", Fraction(-1, 1000), id="negative milli"),
        pytest.param("1E", Fraction(10**18), id="E is exa, not an exponent"),
        pytest.param("1e-100000000", Fraction(1, 10**9), id="tiny values round up to 1n"),
        pytest.param("0.1n", Fraction(1, 10**9), id="below a nano-unit rounds up"),
        pytest.param("0e999999", Fraction(0), id="zero with any exponent is zero"),
        pytest.param("9223372036854775807", Fraction(2**63 - 1), id="int64 max"),
        pytest.param("8Ei", Fraction(2**63 - 1), id="binary suffix is capped like Quantity"),
    ],
)
def test_quantity_edges_follow_kubernetes(text: str, amount: Fraction) -> None:
    assert quantity.parse_quantity(text) == amount


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("1e100000000", "may be at most 9223372036854775807", id="huge exponent"),
        pytest.param("9223372036854775808", "may be at most", id="above int64"),
        pytest.param("1e9999999999", "unable to parse quantity's suffix", id="exponent > int32"),
        pytest.param("\u0661\u0662", "must match the regular expression", id="arabic digits"),
        pytest.param("1\u0663Mi", "must match the regular expression", id="non-ASCII digit"),
        pytest.param("1e", "must match the regular expression", id="e without exponent"),
        pytest.param(".", "must match the regular expression", id="a dot alone"),
        pytest.param("1" * 5000, "at most 128 characters", id="5000 digits"),
    ],
)
def test_quantity_rejects_quickly_naming_the_value(
    text: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    powers: list[Any] = []

    class Counted(Fraction):
        """Records each power of ten taken; a huge one is refused rather than computed."""

        def __pow__(self, exponent: Any, modulo: Any = None) -> Any:
            powers.append(exponent)
            assert abs(exponent) <= 64, f"10**{exponent} computed for {text[:20]!r}"
            return Fraction(self) ** exponent

    monkeypatch.setattr(quantity, "Fraction", Counted)
    with pytest.raises(ValueError, match=message) as caught:
        quantity.parse_quantity(text)
    assert all(abs(p) <= 64 for p in powers)  # bounded by the digit counts, never 10**1e8
    assert repr(text[:20])[:-1] in str(caught.value)
    assert len(str(caught.value)) < 300


def test_quantity_numbers_are_bounded() -> None:
    with pytest.raises(ValueError, match="finite"):
        quantity.parse_quantity(float("inf"))
    with pytest.raises(ValueError, match="at most"):
        quantity.parse_quantity(10**400)


def test_config_quantity_message_says_out_of_range() -> None:
    with pytest.raises(ValueError) as caught:
        parse_quantity("1e100000000")
    assert str(caught.value) == '"1e100000000" is out of range (at most 9223372036854775807)'


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("\u0661s", id="arabic one second"),
        pytest.param("1\uff10s", id="fullwidth zero"),
        pytest.param("\u09e7m", id="bengali one minute"),
    ],
)
def test_durations_take_ascii_digits_only(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        Duration.parse(text)


def test_long_duration_is_refused_with_the_value_cut() -> None:
    with pytest.raises(ValueError) as caught:
        Duration.parse("1" * 10_000_000 + "s")
    assert str(caught.value).startswith('"' + "1" * 100 + '"... (10000001 characters)')
    assert len(str(caught.value)) < 300


def test_percentages_take_ascii_digits_only() -> None:
    assert parse_percentage("\u0661\u0660%") is None
    assert parse_percentage("10%") == 10
