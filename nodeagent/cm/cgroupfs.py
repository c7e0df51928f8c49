"""Cgroup v2 directories and interface files (blocking; the manager calls these through
``asyncio.to_thread``).

:class:`CgroupFs` works under one mount point (``/sys/fs/cgroup``; a temporary directory in
unit tests): create a cgroup with the controllers enabled on its way down, write its limits,
list child cgroups, and remove a cgroup tree bottom-up after killing what is left in it
(``cgroup.kill``), as libcontainer's ``Destroy`` does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from nodeagent.errors import AgentError

CGROUP_MOUNT: Final = Path("/sys/fs/cgroup")
CONTROLLERS: Final = ("cpu", "memory", "pids")
RMDIR_ATTEMPTS: Final = 10
RMDIR_DELAY: Final = 0.05


class CgroupError(AgentError, OSError):
    """A cgroupfs write or rmdir failed; an ``OSError`` too, with its ``errno``."""


def files_vanish_rmdir(directory: Path) -> None:
    """``rmdir`` with cgroupfs semantics on an ordinary directory: its plain files (the
    interface files) go with it. For trees that stand in for /sys/fs/cgroup in tests."""
    for entry in directory.iterdir():
        if entry.is_file():
            entry.unlink()
    directory.rmdir()


class CgroupFs:
    def __init__(
        self, *, mount: Path = CGROUP_MOUNT, rmdir: Callable[[Path], None] = Path.rmdir
    ) -> None:
        self.mount = mount
        self._rmdir_fn = rmdir

    def path(self, cgroup: str) -> Path:
        return self.mount / cgroup.strip("/")

    def exists(self, cgroup: str) -> bool:
        return self.path(cgroup).is_dir()

    def _enable_controllers(self, directory: Path) -> None:
        """``+cpu +memory +pids`` in ``directory``'s ``cgroup.subtree_control``, for the ones it
        has and has not enabled yet."""
        try:
            available = (directory / "cgroup.controllers").read_text().split()
            enabled = (directory / "cgroup.subtree_control").read_text().split()
        except FileNotFoundError:
            return
        wanted = [c for c in CONTROLLERS if c in available and c not in enabled]
        if wanted:
            (directory / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))

    def create(self, cgroup: str) -> None:
        """Create ``cgroup`` and its missing parents, controllers enabled down the path."""
        current = self.mount
        for part in [p for p in cgroup.split("/") if p]:
            self._enable_controllers(current)
            current = current / part
            current.mkdir(exist_ok=True)

    def write(self, cgroup: str, files: Mapping[str, str]) -> None:
        directory = self.path(cgroup)
        for name, content in files.items():
            target = directory / name
            try:
                target.write_text(content)
            except OSError as e:
                raise CgroupError(
                    e.errno, f"cannot write {content!r} to {target}: {os.strerror(e.errno or 0)}"
                ) from e

    def read(self, cgroup: str, name: str) -> str | None:
        try:
            return (self.path(cgroup) / name).read_text().strip()
        except OSError:
            return None

    def children(self, cgroup: str) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self.path(cgroup)) if e.is_dir())
        except FileNotFoundError:
            return []

    def remove(self, cgroup: str) -> bool:
        """Remove ``cgroup`` and everything below it; False when it was not there."""
        top = self.path(cgroup)
        if not top.is_dir():
            return False
        kill = top / "cgroup.kill"
        if kill.exists() and (self.read(cgroup, "cgroup.procs") or self._has_descendants(top)):
            with contextlib.suppress(OSError):
                kill.write_text("1")
        for directory, _dirs, _files in sorted(
            os.walk(top), key=lambda entry: entry[0].count("/"), reverse=True
        ):
            self._rmdir(Path(directory))
        return True

    @staticmethod
    def _has_descendants(top: Path) -> bool:
        return any(e.is_dir() for e in os.scandir(top))

    def _rmdir(self, directory: Path) -> None:
        for attempt in range(RMDIR_ATTEMPTS):
            try:
                self._rmdir_fn(directory)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY or attempt + 1 == RMDIR_ATTEMPTS:
                    raise CgroupError(
                        e.errno, f"cannot remove cgroup {directory}: {os.strerror(e.errno or 0)}"
                    ) from e
                time.sleep(RMDIR_DELAY)
