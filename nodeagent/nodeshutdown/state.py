"""``<rootDir>/graceful_node_shutdown_state``: the last shutdown's start and end times, written
atomically (temp file in the same directory, 0644, fsync, rename) as the kubelet writes it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from nodeagent.atomicfile import write_atomic
from nodeagent.nodeshutdown.policy import STATE_FILE, decode_state, encode_state


def write_state(directory: Path, start: datetime | None, end: datetime | None) -> None:
    write_atomic(directory / STATE_FILE, encode_state(start, end), mode=0o644)


def read_state(directory: Path) -> tuple[datetime | None, datetime | None]:
    """The saved times; a missing file is no shutdown yet. Raises ValueError/OSError."""
    try:
        data = (directory / STATE_FILE).read_bytes()
    except FileNotFoundError:
        return None, None
    return decode_state(data)
