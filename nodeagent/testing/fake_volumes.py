"""Fakes for the volume manager's two boundaries: the kernel's mount table
(:class:`FakeMounter`) and the writer of API-sourced volume content
(:class:`FakeContentSource`, the shape of ``volumemanager.content``'s ``ContentSource``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from nodeagent.podspec import Pod, Volume
from nodeagent.volumemanager.mounter import MountError
from nodeagent.volumemanager.source import VolumeSetupError


class FakeMounter:
    """A mount table in memory: ``tmpfs`` maps each mount point to its ``size=``."""

    def __init__(self) -> None:
        self.tmpfs: dict[str, int | None] = {}
        self.busy: set[str] = set()
        """Mount points whose unmount fails (``target is busy``)."""
        self.shared: set[str] = set()
        self.binds: dict[str, str] = {}
        """Bind mount target -> the path its source descriptor pointed to."""
        self.read_only: set[str] = set()
        self.root_shared = True
        """What ``is_shared`` says of a path that is no shared mount of its own."""
        self.calls: list[tuple[str, str]] = []

    async def bind(self, source: str, target: str, *, read_only: bool = False) -> None:
        self.calls.append(("bind", target))
        if read_only:
            self.read_only.add(target)
        self.binds[target] = await asyncio.to_thread(os.path.realpath, source)

    async def make_shared(self, target: str) -> None:
        self.calls.append(("make-rshared", target))
        if target not in self.tmpfs and target not in self.binds:
            raise MountError(f"mount: {target}: not mount point or bad option.")
        self.shared.add(target)

    async def mount_tmpfs(self, target: str, size: int | None) -> None:
        self.calls.append(("mount", target))
        if not await asyncio.to_thread(Path(target).is_dir):
            raise MountError(f"mount point {target} does not exist")
        self.tmpfs[target] = size

    async def unmount(self, target: str) -> None:
        self.calls.append(("umount", target))
        if target in self.busy:
            raise MountError(f"umount: {target}: target is busy.")
        self.tmpfs.pop(target, None)
        self.binds.pop(target, None)
        self.shared.discard(target)

    async def mount_points(self) -> list[str]:
        return ["/", *self.tmpfs, *self.binds]

    async def is_shared(self, path: str) -> bool:
        return path in self.shared or self.root_shared


class FakeContentSource:
    """Writes ``files[volume name]`` (file name -> text) into the volume's directory; a volume
    named in ``failures`` raises ``VolumeSetupError`` with that message."""

    def __init__(self) -> None:
        self.files: dict[str, dict[str, str]] = {}
        self.failures: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.forgotten: list[str] = []

    async def set_up(self, pod: Pod, volume: Volume, target: Path) -> None:
        self.calls.append((pod.uid, volume.name))
        if volume.name in self.failures:
            raise VolumeSetupError(self.failures[volume.name])
        for name, text in self.files.get(volume.name, {}).items():
            await asyncio.to_thread((target / name).write_text, text)

    def forget(self, pod_uid: str) -> None:
        self.forgotten.append(pod_uid)
