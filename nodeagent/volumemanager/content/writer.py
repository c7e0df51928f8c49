"""The kubelet's atomic writer (``pkg/volume/util/atomic_writer.go``), for the volumes whose
content the agent writes (configMap, secret, downwardAPI, projected).

A payload (``{relative path: FileProjection}``) is written into a new hidden directory
``..<UTC timestamp>.<random>`` inside the target; a ``..data_tmp`` symlink to it is renamed over
``..data`` (one ``rename``, so a reader sees the old set of files or the new one, never a mix);
the user-visible top-level names are symlinks ``name -> ..data/name``; user-visible names the
new payload no longer has are removed, then the previous timestamped directory. When every file
already holds its payload bytes and mode and nothing is to be removed, nothing is written.

Paths are validated first, with the kubelet's messages: not empty, relative, no ``..``
element, not starting with ``..`` (names starting with ``..`` are the writer's own), at most 4096
characters, each element at most 255.

:func:`write_payload` is blocking (call it through ``asyncio.to_thread``);
:func:`validate_payload` is pure.
"""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import re
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DATA_DIR: Final = "..data"
NEW_DATA_DIR: Final = "..data_tmp"
MAX_PATH_LENGTH: Final = 4096
MAX_FILE_NAME_LENGTH: Final = 255
FS_GROUP_FILE_BITS: Final = 0o440
FS_GROUP_DIR_BITS: Final = 0o550 | stat.S_ISGID
_TS_DIR: Final = re.compile(r"\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.[^/]+")


@dataclass(frozen=True, slots=True)
class FileProjection:
    data: bytes
    mode: int


Payload = Mapping[str, FileProjection]


class InvalidPath(ValueError):
    """A payload path the writer refuses; ``str()`` is the kubelet's message."""


def validate_path(path: str) -> None:
    if path == "":
        raise InvalidPath(f'invalid path: must not be empty: "{path}"')
    if path.startswith("/"):
        raise InvalidPath(f"invalid path: must be relative path: {path}")
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidPath(
            f"invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters"
        )
    items = path.split("/")
    for item in items:
        if item == "..":
            raise InvalidPath(f"invalid path: must not contain '..': {path}")
        if len(item) > MAX_FILE_NAME_LENGTH:
            raise InvalidPath(
                "invalid path: filenames must be less than or equal to "
                f"{MAX_FILE_NAME_LENGTH} characters"
            )
    if items[0].startswith("..") and len(items[0]) > 2:
        raise InvalidPath(f"invalid path: must not start with '..': {path}")


def validate_payload(payload: Payload) -> dict[str, FileProjection]:
    """The payload with its paths cleaned (``a//b/./c`` -> ``a/b/c``); raises
    :class:`InvalidPath` for the first path the kubelet would refuse."""
    clean: dict[str, FileProjection] = {}
    for path, projection in payload.items():
        validate_path(path)
        clean[posixpath.normpath(path)] = projection
    return clean


def _tree(root: Path) -> set[str]:
    """Every path (files and directories) below ``root``, relative to it."""
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for name in (*dirnames, *filenames):
            found.add(name if rel == "." else f"{rel}/{name}")
    return found


def _wanted(payload: Mapping[str, FileProjection]) -> set[str]:
    """The payload's paths and all their parent directories."""
    wanted: set[str] = set()
    for rel in payload:
        path = rel
        while path:
            wanted.add(path)
            path = posixpath.dirname(path)
    return wanted


def file_mode(mode: int, fs_group: int | None) -> int:
    """A file's mode on disk: with an ``fsGroup`` the group may read it (the kubelet's
    ``SetVolumeOwnership`` for a read-only volume)."""
    return mode | FS_GROUP_FILE_BITS if fs_group is not None else mode


def _holds(path: Path, projection: FileProjection, fs_group: int | None) -> bool:
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode):
            return False
        if stat.S_IMODE(st.st_mode) != file_mode(projection.mode, fs_group):
            return False
        if fs_group is not None and st.st_gid != fs_group:
            return False
        return path.read_bytes() == projection.data
    except OSError:
        return False


def _new_timestamp_dir(target: Path, now: dt.datetime) -> Path:
    prefix = now.astimezone(dt.UTC).strftime("..%Y_%m_%d_%H_%M_%S.")
    ts_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=target))
    ts_dir.chmod(0o755)  # group and other must be able to traverse, whatever the umask
    return ts_dir


def _own_dir(path: Path, fs_group: int | None) -> None:
    if fs_group is None:
        return
    os.chown(path, -1, fs_group, follow_symlinks=False)
    path.chmod(stat.S_IMODE(path.lstat().st_mode) | FS_GROUP_DIR_BITS)


def _write_files(payload: Mapping[str, FileProjection], ts_dir: Path, fs_group: int | None) -> None:
    _own_dir(ts_dir, fs_group)
    for rel, projection in payload.items():
        path = ts_dir / rel
        for parent in reversed(path.relative_to(ts_dir).parents[:-1]):
            if not (ts_dir / parent).is_dir():
                (ts_dir / parent).mkdir(mode=0o755)
                (ts_dir / parent).chmod(0o755)
                _own_dir(ts_dir / parent, fs_group)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(projection.data)
            while view:
                view = view[os.write(fd, view) :]
            if fs_group is not None:
                os.fchown(fd, -1, fs_group)
            # the mode asked for, not mode & ~umask
            os.fchmod(fd, file_mode(projection.mode, fs_group))
        finally:
            os.close(fd)


def write_payload(
    target: Path, payload: Payload, *, now: dt.datetime, fs_group: int | None = None
) -> bool:
    """Project ``payload`` into the existing directory ``target``; True when anything on disk
    changed. With ``fs_group`` (the pod's ``securityContext.fsGroup``) everything written is
    owned by that group, files group-readable, directories group-traversable and setgid, as
    the kubelet's ownership change of these read-only volumes. Raises :class:`InvalidPath`
    (nothing written) or ``OSError``."""
    clean = validate_payload(payload)
    data_link = target / DATA_DIR
    try:
        old_ts_name = os.readlink(data_link)
    except FileNotFoundError:
        old_ts_name = ""
    if not _TS_DIR.fullmatch(old_ts_name):  # only ever a directory of ours beside the link
        old_ts_name = ""
    old_ts = target / old_ts_name if old_ts_name else None

    to_remove: set[str] = set()
    if old_ts is not None:
        to_remove = _tree(old_ts) - _wanted(clean) if old_ts.is_dir() else set()
        unchanged = all(_holds(old_ts / rel, p, fs_group) for rel, p in clean.items())
        if unchanged and not to_remove and _visible_links_present(target, clean):
            return False

    ts_dir = _new_timestamp_dir(target, now)
    try:
        _write_files(clean, ts_dir, fs_group)
        _own_dir(target, fs_group)
        _create_visible_links(target, clean, fs_group)
        new_link = target / NEW_DATA_DIR
        if new_link.is_symlink():
            new_link.unlink()
        os.symlink(ts_dir.name, new_link)
        os.rename(new_link, data_link)
    except BaseException:
        (target / NEW_DATA_DIR).unlink(missing_ok=True)
        shutil.rmtree(ts_dir, ignore_errors=True)
        raise
    for rel in to_remove:
        # only the top-level names are the user-visible symlinks (never a directory of others)
        if "/" not in rel and (target / rel).is_symlink():
            (target / rel).unlink(missing_ok=True)
    if old_ts is not None and old_ts.name != ts_dir.name:
        shutil.rmtree(old_ts, ignore_errors=True)
    for name in os.listdir(target):  # left by a writer killed between its steps
        if name != ts_dir.name and _TS_DIR.fullmatch(name):
            shutil.rmtree(target / name, ignore_errors=True)
    return True


def _top_names(payload: Mapping[str, FileProjection]) -> set[str]:
    return {rel.split("/", 1)[0] for rel in payload}


def _visible_links_present(target: Path, payload: Mapping[str, FileProjection]) -> bool:
    return all(os.path.lexists(target / name) for name in _top_names(payload))


def _create_visible_links(
    target: Path, payload: Mapping[str, FileProjection], fs_group: int | None
) -> None:
    for name in _top_names(payload):
        link = target / name
        if not os.path.lexists(link):
            os.symlink(f"{DATA_DIR}/{name}", link)
            if fs_group is not None:
                os.chown(link, -1, fs_group, follow_symlinks=False)
