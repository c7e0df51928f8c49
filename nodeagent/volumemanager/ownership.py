"""``fsGroup`` ownership of a volume, as the kubelet's ``SetVolumeOwnership``: every file and
directory gets the group, group read-write (read-only for API-sourced volumes), directories
also group-execute and setgid; a symlink gets the group itself and nothing else. With
``fsGroupChangePolicy: OnRootMismatch`` nothing is walked when the volume's root already has
the group and the permissions. Children first, then their directory, as the kubelet's
``walkDeep``.

The tree belongs to running containers, which may swap any entry for a symlink while it is
walked. So nothing is ever reached by a path: each directory is opened with ``O_NOFOLLOW``
under its parent's descriptor and changed through that descriptor (``fchown``/``fchmod``);
any other entry is opened ``O_PATH | O_NOFOLLOW`` (no open side effects, a symlink opens as
itself) and changed through that descriptor's ``/proc/self/fd`` link, which names the inode,
or, when it is a symlink, ``fchownat(AT_SYMLINK_NOFOLLOW)`` on the link. An entry that moves
or vanishes under the walk is skipped. Iterative: a container controls the depth.
Blocking: call through ``asyncio.to_thread``.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final

from nodeagent.log import Logger

RW_MASK: Final = 0o660
RO_MASK: Final = 0o440
EXEC_MASK: Final = 0o110
ON_ROOT_MISMATCH: Final = "OnRootMismatch"
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
ENTRY_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
# The entry was swapped or removed between the listing and the open: not ours to change.
_MOVED: Final = frozenset({errno.ENOENT, errno.ELOOP, errno.ENOTDIR})


def _mask(*, is_dir: bool, read_only: bool) -> int:
    mask = RO_MASK if read_only else RW_MASK
    return mask | stat.S_ISGID | EXEC_MASK if is_dir else mask


def root_matches(path: str, fs_group: int, *, read_only: bool) -> bool:
    """The kubelet's ``skipPermissionChange``: the root has the group and the mask."""
    st = os.stat(path)
    mask = _mask(is_dir=stat.S_ISDIR(st.st_mode), read_only=read_only)
    return st.st_gid == fs_group and st.st_mode & mask == mask


class _Walk:
    def __init__(self, fs_group: int, read_only: bool, log: Logger) -> None:
        self.fs_group = fs_group
        self.read_only = read_only
        self.log = log

    def change_dir(self, fd: int, where: str) -> None:
        """The open directory ``fd``: group, then mode."""
        try:
            os.fchown(fd, -1, self.fs_group)
        except OSError as e:
            self.log.warning("Cannot change the group of a volume file", path=where, error=str(e))
        mode = stat.S_IMODE(os.fstat(fd).st_mode) | _mask(is_dir=True, read_only=self.read_only)
        try:
            os.fchmod(fd, mode)
        except OSError as e:
            self.log.warning("Cannot change the mode of a volume file", path=where, error=str(e))

    def change_entry(self, parent: int, name: str, where: str) -> None:
        """A non-directory ``name`` under ``parent``, never through a symlink."""
        try:
            fd = os.open(name, ENTRY_FLAGS, dir_fd=parent)
        except OSError as e:
            if e.errno not in _MOVED:
                self.log.warning("Cannot open a volume file", path=where, error=str(e))
            return
        try:
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                self._chown_link(parent, name, where)
                return
            if stat.S_ISDIR(st.st_mode):
                return  # a directory swapped in: the next walk of its parent takes it
            link = f"/proc/self/fd/{fd}"  # the inode opened above, not a path
            try:
                os.chown(link, -1, self.fs_group)
            except OSError as e:
                self.log.warning(
                    "Cannot change the group of a volume file", path=where, error=str(e)
                )
            mode = stat.S_IMODE(st.st_mode) | _mask(is_dir=False, read_only=self.read_only)
            try:
                os.chmod(link, mode)
            except OSError as e:
                self.log.warning(
                    "Cannot change the mode of a volume file", path=where, error=str(e)
                )
        finally:
            os.close(fd)

    def _chown_link(self, parent: int, name: str, where: str) -> None:
        try:
            os.chown(name, -1, self.fs_group, dir_fd=parent, follow_symlinks=False)
        except OSError as e:
            if e.errno not in _MOVED:
                self.log.warning(
                    "Cannot change the group of a volume file", path=where, error=str(e)
                )

    def tree(self, root: int, path: str) -> None:
        """Every entry below the open directory ``root``, children before their directory;
        ``root`` itself last."""
        stack: list[tuple[int, list[str], str]] = [(root, os.listdir(root), path)]
        try:
            while stack:
                fd, pending, where = stack[-1]
                if not pending:
                    stack.pop()
                    self.change_dir(fd, where)
                    if fd != root:
                        os.close(fd)
                    continue
                name = pending.pop()
                child_where = os.path.join(where, name)
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # gone
                if not stat.S_ISDIR(st.st_mode):
                    self.change_entry(fd, name, child_where)
                    continue
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in _MOVED:  # swapped for a symlink or a file since the stat
                        self.change_entry(fd, name, child_where)
                    else:
                        self.log.warning(
                            "Cannot open a volume directory", path=child_where, error=str(e)
                        )
                    continue
                try:
                    names = os.listdir(child)
                except OSError as e:
                    os.close(child)
                    self.log.warning("Cannot list a volume directory", path=child_where,
                                     error=str(e))  # fmt: skip
                    continue
                stack.append((child, names, child_where))
        finally:
            for fd, _, _ in stack:
                if fd != root:
                    os.close(fd)


def set_volume_ownership(
    path: str, fs_group: int, *, read_only: bool, policy: str | None, log: Logger
) -> bool:
    """Apply ``fs_group`` to the tree at ``path`` (itself never a symlink: ``ELOOP``);
    False when the policy skipped the walk."""
    if policy == ON_ROOT_MISMATCH and root_matches(path, fs_group, read_only=read_only):
        return False
    root = os.open(path, DIR_FLAGS)
    try:
        _Walk(fs_group, read_only, log).tree(root, path)
    finally:
        os.close(root)
    return True
