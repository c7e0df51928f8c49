"""Structured logging (placeholder API; journald native protocol and key=value stderr).

Usage::

    log = get_logger("nodelease")
    log.info("Lease renewed", node="n1")
    log.v(4).info("detail")           # only at -v 4 and above

Keyword fields become journald fields (upper-cased: ``pod_name`` -> ``POD_NAME``) under
systemd, and ``key=value`` pairs on stderr elsewhere.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TextIO

_ROOT = "nodeagent"
_verbosity = 0


class Logger:
    """A thin structured facade over :mod:`logging`."""

    def __init__(self, logger: logging.Logger, fields: Mapping[str, object] | None = None) -> None:
        self._logger = logger
        self._fields = dict(fields or {})

    def bind(self, **fields: object) -> Logger:
        return Logger(self._logger, {**self._fields, **fields})

    def v(self, level: int) -> Logger:
        return self if level <= _verbosity else _NULL

    def _log(self, lvl: int, msg: str, fields: dict[str, object], exc: bool = False) -> None:
        if self._logger.isEnabledFor(lvl):
            self._logger.log(
                lvl, msg, extra={"fields": {**self._fields, **fields}}, exc_info=exc, stacklevel=3
            )

    def debug(self, msg: str, **fields: object) -> None:
        self._log(logging.DEBUG, msg, fields)

    def info(self, msg: str, **fields: object) -> None:
        self._log(logging.INFO, msg, fields)

    def warning(self, msg: str, **fields: object) -> None:
        self._log(logging.WARNING, msg, fields)

    def error(self, msg: str, **fields: object) -> None:
        self._log(logging.ERROR, msg, fields)

    def exception(self, msg: str, **fields: object) -> None:
        self._log(logging.ERROR, msg, fields, exc=True)


class _NullLogger(Logger):
    def __init__(self) -> None:
        super().__init__(logging.getLogger(_ROOT + ".null"))

    def _log(self, lvl: int, msg: str, fields: dict[str, object], exc: bool = False) -> None:
        return None


_NULL = _NullLogger()


def get_logger(name: str) -> Logger:
    return Logger(logging.getLogger(f"{_ROOT}.{name}"))


class _KVFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: Mapping[str, object] = getattr(record, "fields", {})
        kv = " ".join(f"{k}={_quote(v)}" for k, v in fields.items())
        ts = self.formatTime(record, "%H:%M:%S")
        line = f"{record.levelname[0]}{ts} {record.name}] {record.getMessage()}"
        if kv:
            line += " " + kv
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _quote(v: object) -> str:
    s = str(v)
    return f'"{s}"' if (" " in s or not s or "=" in s) else s


def setup(
    *, verbosity: int = 0, environ: Mapping[str, str] = os.environ, stream: TextIO = sys.stderr
) -> None:
    """Configure the ``nodeagent`` logger tree once, at startup."""
    global _verbosity
    _verbosity = verbosity
    root = logging.getLogger(_ROOT)
    root.handlers.clear()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_KVFormatter())
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)
    root.propagate = False
