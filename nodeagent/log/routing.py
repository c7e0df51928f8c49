"""Where records go: native journald entries under systemd, klog-style lines on stderr
elsewhere.

systemd tells a service that its stderr is the journal by setting ``JOURNAL_STREAM`` to the
``<device>:<inode>`` of that stream; we use journald only when it matches our stderr (so a
child whose stderr was redirected to a file does not write to the journal behind the user's
back), or when asked with ``target="journald"``. If the journal socket is missing we say so on
stderr and log there.

The handler goes on the root logger, so warnings from libraries (asyncio, grpc) land in the
same place; the ``nodeagent`` logger's level follows the verbosity.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Mapping
from typing import Literal, TextIO

from nodeagent.log.facade import ROOT, get_logger, settings
from nodeagent.log.journald import DEFAULT_SOCKET, JournaldHandler
from nodeagent.log.klog import KlogFormatter

Target = Literal["auto", "journald", "stderr"]

_installed: list[logging.Handler] = []


def setup(
    *,
    verbosity: int = 0,
    environ: Mapping[str, str] = os.environ,
    stream: TextIO | None = None,
    target: Target = "auto",
    journal_socket: str = DEFAULT_SOCKET,
) -> None:
    """Configure logging once, at startup (calling it again replaces the configuration)."""
    stream = sys.stderr if stream is None else stream
    stderr = logging.StreamHandler(stream)
    stderr.setFormatter(KlogFormatter())
    handler: logging.Handler = stderr
    wants_journal = target == "journald" or (
        target == "auto" and journal_stream_matches(environ, stream)
    )
    if wants_journal and _is_socket(journal_socket):
        handler = JournaldHandler(fallback=stderr, socket_path=journal_socket)
    reset()
    settings.verbosity = verbosity
    logging.getLogger(ROOT).setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)
    logging.getLogger(ROOT).propagate = True
    logging.getLogger().addHandler(handler)
    _installed.append(handler)
    if wants_journal and handler is stderr:
        get_logger("log").warning(
            "journald socket not found; logging to stderr", socket=journal_socket
        )


def reset() -> None:
    """Undo :func:`setup`: remove and close its handler, verbosity back to 0."""
    root = logging.getLogger()
    while _installed:
        handler = _installed.pop()
        root.removeHandler(handler)
        handler.close()
    settings.verbosity = 0
    logging.getLogger(ROOT).setLevel(logging.NOTSET)


def journal_stream_matches(environ: Mapping[str, str], stream: TextIO) -> bool:
    """True when ``JOURNAL_STREAM`` names ``stream``'s (device, inode): stderr is the journal."""
    dev, sep, ino = environ.get("JOURNAL_STREAM", "").partition(":")
    if not sep:
        return False
    try:
        st = os.fstat(stream.fileno())
        return (int(dev), int(ino)) == (st.st_dev, st.st_ino)
    except (AttributeError, OSError, ValueError):
        return False


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
