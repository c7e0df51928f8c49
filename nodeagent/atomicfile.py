"""Replace a file's contents all at once, as the kubelet's checkpoints and credentials are.

:func:`write_atomic` writes a fresh temporary file beside the target (``.<name>.tmp``), syncs
it and renames it over the target, so a reader (or the agent after ``kill -9`` or a power cut)
sees the old contents or the new ones, never half of either. The temporary file is created
with ``O_CREAT | O_EXCL | O_NOFOLLOW`` after removing a leftover one (``unlink`` removes a
symlink itself, never its target): neither a leftover's mode nor a link planted at its name is
reused, and the file has its final mode from the moment it exists, whatever the umask.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def temporary_path(path: Path) -> Path:
    """Where :func:`write_atomic` writes before the rename."""
    return path.with_name(f".{path.name}.tmp")


def write_atomic(path: Path, data: bytes, *, mode: int, dir_mode: int = 0o755) -> None:
    """Write ``data`` to ``path`` atomically with file mode ``mode``; missing parent
    directories are made with ``dir_mode``."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    tmp = temporary_path(path)
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, _FLAGS, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
