"""A :class:`logging.Handler` that writes native journald entries over the journal socket.

Each record is one datagram to ``/run/systemd/journal/socket`` (injectable), encoded by
:mod:`nodeagent.log.native`.

*Oversized entries.* A datagram larger than the socket allows fails with ``EMSGSIZE``
(about 208 KiB with the default ``net.core.wmem_default``). Then, as libsystemd does, the
entry is written to a sealed memfd and the descriptor is passed to journald with
``SCM_RIGHTS`` in an empty datagram; journald reads the whole entry from it. Nothing is
truncated.

*Never silently dropped.* If journald cannot be reached (socket gone, refused, memfd
unavailable), the record is written by the ``fallback`` handler (stderr, which systemd
usually connects to the journal as well), preceded once per outage by a warning that says
why. Sends are blocking, like libsystemd's: a wedged journald stalls the event loop and the
systemd watchdog then restarts us, which is what we want rather than losing logs.
"""

from __future__ import annotations

import array
import errno
import fcntl
import logging
import os
import socket
from typing import Final

from nodeagent.log import native
from nodeagent.log.facade import ROOT, with_fields

DEFAULT_SOCKET: Final = "/run/systemd/journal/socket"
IDENTIFIER: Final = "nodeagent"
_SEALS: Final = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL


class JournaldHandler(logging.Handler):
    def __init__(
        self,
        *,
        fallback: logging.Handler,
        socket_path: str = DEFAULT_SOCKET,
        identifier: str = IDENTIFIER,
    ) -> None:
        super().__init__()
        self.socket_path = socket_path
        self._identifier = identifier
        self._fallback = fallback
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._reachable = True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = native.encode(native.record_entry(record, identifier=self._identifier))
            self._send(data)
        except OSError as exc:
            self._fall_back(record, exc)
        except Exception:
            self.handleError(record)
        else:
            self._reachable = True

    def close(self) -> None:
        self.acquire()
        try:
            self._sock.close()
        finally:
            self.release()
        self._fallback.close()
        super().close()

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendto(data, self.socket_path)
        except OSError as exc:
            if exc.errno != errno.EMSGSIZE:
                raise
            self._send_via_memfd(data)

    def _send_via_memfd(self, data: bytes) -> None:
        fd = os.memfd_create("nodeagent-journal", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            fds = array.array("i", [fd])
            self._sock.sendmsg(
                [], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)], 0, self.socket_path
            )
        finally:
            os.close(fd)

    def _fall_back(self, record: logging.LogRecord, exc: OSError) -> None:
        if self._reachable:
            self._reachable = False
            notice = logging.LogRecord(
                f"{ROOT}.log", logging.WARNING, __file__, 0,
                "Cannot write to journald; logging to stderr until it is back", (), None,
            )  # fmt: skip
            error = exc.strerror or str(exc)
            self._fallback.handle(with_fields(notice, {"socket": self.socket_path, "error": error}))
        self._fallback.handle(record)
