"""The journald native protocol, as pure functions (see systemd.journal-fields(7) and
https://systemd.io/JOURNAL_NATIVE_PROTOCOL/).

An entry is a sequence of fields. A value without a newline is written ``NAME=value\\n``; a
value containing one uses the binary-safe form ``NAME\\n`` + little-endian uint64 length +
the raw bytes + ``\\n``.

Every record carries ``MESSAGE`` (with the traceback appended when there is one, so plain
``journalctl`` shows it), ``PRIORITY`` (syslog number), ``SYSLOG_IDENTIFIER``, the caller's
``CODE_FILE``/``CODE_LINE``/``CODE_FUNC``, ``LOGGER`` (the logger name) and, for exceptions,
``EXCEPTION_TYPE``. Keyword fields follow, named by :func:`field_name`.
"""

from __future__ import annotations

import logging
import re
import struct
import traceback
from collections.abc import Iterable, Mapping
from typing import Final

from nodeagent.log.facade import record_fields

MAX_NAME: Final = 64
RESERVED: Final = frozenset(
    {
        "MESSAGE",
        "PRIORITY",
        "SYSLOG_IDENTIFIER",
        "CODE_FILE",
        "CODE_LINE",
        "CODE_FUNC",
        "LOGGER",
        "EXCEPTION_TYPE",
    }
)
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_INVALID = re.compile(r"[^A-Z0-9_]")

Field = tuple[str, object]


def syslog_priority(levelno: int) -> int:
    """logging level -> syslog priority: critical 2, error 3, warning 4, info 6, debug 7."""
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


def field_name(key: str) -> str:
    """A keyword name as a valid journald field name: ``pod_name``/``podName`` -> ``POD_NAME``.

    journald accepts only ``[A-Z0-9_]``, at most 64 characters, not starting with a digit or
    ``_`` (those are trusted fields set by journald itself). Other characters become ``_``,
    leading underscores are dropped, and a name that would start with a digit or collide with
    a field set by the handler (``MESSAGE``, ``PRIORITY``, ...) gets an ``F_`` prefix.
    """
    name = _INVALID.sub("_", _CAMEL_HUMP.sub("_", key).upper()).lstrip("_")
    if not name or name[0].isdigit() or name in RESERVED:
        name = "F_" + name
    return name[:MAX_NAME]


def value_bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    text = value if isinstance(value, str) else str(value)
    return text.encode("utf-8", "backslashreplace")


def encode_field(name: str, value: bytes) -> bytes:
    if b"\n" in value:
        return name.encode() + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"
    return name.encode() + b"=" + value + b"\n"


def encode(fields: Iterable[Field]) -> bytes:
    return b"".join(encode_field(name, value_bytes(value)) for name, value in fields)


def _type_name(exc_type: type[BaseException]) -> str:
    module = exc_type.__module__
    return exc_type.__qualname__ if module == "builtins" else f"{module}.{exc_type.__qualname__}"


def record_entry(record: logging.LogRecord, *, identifier: str) -> list[Field]:
    """The journald fields for one record, in order."""
    message = record.getMessage()
    exc_type = record.exc_info[0] if record.exc_info else None
    if record.exc_info:
        message += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
    if record.stack_info:
        message += "\n" + record.stack_info
    entry: list[Field] = [
        ("MESSAGE", message),
        ("PRIORITY", syslog_priority(record.levelno)),
        ("SYSLOG_IDENTIFIER", identifier),
        ("CODE_FILE", record.pathname),
        ("CODE_LINE", record.lineno),
        ("CODE_FUNC", record.funcName),
        ("LOGGER", record.name),
    ]
    if exc_type is not None:
        entry.append(("EXCEPTION_TYPE", _type_name(exc_type)))
    entry += domain_fields(record_fields(record))
    return entry


def domain_fields(fields: Mapping[str, object]) -> list[Field]:
    return [(field_name(key), value) for key, value in fields.items()]
