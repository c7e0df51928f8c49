"""klog-style stderr lines: header, quoting, fields, tracebacks."""

from __future__ import annotations

import datetime as dt
import inspect
import io
import logging
import os
import re
import time

import pytest

from nodeagent import log
from nodeagent.log.facade import with_fields
from nodeagent.log.klog import KlogFormatter, format_value

HEADER = re.compile(r"^(?P<sev>[DIWEF])(?P<mmdd>\d{4}) (?P<time>\d\d:\d\d:\d\d\.\d{6}) +"
                    r"(?P<pid>\d+) (?P<file>[^ :]+):(?P<line>\d+)\] (?P<rest>.*)$")  # fmt: skip


def test_line_layout_matches_klog() -> None:
    created = dt.datetime(2026, 11, 22, 0, 43, 44, 123456, tzinfo=dt.UTC).timestamp()
    record = logging.LogRecord("nodeagent.agent", logging.INFO, "/x/nodeagent/agent.py", 88,
                               "Started", (), None)  # fmt: skip
    record.created, record.process = created, 1234

    line = KlogFormatter(converter=time.gmtime).format(with_fields(record, {"managers": 1}))

    assert line == 'I1122 00:43:44.123456    1234 agent.py:88] "Started" managers=1'


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        pytest.param("web-0", "web-0", id="plain string"),
        pytest.param(3, "3", id="number"),
        pytest.param(True, "True", id="bool"),
        pytest.param(None, "None", id="None"),
        pytest.param("", '""', id="empty string"),
        pytest.param("signal SIGTERM", '"signal SIGTERM"', id="space"),
        pytest.param('say "hi"', '"say \\"hi\\""', id="quotes"),
        pytest.param("a=b", '"a=b"', id="equals sign"),
        pytest.param("C:\\x", '"C:\\\\x"', id="backslash"),
        pytest.param("two\nlines", '"two\\nlines"', id="newline stays on one line"),
        pytest.param("tab\there", '"tab\\there"', id="tab"),
        pytest.param("ünïcode", "ünïcode", id="printable unicode"),
    ],
)
def test_field_values_are_quoted_only_when_needed(value: object, rendered: str) -> None:
    assert format_value(value) == rendered


def test_logged_line_names_the_caller_and_process() -> None:
    stream = io.StringIO()
    log.setup(verbosity=0, environ={}, stream=stream)
    logger = log.get_logger("agent").bind(node="n1")

    line_no = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    logger.warning('Lease "renew" failed', reason="timed out", attempt=2)

    match = HEADER.match(stream.getvalue().rstrip("\n"))
    assert match is not None, stream.getvalue()
    assert match["sev"] == "W"
    assert match["pid"] == str(os.getpid())
    assert (match["file"], match["line"]) == ("test_stderr_lines.py", str(line_no))
    assert match["rest"] == '"Lease \\"renew\\" failed" node=n1 reason="timed out" attempt=2'


def test_exception_traceback_follows_the_line() -> None:
    stream = io.StringIO()
    log.setup(verbosity=0, environ={}, stream=stream)

    pods: dict[str, int] = {}
    try:
        _ = pods["missing"]
    except KeyError:
        log.get_logger("t").exception("Lookup failed", key="missing")

    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("E")
    assert lines[0].endswith('] "Lookup failed" key=missing')
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "KeyError: 'missing'"


@pytest.mark.parametrize(
    ("level", "letter"),
    [(logging.DEBUG, "D"), (logging.INFO, "I"), (logging.WARNING, "W"), (logging.ERROR, "E"),
     (logging.CRITICAL, "F")],
)  # fmt: skip
def test_severity_letter(level: int, letter: str) -> None:
    record = logging.LogRecord("nodeagent.t", level, "f.py", 1, "m", (), None)

    assert KlogFormatter().format(record)[0] == letter
