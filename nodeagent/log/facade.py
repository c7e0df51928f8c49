"""The structured logger facade: ``get_logger(name).bind(**fields).v(n).info(msg, **fields)``.

Records are ordinary :class:`logging.LogRecord` objects carrying their keyword fields in one
attribute (see :func:`record_fields`), so any handler can render them. The call site recorded
in ``pathname``/``lineno``/``funcName`` is the caller of ``info()``/``error()``/..., never this
module: the record is built here from the caller's frame instead of relying on ``stacklevel``
arithmetic, which depends on logging's internals.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from types import TracebackType
from typing import Final

ROOT: Final = "nodeagent"
_FIELDS_ATTR: Final = "nodeagent_fields"

_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


class _Settings:
    """Process-wide logging settings; written only by :func:`nodeagent.log.setup`."""

    verbosity: int = 0


settings = _Settings()


def record_fields(record: logging.LogRecord) -> Mapping[str, object]:
    """The keyword fields of a record (empty for records from other libraries)."""
    fields: Mapping[str, object] = getattr(record, _FIELDS_ATTR, {})
    return fields


def with_fields(record: logging.LogRecord, fields: Mapping[str, object]) -> logging.LogRecord:
    setattr(record, _FIELDS_ATTR, dict(fields))
    return record


class Logger:
    """A structured facade over one :class:`logging.Logger`; cheap to create and to bind."""

    __slots__ = ("_fields", "_logger")

    def __init__(self, logger: logging.Logger, fields: Mapping[str, object] | None = None) -> None:
        self._logger = logger
        self._fields = dict(fields or {})

    @property
    def name(self) -> str:
        return self._logger.name

    @property
    def enabled(self) -> bool:
        """False for the logger returned by ``v(n)`` above the verbosity: skip costly work."""
        return True

    def bind(self, **fields: object) -> Logger:
        """A logger that adds ``fields`` to every record (call-site fields win)."""
        return Logger(self._logger, {**self._fields, **fields})

    def v(self, level: int) -> Logger:
        """This logger if ``level <= verbosity`` (like the kubelet's ``klog.V(level)``)."""
        return self if level <= settings.verbosity else _DISABLED

    def debug(self, msg: str, **fields: object) -> None:
        self._log(logging.DEBUG, msg, fields)

    def info(self, msg: str, **fields: object) -> None:
        self._log(logging.INFO, msg, fields)

    def warning(self, msg: str, **fields: object) -> None:
        self._log(logging.WARNING, msg, fields)

    def error(self, msg: str, **fields: object) -> None:
        self._log(logging.ERROR, msg, fields)

    def exception(self, msg: str, **fields: object) -> None:
        """An error with the traceback of the exception being handled."""
        exc = sys.exception()
        self._log(logging.ERROR, msg, fields, _exc_info(exc))

    def _log(
        self, level: int, msg: str, fields: Mapping[str, object], exc: _ExcInfo | None = None
    ) -> None:
        logger = self._logger
        if not logger.isEnabledFor(level):
            return
        caller = sys._getframe(2)  # _log <- info()/error()/... <- the caller
        code = caller.f_code
        record = logger.makeRecord(
            logger.name, level, code.co_filename, caller.f_lineno, msg, (), exc, code.co_qualname
        )
        logger.handle(with_fields(record, {**self._fields, **fields}))


def _exc_info(exc: BaseException | None) -> _ExcInfo | None:
    return None if exc is None else (type(exc), exc, exc.__traceback__)


class _DisabledLogger(Logger):
    """What ``v(n)`` returns above the verbosity: every call is a no-op."""

    __slots__ = ()

    @property
    def enabled(self) -> bool:
        return False

    def bind(self, **fields: object) -> Logger:
        return self

    def v(self, level: int) -> Logger:
        return self

    def _log(
        self, level: int, msg: str, fields: Mapping[str, object], exc: _ExcInfo | None = None
    ) -> None:
        return None


_DISABLED: Final = _DisabledLogger(logging.getLogger(f"{ROOT}.disabled"))


def get_logger(name: str) -> Logger:
    """The logger for one concern: ``get_logger("nodelease")`` logs as ``nodeagent.nodelease``.

    A dotted module name such as ``__name__`` inside the package is used as is.
    """
    full = name if name == ROOT or name.startswith(ROOT + ".") else f"{ROOT}.{name}"
    return Logger(logging.getLogger(full))
