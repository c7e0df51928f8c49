"""``fsGroup`` ownership of a volume, as the kubelet's ``SetVolumeOwnership``: every file and
directory gets the group (``lchown``), group read-write (read-only for API-sourced volumes),
directories also group-execute and setgid; symlinks are never followed. With
``fsGroupChangePolicy: OnRootMismatch`` nothing is walked when the volume's root already has
the group and the permissions. Blocking: call through ``asyncio.to_thread``."""

from __future__ import annotations

import os
import stat
from typing import Final

from nodeagent.log import Logger

RW_MASK: Final = 0o660
RO_MASK: Final = 0o440
EXEC_MASK: Final = 0o110
ON_ROOT_MISMATCH: Final = "OnRootMismatch"


def _mask(*, is_dir: bool, read_only: bool) -> int:
    mask = RO_MASK if read_only else RW_MASK
    return mask | stat.S_ISGID | EXEC_MASK if is_dir else mask


def root_matches(path: str, fs_group: int, *, read_only: bool) -> bool:
    """The kubelet's ``skipPermissionChange``: the root has the group and the mask."""
    st = os.stat(path)
    mask = _mask(is_dir=stat.S_ISDIR(st.st_mode), read_only=read_only)
    return st.st_gid == fs_group and st.st_mode & mask == mask


def _change(path: str, st: os.stat_result, fs_group: int, read_only: bool, log: Logger) -> None:
    try:
        os.lchown(path, -1, fs_group)
    except OSError as e:
        log.warning("Cannot change the group of a volume file", path=path, error=str(e))
    if stat.S_ISLNK(st.st_mode):
        return
    mask = _mask(is_dir=stat.S_ISDIR(st.st_mode), read_only=read_only)
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode) | mask)
    except OSError as e:
        log.warning("Cannot change the mode of a volume file", path=path, error=str(e))


def set_volume_ownership(
    path: str, fs_group: int, *, read_only: bool, policy: str | None, log: Logger
) -> bool:
    """Apply ``fs_group`` to the tree at ``path``; False when the policy skipped the walk."""
    if policy == ON_ROOT_MISMATCH and root_matches(path, fs_group, read_only=read_only):
        return False
    _change(path, os.lstat(path), fs_group, read_only, log)
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in (*dirs, *files):
            child = os.path.join(top, name)
            try:
                st = os.lstat(child)
            except FileNotFoundError:
                continue
            _change(child, st, fs_group, read_only, log)
    return True
