"""The kernel boundary: tmpfs mounts and unmounts, and the mount table.

``mount(8)``/``umount(8)`` run as asyncio subprocesses, as the kubelet's mount-utils runs them:
the messages a failure carries are the ones the kubelet's ``FailedMount`` Events show
(``mount failed: exit status 32 ... Output: ...``), nothing blocks the event loop, and no
``struct``/errno plumbing through ctypes is needed for two calls per pod. The mount table is
``/proc/self/mountinfo``, read in a worker thread and parsed by :func:`parse_mountinfo`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final, Protocol

from nodeagent.errors import AgentError

MOUNTINFO: Final = "/proc/self/mountinfo"


class MountError(AgentError):
    pass


class Mounter(Protocol):
    async def mount_tmpfs(self, target: str, size: int | None) -> None: ...

    async def bind(self, source: str, target: str, *, read_only: bool = False) -> None:
        """Bind-mount ``source`` (taken as it is: a ``/proc/<pid>/fd/<n>`` link) on
        ``target``, read-only if asked."""
        ...

    async def make_shared(self, target: str) -> None:
        """Mark the mount at ``target`` and every mount below it shared (``rshared``)."""
        ...

    async def unmount(self, target: str) -> None: ...

    async def mount_points(self) -> list[str]:
        """Every mount point of this mount namespace, in mount order."""
        ...

    async def is_shared(self, path: str) -> bool:
        """Whether the mount holding ``path`` propagates (``shared:`` in mountinfo)."""
        ...


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\ooo``."""
    if "\\" not in field:  # nearly every mount point: nothing to undo
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
            continue
        out.append(field[i])
        i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[str]:
    """The mount points (5th field) of a ``/proc/<pid>/mountinfo`` text, in order."""
    points = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) >= 5:
            points.append(_unescape(fields[4]))
    return points


def is_shared_mount(text: str, path: str) -> bool:
    """Whether the deepest mount of a mountinfo ``text`` holding ``path`` (a real path) is
    shared: its optional fields (between the 6th field and ``-``) have ``shared:N``."""
    best, shared = "", False
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 7:
            continue
        point = _unescape(fields[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            optional = fields[6 : fields.index("-")] if "-" in fields else []
            best, shared = point, any(f.startswith("shared:") for f in optional)
    return shared


def below(points: list[str], directory: str) -> list[str]:
    """The mount points at or below ``directory``, deepest (latest) first, once each."""
    base = directory.rstrip("/")
    found = [p for p in points if p == base or p.startswith(base + "/")]
    return list(dict.fromkeys(reversed(found)))


class SystemMounter:
    def __init__(self, *, mountinfo: str = MOUNTINFO) -> None:
        self._mountinfo = mountinfo

    async def _run(self, *argv: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await proc.communicate()
        if proc.returncode != 0:
            raise MountError(
                f"mount failed: exit status {proc.returncode}\n"
                f"Mounting command: {argv[0]}\nMounting arguments: {' '.join(argv[1:])}\n"
                f"Output: {output.decode(errors='replace').strip()}"
            )

    async def mount_tmpfs(self, target: str, size: int | None) -> None:
        options = ["-o", f"size={size}"] if size else []
        await self._run("mount", "-t", "tmpfs", *options, "tmpfs", target)

    async def bind(self, source: str, target: str, *, read_only: bool = False) -> None:
        options = ["-o", "ro"] if read_only else []
        await self._run("mount", "--no-canonicalize", "--bind", *options, source, target)

    async def make_shared(self, target: str) -> None:
        await self._run("mount", "--make-rshared", target)

    async def unmount(self, target: str) -> None:
        await self._run("umount", target)

    async def mount_points(self) -> list[str]:
        text = await asyncio.to_thread(Path(self._mountinfo).read_text)
        return parse_mountinfo(text)

    async def is_shared(self, path: str) -> bool:
        text = await asyncio.to_thread(Path(self._mountinfo).read_text)
        return is_shared_mount(text, path)
