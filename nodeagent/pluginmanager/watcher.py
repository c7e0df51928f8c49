"""The plugin registry directory: which sockets are there (the kubelet's plugin watcher walks
it and follows fsnotify; a scan a second is this agent's, the reconciler's own period), and
what the reconciler must do to follow it. Pure, except :func:`scan`."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

REGISTRY_DIR: Final = "plugins_registry"
DIR_MODE: Final = 0o750


@dataclass(frozen=True, slots=True)
class Socket:
    path: str
    stamp: tuple[int, int]
    """(inode, ctime ns): a socket re-created at the same path is a new plugin."""


def scan(directory: Path) -> dict[str, Socket]:
    """Every socket directly in ``directory`` (files starting with ``.`` are skipped, as the
    kubelet's watcher skips them), creating the directory when it is missing."""
    directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    found: dict[str, Socket] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISSOCK(st.st_mode):
                found[entry.path] = Socket(entry.path, (st.st_ino, st.st_ctime_ns))
    return found


@dataclass(frozen=True, slots=True)
class Plan:
    deregister: tuple[str, ...]
    register: tuple[Socket, ...]


def reconcile(desired: Mapping[str, Socket], registered: Mapping[str, Socket]) -> Plan:
    """Deregister what is gone or was replaced; register what is new (or replaced)."""
    gone = tuple(
        path
        for path, sock in registered.items()
        if path not in desired or desired[path].stamp != sock.stamp
    )
    new = tuple(
        sock
        for path, sock in desired.items()
        if path not in registered or registered[path].stamp != sock.stamp
    )
    return Plan(deregister=gone, register=new)
