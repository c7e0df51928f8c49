"""Readable stderr lines in the kubelet's (klog's) text format, with key=value fields::

    I1122 00:43:44.123456    1234 agent.py:88] "Started" managers=1 reason="signal SIGTERM"

The header is the severity letter (``I``nfo, ``W``arning, ``E``rror, ``F`` for critical, plus
``D`` for debug, which klog does not have), month and day, local time with microseconds, the
process id right-aligned in 7 columns, and the caller's file and line. The message is always
quoted; a field value is quoted only when it is empty or holds whitespace, ``"``, ``=``, ``\\``
or a non-printable character. Quoting uses JSON string escapes, so every record stays on one
line, except that a traceback follows on its own lines.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable

from nodeagent.log.facade import record_fields

_NEEDS_QUOTES = re.compile(r'[\s"=\\]')


def severity_letter(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "F"
    if levelno >= logging.ERROR:
        return "E"
    if levelno >= logging.WARNING:
        return "W"
    if levelno >= logging.INFO:
        return "I"
    return "D"


def quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def format_value(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    if text and text.isprintable() and not _NEEDS_QUOTES.search(text):
        return text
    return quote(text)


def format_key(key: str) -> str:
    return _NEEDS_QUOTES.sub("_", key) or "_"


class KlogFormatter(logging.Formatter):
    """Formats a record as one klog-style line (plus traceback lines, if any)."""

    def __init__(self, *, converter: Callable[[float], time.struct_time] = time.localtime) -> None:
        super().__init__()
        self._converter = converter

    def header(self, record: logging.LogRecord) -> str:
        seconds, usec = divmod(round(record.created * 1_000_000), 1_000_000)
        t = self._converter(seconds)
        return (
            f"{severity_letter(record.levelno)}{t.tm_mon:02d}{t.tm_mday:02d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{usec:06d} "
            f"{record.process or 0:7d} {record.filename}:{record.lineno}]"
        )

    def format(self, record: logging.LogRecord) -> str:
        parts = [self.header(record), quote(record.getMessage())]
        parts += [f"{format_key(k)}={format_value(v)}" for k, v in record_fields(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line
