"""Open a path beneath a directory without ever following a symlink.

For trees that someone else can write (``/var/log`` with a hostPath pod in it, a pod's
volumes): a check of the path followed by a second open by name lets a writer swap a
component for a symlink in between. Here the descriptor that was checked is the one used.

:func:`open_beneath` resolves ``relative`` from a directory descriptor with ``openat2(2)``
and ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` (Linux 5.6+): the kernel refuses ``..`` out of
the directory, an absolute path, and any symlink on the way (``/proc`` magic links included).
Where ``openat2`` is missing (``ENOSYS``: an older kernel or a seccomp filter), the same
rules hold by walking one component at a time with ``O_NOFOLLOW`` under the parent's
descriptor. Either way a symlink anywhere in the path is :class:`NotBeneath`, never followed.
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Final

SYS_OPENAT2: Final = 437  # the same number on every architecture (asm-generic)
RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08
AT_FDCWD: Final = -100
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotBeneath(OSError):
    """The path leaves the directory or goes through a symlink."""


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_state: dict[str, bool] = {}


def components(relative: str) -> list[str]:
    """The path's names, without empty and ``.`` ones; :class:`NotBeneath` for ``..``."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise NotBeneath(errno.EXDEV, "path leaves the directory", relative)
    return parts


def _openat2(dir_fd: int, relative: str, flags: int) -> int | None:
    """The descriptor, or None when the kernel has no ``openat2``."""
    how = _OpenHow(flags | os.O_CLOEXEC, 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
    fd = _syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(relative)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd >= 0:
        return int(fd)
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        return None
    if err in (errno.ELOOP, errno.EXDEV):
        raise NotBeneath(err, "path goes through a symlink or leaves the directory", relative)
    raise OSError(err, os.strerror(err), relative)


def _walk(dir_fd: int, parts: list[str], flags: int) -> int:
    fd = os.dup(dir_fd)
    try:
        for name in parts[:-1]:
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, name):
                    raise NotBeneath(errno.ELOOP, "path goes through a symlink", name) from e
                raise
            os.close(fd)
            fd = child
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, parts[-1]):
                raise NotBeneath(errno.ELOOP, "path is a symlink", parts[-1]) from e
            raise
    finally:
        os.close(fd)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return True  # gone or swapped again: refuse all the same
    return (st.st_mode & 0o170000) == 0o120000


def open_beneath(dir_fd: int, relative: str, flags: int, *, use_openat2: bool = True) -> int:
    """A new descriptor of ``relative`` under the directory ``dir_fd``, opened with
    ``flags`` (``O_CLOEXEC`` added); ``relative`` empty or ``.`` reopens the directory.
    Raises :class:`NotBeneath` when the path leaves the directory or has a symlink in it,
    else the ``OSError`` of the open (``FileNotFoundError``, ...). Blocking."""
    parts = components(relative)
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=dir_fd)
    if use_openat2 and _state.get("openat2", True):
        fd = _openat2(dir_fd, "/".join(parts), flags)
        if fd is not None:
            return fd
        _state["openat2"] = False
    return _walk(dir_fd, parts, flags)


def has_openat2() -> bool:
    """Whether this kernel answers ``openat2`` (asked once)."""
    if "openat2" not in _state:
        fd = _openat2(AT_FDCWD, ".", os.O_PATH)
        _state["openat2"] = fd is not None
        if fd is not None:
            os.close(fd)
    return _state["openat2"]
