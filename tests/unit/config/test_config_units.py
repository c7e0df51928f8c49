"""Durations, quantities and booleans are read and written as Kubernetes does."""

from __future__ import annotations

from fractions import Fraction

import pytest

from nodeagent.config.units import Duration, parse_bool, parse_percentage, parse_quantity


@pytest.mark.parametrize(
    ("text", "nanoseconds", "go_form"),
    [
        pytest.param("10s", 10 * 10**9, "10s", id="seconds"),
        pytest.param("1m30s", 90 * 10**9, "1m30s", id="minutes and seconds"),
        pytest.param("300ms", 300 * 10**6, "300ms", id="milliseconds"),
        pytest.param("1.5h", 5400 * 10**9, "1h30m0s", id="fractional hours"),
        pytest.param("2h45m", 9900 * 10**9, "2h45m0s", id="hours and minutes"),
        pytest.param("5m", 300 * 10**9, "5m0s", id="whole minutes"),
        pytest.param("0", 0, "0s", id="bare zero"),
        pytest.param("0s", 0, "0s", id="zero seconds"),
        pytest.param("1.5s", 1_500_000_000, "1.5s", id="fractional seconds"),
        pytest.param("-1s", -(10**9), "-1s", id="negative"),
        pytest.param("1us", 1000, "1\u00b5s", id="microseconds"),
        pytest.param("1\u00b5s", 1000, "1\u00b5s", id="micro sign"),
        pytest.param("42ns", 42, "42ns", id="nanoseconds"),
        pytest.param(".5s", 500_000_000, "500ms", id="leading dot"),
        pytest.param("1h1m1s1ms", 3661_001_000_000, "1h1m1.001s", id="every unit"),
    ],
)
def test_duration_reads_and_writes_go_syntax(text: str, nanoseconds: int, go_form: str) -> None:
    d = Duration.parse(text)
    assert d.nanoseconds == nanoseconds
    assert str(d) == go_form
    assert Duration.parse(str(d)) == d


@pytest.mark.parametrize(
    "text", ["", "10", "10 s", "s", "1x", "1m 30s", "ten seconds", ".s", "1d", "9999999999h"]
)
def test_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration|out of range"):
        Duration.parse(text)


def test_durations_compare_and_convert() -> None:
    assert Duration.parse("15s") > Duration.parse("10s")
    assert Duration.parse("1m") == Duration.of(seconds=60)
    assert Duration.parse("250ms").seconds == 0.25
    assert len({Duration.parse("60s"), Duration.parse("1m")}) == 1


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("100Mi", Fraction(100 * 2**20)),
        ("1Gi", Fraction(2**30)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        ("1e3", Fraction(1000)),
        ("10k", Fraction(10_000)),
        ("10M", Fraction(10_000_000)),
    ],
)
def test_quantity(text: str, amount: Fraction) -> None:
    assert parse_quantity(text) == amount


@pytest.mark.parametrize("text", ["10MB", "lots", "", "1.2.3", "Mi", "10 Mi"])
def test_not_a_quantity(text: str) -> None:
    with pytest.raises(ValueError, match="is not a quantity"):
        parse_quantity(text)


def test_percentage() -> None:
    assert parse_percentage("10%") == 10
    assert parse_percentage("7.5%") == Fraction(15, 2)
    assert parse_percentage("10") is None


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("1", True), ("T", True), ("false", False), ("0", False), ("FALSE", False)],
)
def test_go_booleans(text: str, value: bool) -> None:
    assert parse_bool(text) is value


def test_not_a_boolean() -> None:
    with pytest.raises(ValueError, match="not a boolean"):
        parse_bool("yes")
