"""``<rootDir>/graceful_node_shutdown_state``: the last shutdown's start and end times, written
atomically (temp file in the same directory, 0644, fsync, rename) as the kubelet writes it."""

from __future__ import annotations

import contextlib
import os
import tempfile
from datetime import datetime
from pathlib import Path

from nodeagent.nodeshutdown.policy import STATE_FILE, decode_state, encode_state


def write_state(directory: Path, start: datetime | None, end: datetime | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{STATE_FILE}", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(encode_state(start, end))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / STATE_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_state(directory: Path) -> tuple[datetime | None, datetime | None]:
    """The saved times; a missing file is no shutdown yet. Raises ValueError/OSError."""
    try:
        data = (directory / STATE_FILE).read_bytes()
    except FileNotFoundError:
        return None, None
    return decode_state(data)
