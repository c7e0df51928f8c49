"""The files the kubelet keeps for a pod's containers: log directories and the
``/var/log/containers/<pod>_<namespace>_<container>-<id>.log`` symlinks.

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
