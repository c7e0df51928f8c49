"""Reading the static pod path: the filesystem boundary of the file source.

:class:`ManifestReader` is what the file source calls; :class:`DirectoryReader` reads the real
filesystem in a worker thread (``asyncio.to_thread``), ``nodeagent.testing.fake_manifests``
holds manifests in memory. As the kubelet does: the path is a directory of manifests (files
whose name starts with ``.`` are ignored, subdirectories are not recursed into) or one file.
A file bigger than ``limits.MAX_MANIFEST_BYTES`` is not read whole: at most one byte more, so
the manifest code can refuse it. Each file carries its ``stamp`` (device, inode, size, mtime):
the file source re-parses a file only when its stamp changes.
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass, field
from typing import Protocol

from nodeagent.staticpods.limits import MAX_MANIFEST_BYTES

Stamp = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class ManifestFile:
    path: str
    data: bytes = b""
    error: str = ""
    """Why the file could not be read (then ``data`` is empty)."""
    stamp: Stamp | None = field(default=None, compare=False)
    """``(st_dev, st_ino, st_size, st_mtime_ns)`` when read from a filesystem."""


@dataclass(frozen=True, slots=True)
class Listing:
    exists: bool
    files: tuple[ManifestFile, ...] = ()


class ManifestReader(Protocol):
    async def read(self, path: str) -> Listing:
        """The manifests under ``path``, sorted by path; ``exists=False`` when there is
        nothing at ``path``. Raises ``OSError`` when ``path`` cannot be listed."""
        ...


def read_path(path: str) -> Listing:
    """Blocking: what :class:`DirectoryReader` runs in a thread."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Listing(exists=False)
    if stat.S_ISREG(st.st_mode):
        return Listing(exists=True, files=(_read_file(path),))
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{path}: not a directory or a regular file")
    files = []
    for name in sorted(os.listdir(path)):
        if name.startswith("."):
            continue
        full = os.path.join(path, name)
        try:
            mode = os.stat(full).st_mode
        except FileNotFoundError:
            continue  # removed while we listed
        except OSError as e:
            files.append(ManifestFile(full, error=e.strerror or str(e)))
            continue
        if stat.S_ISDIR(mode):
            files.append(ManifestFile(full, error="a directory; not recursing into it"))
        elif not stat.S_ISREG(mode):
            files.append(ManifestFile(full, error="not a regular file"))
        else:
            files.append(_read_file(full))
    return Listing(exists=True, files=tuple(f for f in files if f is not _GONE))


_GONE = ManifestFile("")


def _read_file(path: str) -> ManifestFile:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            return ManifestFile(path, data=f.read(MAX_MANIFEST_BYTES + 1), stamp=stamp)
    except FileNotFoundError:
        return _GONE
    except OSError as e:
        return ManifestFile(path, error=e.strerror or str(e))


class DirectoryReader:
    async def read(self, path: str) -> Listing:
        return await asyncio.to_thread(read_path, path)
