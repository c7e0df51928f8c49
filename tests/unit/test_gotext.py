"""Go-compatible text against Go's own output.

Every expected string below was printed by Go 1.26.8 (Unicode 15.0.0), the toolchain installed
on the development machine: a throwaway program (not in the repository) called
``strconv.Quote`` and ``fmt.Sprintf("%q"/"%v", []string{...})`` on each input,
``time.Duration.String()`` and ``d.Truncate(time.Millisecond).String()`` on each duration, and
``time.ParseDuration`` on each duration text (the value in nanoseconds, or the error),
``t.UTC().Format`` with ``time.RFC3339``, ``"2006-01-02T15:04:05.000000Z07:00"``
(``metav1.RFC3339Micro``) and ``"2006-01-02T15:04:05.000000000Z07:00"`` (cri-client's
``logs.RFC3339NanoFixed``) on each time. The outputs were pasted in unchanged.
"""

from __future__ import annotations

import datetime as dt

import pytest

from nodeagent import gotext

QUOTES = [
    ("", '""'),
    ("plain", '"plain"'),
    ('a"b\\c', '"a\\"b\\\\c"'),
    ("tab\there\x01\x7f", '"tab\\there\\x01\\x7f"'),
    ("\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    ("\x00", '"\\x00"'),
    ("\x1b[31m", '"\\x1b[31m"'),
    ("é 日本 \u200b", '"é 日本 \\u200b"'),
    ("\u00a0", '"\\u00a0"'),
    ("\u0085", '"\\u0085"'),
    ("\u2028", '"\\u2028"'),
    ("\U0001f600", '"\U0001f600"'),
    ("\U000e0001", '"\\U000e0001"'),
    ("\ufeff", '"\\ufeff"'),
    ("\ufffd", '"\ufffd"'),
    ("\U0010ffff", '"\\U0010ffff"'),
    ("\ue000", '"\\ue000"'),
    ("'single'", "\"'single'\""),
    ('say "hi"\n', '"say \\"hi\\"\\n"'),
    ("tab\there", '"tab\\there"'),
]
INVALID_UTF8 = [
    (b"\xff", '"\\xff"'),
    (b"a\xe2\x82z", '"a\\xe2\\x82z"'),
    (b"\xed\xa0\x80", '"\\xed\\xa0\\x80"'),  # an encoded surrogate
    (b"\xc0\x80", '"\\xc0\\x80"'),  # overlong NUL
    (b"\xf4\x90\x80\x80", '"\\xf4\\x90\\x80\\x80"'),  # above U+10FFFF
]
DURATIONS = [
    (0, "0s"),
    (1, "1ns"),
    (999, "999ns"),
    (1000, "1µs"),
    (1500, "1.5µs"),
    (1001, "1.001µs"),
    (999999, "999.999µs"),
    (1000000, "1ms"),
    (1500000, "1.5ms"),
    (500000000, "500ms"),
    (999999999, "999.999999ms"),
    (1000000000, "1s"),
    (1500000000, "1.5s"),
    (1100000000, "1.1s"),
    (10000000000, "10s"),
    (59999000000, "59.999s"),
    (60000000000, "1m0s"),
    (90000000000, "1m30s"),
    (90500000000, "1m30.5s"),
    (80000000000, "1m20s"),
    (160000000000, "2m40s"),
    (300000000000, "5m0s"),
    (3600000000000, "1h0m0s"),
    (3725000000000, "1h2m5s"),
    (123004000000, "2m3.004s"),
    (360000000000000, "100h0m0s"),
    (180512345678, "3m0.512345678s"),
    (-1000000000, "-1s"),
    (-1500000, "-1.5ms"),
    (-1, "-1ns"),
    (9223372036854775807, "2562047h47m16.854775807s"),
    (-9223372036854775808, "-2562047h47m16.854775808s"),
    (1234567000, "1.234567s"),
]
TRUNCATED_TO_MILLISECONDS = [
    (400000, "0s"),
    (523700000, "523ms"),
    (1500000000, "1.5s"),
    (123004000000, "2m3.004s"),
    (3600000000000, "1h0m0s"),
    (523456789, "523ms"),
    (999999, "0s"),
    (123004900000, "2m3.004s"),
    (3600000000001, "1h0m0s"),
    (-1500999, "-1ms"),
]
UTC = dt.UTC
TIMES = [
    # (time, RFC3339, RFC3339Micro, RFC3339NanoFixed)
    (
        dt.datetime(2026, 1, 2, 3, 4, 5, 123456, UTC),
        "2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05.123456Z",
        "2026-01-02T03:04:05.123456000Z",
    ),
    (
        dt.datetime(2026, 1, 2, 3, 4, 5, 0, UTC),
        "2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05.000000Z",
        "2026-01-02T03:04:05.000000000Z",
    ),
    (
        dt.datetime(2026, 1, 2, 3, 4, 5, 120000, UTC),
        "2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05.120000Z",
        "2026-01-02T03:04:05.120000000Z",
    ),
    (
        dt.datetime(1999, 12, 31, 23, 59, 59, 999999, dt.timezone(dt.timedelta(hours=2))),
        "1999-12-31T21:59:59Z",
        "1999-12-31T21:59:59.999999Z",
        "1999-12-31T21:59:59.999999000Z",
    ),
    (
        dt.datetime(1, 1, 1, 0, 0, 0, 0, UTC),
        "0001-01-01T00:00:00Z",
        "0001-01-01T00:00:00.000000Z",
        "0001-01-01T00:00:00.000000000Z",
    ),
]


PARSED_DURATIONS: list[tuple[str, int | str]] = [
    ("0", 0),
    ("+0", 0),
    ("-0", 0),
    ("0s", 0),
    ("10s", 10000000000),
    ("1m30s", 90000000000),
    ("300ms", 300000000),
    ("1.5h", 5400000000000),
    ("2h45m", 9900000000000),
    ("-1.5h", -5400000000000),
    ("1us", 1000),
    ("1µs", 1000),
    ("1μs", 1000),
    ("42ns", 42),
    (".5s", 500000000),
    ("5.s", 5000000000),
    ("1h1m1s1ms", 3661001000000),
    ("0.5ns0.5ns", 0),
    ("1.0000000001s", 1000000000),
    ("0.1h", 360000000000),
    ("1.999999999999s", 1999999999),
    ("2562047h47m16.854775807s", 9223372036854775807),
    ("2562047h47m16.854775808s", 'time: invalid duration "2562047h47m16.854775808s"'),
    ("-2562047h47m16.854775808s", -9223372036854775808),
    ("9223372036854775807ns", 9223372036854775807),
    ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
    ("-9223372036854775808ns", -9223372036854775808),
    ("9999999999h", 'time: invalid duration "9999999999h"'),
    ("", 'time: invalid duration ""'),
    ("+", 'time: invalid duration "+"'),
    ("-", 'time: invalid duration "-"'),
    ("10", 'time: missing unit in duration "10"'),
    ("10 s", 'time: unknown unit " s" in duration "10 s"'),
    ("s", 'time: invalid duration "s"'),
    ("1x", 'time: unknown unit "x" in duration "1x"'),
    ("1m 30s", 'time: unknown unit "m " in duration "1m 30s"'),
    (".s", 'time: invalid duration ".s"'),
    ("1d", 'time: unknown unit "d" in duration "1d"'),
    ("1ms2", 'time: missing unit in duration "1ms2"'),
    ("1..5s", 'time: missing unit in duration "1..5s"'),
    ("\u0661s", 'time: invalid duration "\\xd9\\xa1s"'),
    ("1és", 'time: unknown unit "\\xc3\\xa9s" in duration "1\\xc3\\xa9s"'),
    ('1"s', 'time: unknown unit "\\"s" in duration "1\\"s"'),
    ("1\ts", 'time: unknown unit "\\x09s" in duration "1\\x09s"'),
    ("12345678901234567890ns", 'time: invalid duration "12345678901234567890ns"'),
    ("0.00000000000000000000000001h", 0),
    ("3.000000000000000000000000000000001s", 3000000000),
    ("1s-1s", 'time: unknown unit "s-" in duration "1s-1s"'),
]


@pytest.mark.parametrize(("text", "expected"), QUOTES)
def test_quote_matches_strconv_quote(text: str, expected: str) -> None:
    assert gotext.quote(text) == expected
    assert gotext.quote(text.encode()) == expected


@pytest.mark.parametrize(("raw", "expected"), INVALID_UTF8)
def test_quote_escapes_each_byte_of_invalid_utf8(raw: bytes, expected: str) -> None:
    assert gotext.quote(raw) == expected
    assert gotext.quote(raw.decode("utf-8", "surrogateescape")) == expected


def test_lists_print_as_percent_q_and_percent_v() -> None:
    assert gotext.quote_list(["system"]) == '["system"]'
    assert gotext.quote_list(["kube", "reserved"]) == '["kube" "reserved"]'
    assert gotext.quote_list([]) == "[]"
    assert gotext.join_list(["sh", "-c", "exit 1"]) == "[sh -c exit 1]"
    assert gotext.join_list([]) == "[]"


@pytest.mark.parametrize(("ns", "expected"), DURATIONS)
def test_duration_matches_go_duration_string(ns: int, expected: str) -> None:
    assert gotext.duration(ns) == expected


@pytest.mark.parametrize(("ns", "expected"), TRUNCATED_TO_MILLISECONDS)
def test_duration_truncated_to_milliseconds(ns: int, expected: str) -> None:
    assert gotext.duration(gotext.truncate(ns, gotext.MILLISECOND)) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(0, "0s"), (0.5, "500ms"), (1.1, "1.1s"), (90, "1m30s"), (90.5, "1m30.5s"), (3600, "1h0m0s")],
)
def test_float_seconds_are_exact_to_the_nanosecond(seconds: float, expected: str) -> None:
    assert gotext.duration_seconds(seconds) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        pytest.param(0.0004, "0s", id="under a millisecond is 0s"),
        pytest.param(0.5237, "523ms", id="milliseconds"),
        pytest.param(0.523456789, "523ms", id="nanoseconds cut"),
        pytest.param(1.5, "1.5s", id="seconds with a fraction"),
        pytest.param(123.004, "2m3.004s", id="minutes"),
        pytest.param(123.0049, "2m3.004s", id="minutes, cut"),
        pytest.param(3600, "1h0m0s", id="an hour"),
    ],
)
def test_float_seconds_truncated_to_milliseconds(seconds: float, expected: str) -> None:
    """The image pull time, as ``d.Truncate(time.Millisecond)`` prints it."""
    assert gotext.duration_seconds(seconds, truncate_to=gotext.MILLISECOND) == expected


@pytest.mark.parametrize(("moment", "seconds", "micro", "nano_fixed"), TIMES)
def test_times_format_as_metav1_and_cri_logs(
    moment: dt.datetime, seconds: str, micro: str, nano_fixed: str
) -> None:
    assert gotext.rfc3339(moment) == seconds
    assert gotext.rfc3339_micro(moment) == micro
    assert gotext.rfc3339_nano_fixed(moment) == nano_fixed


def test_a_naive_time_is_taken_as_utc() -> None:
    assert gotext.rfc3339(dt.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.123456789Z", dt.datetime(2026, 1, 2, 3, 4, 5, 123456, UTC)),
        ("2026-01-02T05:04:05+02:00", dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05", dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("", None),
        ("yesterday", None),
        (None, None),
        (17, None),
    ],
)
def test_parse_rfc3339_reads_every_form_back(text: object, expected: dt.datetime | None) -> None:
    assert gotext.parse_rfc3339(text) == expected


@pytest.mark.parametrize(("text", "expected"), PARSED_DURATIONS)
def test_parse_duration_matches_time_parse_duration(text: str, expected: int | str) -> None:
    if isinstance(expected, int):
        assert gotext.parse_duration(text) == expected
    else:
        with pytest.raises(ValueError) as caught:
            gotext.parse_duration(text)
        assert str(caught.value) == expected


def test_parse_duration_reads_back_what_duration_prints() -> None:
    for ns in (1, 999, 1_500, 2 * gotext.SECOND + 7, 90 * gotext.SECOND, 3 * gotext.HOUR):
        assert gotext.parse_duration(gotext.duration(ns)) == ns
        assert gotext.parse_duration(gotext.duration(-ns)) == -ns


def test_out_of_range_durations_say_so_by_their_type() -> None:
    with pytest.raises(gotext.DurationRangeError):
        gotext.parse_duration("9999999999h")
    with pytest.raises(gotext.DurationRangeError):
        gotext.parse_duration("1" * 10_000 + "s")  # refused without reading a huge number
