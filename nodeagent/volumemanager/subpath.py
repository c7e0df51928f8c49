"""``subPath`` / ``subPathExpr`` of a volume mount, as the kubelet's ``makeMounts`` checks them.

The expression is expanded from the container's environment (``$(VAR)``; a missing or empty
variable is an error); the path must be relative and without ``..``; a missing directory is
created component by component without following symlinks, with the volume root's mode; the
path, symlinks resolved, must stay inside the volume. What the user sees follows the kubelet,
which keeps the host's layout out of the message (``failed to prepare subPath for volumeMount
"v" of container "c"``); the detail (``subpath "..." not within volume path "..."``) is logged.

Between that check and the runtime's bind mount a container could swap a directory for a
symlink; so, as the kubelet, the checked path is opened component by component with
``O_NOFOLLOW`` (:func:`open_within`) and that descriptor (``/proc/<pid>/fd/<n>``) is
bind-mounted onto ``<podDir>/volume-subpaths/<volume>/<container>/<index>``, which is what the
runtime mounts. Blocking parts run through ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from nodeagent.kuberuntime.env import ContainerConfigError, expand
from nodeagent.log import Logger


class SubPathEscape(Exception):
    pass


def expand_expr(expr: str, env: Mapping[str, str]) -> str:
    """``subPathExpr`` expanded; every referenced variable must be set and non-empty."""
    missing: set[str] = set()

    def lookup(name: str) -> str | None:
        found = env.get(name)
        if not found:
            missing.add(name)
        return found or ""

    expanded = expand(expr, lookup)
    if missing:
        raise ContainerConfigError(f"missing value for {', '.join(sorted(missing))}")
    return expanded


def check_relative(sub_path: str) -> None:
    if sub_path.startswith("/"):
        raise ContainerConfigError(f"error SubPath `{sub_path}` must not be an absolute path")
    if ".." in sub_path.replace("\\", "/").split("/"):
        raise ContainerConfigError(
            f"unable to provision SubPath `{sub_path}`: must not contain '..'"
        )


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def safe_make_dir(volume: str, sub_path: str) -> None:
    """Create ``volume/sub_path`` without ever following a symlink out of the volume: the
    existing part must resolve inside it, the rest is made with ``mkdirat`` under a
    descriptor opened with ``O_NOFOLLOW``."""
    base = os.path.realpath(volume)
    perm = stat.S_IMODE(os.stat(base).st_mode)
    parts = [p for p in sub_path.split("/") if p and p != "."]
    existing = 0
    while existing < len(parts) and os.path.lexists(os.path.join(base, *parts[: existing + 1])):
        existing += 1
    resolved = os.path.realpath(os.path.join(base, *parts[:existing]))
    if not _within(resolved, base):
        raise SubPathEscape(f"subpath {resolved!r} not within volume path {base!r}")
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open(resolved, flags)
    try:
        for name in parts[existing:]:
            os.mkdir(name, perm, dir_fd=fd)
            child = os.open(name, flags, dir_fd=fd)
            os.close(fd)
            fd = child
            os.chmod(f"/proc/self/fd/{fd}", perm)
    finally:
        os.close(fd)


def resolve(volume: str, sub_path: str) -> str:
    """``volume/sub_path`` with symlinks resolved; raises :class:`SubPathEscape` when that
    leaves the volume."""
    base = os.path.realpath(volume)
    resolved = os.path.realpath(os.path.join(base, sub_path))
    if not _within(resolved, base):
        raise SubPathEscape(
            f"subpath {os.path.join(base, sub_path)!r} not within volume path {base!r}"
        )
    return resolved


def prepare(volume: str, sub_path: str, *, mount_name: str, container: str, log: Logger) -> str:
    """The host path to mount for ``sub_path`` of ``volume``; raises
    :class:`ContainerConfigError` with the kubelet's message."""
    target = os.path.join(volume, sub_path)
    if not os.path.lexists(target):
        try:
            safe_make_dir(volume, sub_path)
        except (OSError, SubPathEscape) as e:
            log.error(
                "Failed to create subPath directory for volumeMount of the container",
                container_name=container,
                volume_mount_name=mount_name,
                error=str(e),
            )
            raise ContainerConfigError(
                f'failed to create subPath directory for volumeMount "{mount_name}" of '
                f'container "{container}"'
            ) from e
    try:
        return resolve(volume, sub_path)
    except (OSError, SubPathEscape) as e:
        log.error(
            "Failed to prepare subPath for volumeMount of the container",
            container_name=container,
            volume_mount_name=mount_name,
            error=str(e),
        )
        raise ContainerConfigError(
            f'failed to prepare subPath for volumeMount "{mount_name}" of container "{container}"'
        ) from e


def open_within(volume: str, resolved: str) -> int:
    """An ``O_PATH`` descriptor of ``resolved`` (inside ``volume``, symlinks already resolved)
    opened one component at a time without following a symlink; raises
    :class:`SubPathEscape` when a component is (now) a symlink."""
    base = os.path.realpath(volume)
    if not _within(resolved, base):
        raise SubPathEscape(f"subpath {resolved!r} not within volume path {base!r}")
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(base, flags | os.O_DIRECTORY)
    try:
        for name in [p for p in resolved[len(base) :].split("/") if p]:
            child = os.open(name, flags, dir_fd=fd)
            os.close(fd)
            fd = child
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise SubPathEscape(f"subpath {resolved!r} changed to a symlink at {name!r}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def bind_target(pod_dir: str, volume: str, container: str, index: int, *, is_dir: bool) -> str:
    """``<podDir>/volume-subpaths/<volume>/<container>/<index>``, created as a directory or
    an empty file to mount over."""
    parent = os.path.join(pod_dir, "volume-subpaths", volume, container)
    os.makedirs(parent, 0o750, exist_ok=True)
    target = os.path.join(parent, str(index))
    if is_dir:
        os.makedirs(target, 0o750, exist_ok=True)
    elif not os.path.lexists(target):
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o640))
    return target


def same_file(path: str, fd: int) -> bool:
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
