"""hostPath ``type`` checks, with the kubelet's messages (``hostPath type check failed: /x is
not a directory``). Blocking: call through ``asyncio.to_thread``."""

from __future__ import annotations

import os
import stat
from typing import Final

from nodeagent.volumemanager.source import VolumeSetupError

HOST_PATH_TYPES: Final = (
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
)


def _mode(path: str) -> int | None:
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        raise VolumeSetupError(f"stat {path}: {os.strerror(e.errno or 0).lower()}") from e


def _failed(path: str, what: str) -> VolumeSetupError:
    return VolumeSetupError(f"hostPath type check failed: {path} is not {what}")


def check_host_path(path: str, kind: str | None) -> None:
    """Check (and for the ``...OrCreate`` types, create) ``path``; raise
    :class:`VolumeSetupError`. ``None`` or ``""``: no check, as the kubelet."""
    kind = kind or ""
    if kind not in HOST_PATH_TYPES:
        raise VolumeSetupError(f"{kind} is an invalid volume type")
    if not kind:
        return
    mode = _mode(path)
    try:
        if kind == "DirectoryOrCreate" and mode is None:
            os.makedirs(path, 0o755, exist_ok=True)
            return
        if kind == "FileOrCreate" and mode is None:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644)
            os.close(fd)
            return
    except OSError as e:
        verb = "mkdir" if kind == "DirectoryOrCreate" else "open"
        raise VolumeSetupError(f"{verb} {path}: {os.strerror(e.errno or 0).lower()}") from e
    mode = mode or 0
    if kind in ("DirectoryOrCreate", "Directory") and not stat.S_ISDIR(mode):
        raise _failed(path, "a directory")
    if kind in ("FileOrCreate", "File") and not stat.S_ISREG(mode):
        raise _failed(path, "a file")
    if kind == "Socket" and not stat.S_ISSOCK(mode):
        raise _failed(path, "a socket file")
    if kind == "CharDevice" and not stat.S_ISCHR(mode):
        raise _failed(path, "a character device")
    if kind == "BlockDevice" and not stat.S_ISBLK(mode):
        raise _failed(path, "a block device")
