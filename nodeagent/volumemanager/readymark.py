"""A volume's ``ready`` mark, as the kubelet's ``volumeutil.SetReady`` / ``IsReady``: an empty
regular file in the volume's metadata directory (``layout.plugin_meta_dir``), written once the
volume is set up, ``fsGroup`` ownership included. It outlives the agent, so an agent started
again does not walk an emptyDir that running containers have been writing, as the kubelet does
not. Blocking: call through ``asyncio.to_thread``."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Final

READY_FILE: Final = "ready"
META_DIR_MODE: Final = 0o750


def is_ready(meta_dir: Path) -> bool:
    """The mark is there, as a regular file (not followed if a link)."""
    try:
        return stat.S_ISREG((meta_dir / READY_FILE).lstat().st_mode)
    except OSError:
        return False


def set_ready(meta_dir: Path) -> None:
    meta_dir.mkdir(mode=META_DIR_MODE, parents=True, exist_ok=True)
    fd = os.open(
        meta_dir / READY_FILE,
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
    )
    os.close(fd)


def clear(meta_dir: Path) -> None:
    """The kubelet removes the mark when the volume directory is gone (set up again)."""
    shutil.rmtree(meta_dir, ignore_errors=True)
