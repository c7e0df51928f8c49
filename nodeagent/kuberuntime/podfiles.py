"""The files the kubelet keeps for a pod's containers: log directories, the
``/var/log/containers/<pod>_<namespace>_<container>-<id>.log`` symlinks, the termination
message files (created empty, read back when the container has exited) and the pod's managed
``etc-hosts`` (rewritten in place, as it is bind-mounted into running containers).

Blocking filesystem calls run in ``asyncio.to_thread``; failures are logged, never raised: a
missing symlink must not stop a container from starting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path
from typing import Protocol

from nodeagent.log import Logger, get_logger


class Files(Protocol):
    async def ensure_dir(self, path: str) -> None: ...

    async def link(self, target: str, link: str) -> None: ...

    async def unlink(self, path: str) -> None: ...

    async def remove_tree(self, path: str) -> None: ...

    async def remove_links_to(self, directory: str, target_prefix: str) -> None: ...

    async def create_file(self, path: str, mode: int) -> None:
        """An empty file with exactly ``mode`` (whatever the umask), its directory created."""
        ...

    async def read_tail(self, path: str, limit: int) -> bytes | None:
        """The last ``limit`` bytes of a file; None when it does not exist."""
        ...

    async def read_file(self, path: str) -> bytes:
        """A whole file; raises ``OSError``."""
        ...

    async def write_file(self, path: str, data: bytes, mode: int) -> None:
        """Replace a file's content in place (the same inode: it may be bind-mounted into
        running containers), with exactly ``mode``; its directory created. Raises ``OSError``."""
        ...


def legacy_log_symlink(
    container_logs_dir: str, *, pod: str, namespace: str, container: str, container_id: str
) -> str:
    return os.path.join(container_logs_dir, f"{pod}_{namespace}_{container}-{container_id}.log")


class PodFiles:
    def __init__(self, *, log: Logger | None = None) -> None:
        self._log = log or get_logger("kuberuntime.files")

    async def ensure_dir(self, path: str) -> None:
        await asyncio.to_thread(os.makedirs, path, 0o755, True)

    async def link(self, target: str, link: str) -> None:
        def do() -> None:
            os.makedirs(os.path.dirname(link), 0o755, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
            os.symlink(target, link)

        try:
            await asyncio.to_thread(do)
        except OSError as e:
            self._log.warning("Cannot create container log symlink", path=link, error=str(e))

    async def unlink(self, path: str) -> None:
        def do() -> None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

        await asyncio.to_thread(do)

    async def remove_tree(self, path: str) -> None:
        await asyncio.to_thread(shutil.rmtree, path, True)

    async def remove_links_to(self, directory: str, target_prefix: str) -> None:
        """Remove the symlinks in ``directory`` that point below ``target_prefix``."""

        def do() -> None:
            base = Path(directory)
            if not base.is_dir():
                return
            for entry in base.iterdir():
                with contextlib.suppress(OSError):
                    if entry.is_symlink() and os.readlink(entry).startswith(target_prefix):
                        entry.unlink()

        await asyncio.to_thread(do)

    async def create_file(self, path: str, mode: int) -> None:
        def do() -> None:
            os.makedirs(os.path.dirname(path), 0o750, exist_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC, mode)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)

        await asyncio.to_thread(do)

    async def read_file(self, path: str) -> bytes:
        def do() -> bytes:
            with open(path, "rb") as f:
                return f.read()

        return await asyncio.to_thread(do)

    async def write_file(self, path: str, data: bytes, mode: int) -> None:
        def do() -> None:
            os.makedirs(os.path.dirname(path), 0o750, exist_ok=True)
            flags = os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(path, flags, mode)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, mode)
            finally:
                os.close(fd)

        await asyncio.to_thread(do)

    async def read_tail(self, path: str, limit: int) -> bytes | None:
        def do() -> bytes | None:
            try:
                with open(path, "rb") as f:
                    size = f.seek(0, os.SEEK_END)
                    f.seek(max(0, size - limit))
                    return f.read(limit)
            except FileNotFoundError:
                return None

        return await asyncio.to_thread(do)
