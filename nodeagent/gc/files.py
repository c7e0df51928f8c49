"""The files container GC removes: container logs, pod log directories, dangling
``/var/log/containers`` symlinks; and the image filesystem's size.

Blocking calls run in ``asyncio.to_thread``. Missing files are not errors (another remover may
have been first); other ``OSError``s propagate to the caller, which logs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
from typing import NamedTuple, Protocol, final


class FsStats(NamedTuple):
    capacity: int
    """Bytes of the filesystem (``f_blocks``), as cAdvisor reports its capacity."""
    available: int
    """Bytes available to unprivileged users (``f_bavail``)."""


class GcFiles(Protocol):
    async def remove_container_log(self, log_path: str) -> None:
        """Remove a container's log and its rotated files (``<log>.*``)."""
        ...

    async def unlink(self, path: str) -> None: ...

    async def list_dir(self, path: str) -> list[str]:
        """Entry names in ``path``; empty when it does not exist."""
        ...

    async def remove_tree(self, path: str) -> None: ...

    async def dangling_links(self, directory: str, suffix: str) -> list[str]:
        """Paths of the symlinks named ``*<suffix>`` in ``directory`` whose target is gone."""
        ...


@final
class LocalFiles:
    async def remove_container_log(self, log_path: str) -> None:
        def do() -> None:
            for path in [log_path, *glob.glob(glob.escape(log_path) + ".*")]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

        await asyncio.to_thread(do)

    async def unlink(self, path: str) -> None:
        def do() -> None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

        await asyncio.to_thread(do)

    async def list_dir(self, path: str) -> list[str]:
        def do() -> list[str]:
            try:
                return sorted(os.listdir(path))
            except FileNotFoundError:
                return []

        return await asyncio.to_thread(do)

    async def remove_tree(self, path: str) -> None:
        def do() -> None:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(path)

        await asyncio.to_thread(do)

    async def dangling_links(self, directory: str, suffix: str) -> list[str]:
        def do() -> list[str]:
            pattern = os.path.join(glob.escape(directory), "*" + suffix)
            return sorted(
                p for p in glob.glob(pattern) if os.path.islink(p) and not os.path.exists(p)
            )

        return await asyncio.to_thread(do)


async def statvfs_stats(path: str) -> FsStats:
    """Size and free space of the filesystem holding ``path``."""
    st = await asyncio.to_thread(os.statvfs, path)
    return FsStats(capacity=st.f_blocks * st.f_frsize, available=st.f_bavail * st.f_frsize)


def _satisfies_protocol(files: LocalFiles) -> GcFiles:
    return files  # mypy checks LocalFiles against GcFiles here
