"""Pod cgroups on a cgroup v1 host, where the container manager is otherwise inactive.

The sandbox of every pod still names its pod cgroup as parent (``<cgroupRoot>/kubepods/<qos>/
pod<uid>``, cgroupfs driver), and runc creates that directory in each v1 hierarchy (cpu,
memory, pids, ...). Removing the last container removes only the container's own leaf, so the
empty ``pod<uid>`` directories stay behind, one set per pod ever run: the kubelet's pod
container manager ``Destroy``s them on every subsystem. This removes them too, when the pod is
gone and at housekeeping for pods no one owns. Only empty directories go (``rmdir`` fails with
``EBUSY`` on a cgroup that still has a task or a child), so a pod that is still running keeps
its cgroup whatever is asked.

Blocking (the manager calls these through ``asyncio.to_thread``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from nodeagent.cgroups import CGROUP_MOUNT
from nodeagent.kuberuntime.sandbox import POD_CGROUP_PREFIX, QOS_DIRS


def pod_uid(name: str) -> str | None:
    """The pod UID of a ``pod<uid>`` directory name (cgroupfs driver), None otherwise."""
    if name.startswith(POD_CGROUP_PREFIX) and len(name) > len(POD_CGROUP_PREFIX):
        return name.removeprefix(POD_CGROUP_PREFIX)
    return None


def hierarchies(mount: Path = Path(CGROUP_MOUNT)) -> list[Path]:
    """Each v1 hierarchy under ``mount`` once (``cpu`` and ``cpuacct`` are often links to one
    ``cpu,cpuacct`` mount); the v2 ``unified`` one of a hybrid host too, where runc also
    makes the pod's directory."""
    out, seen = [], set()
    try:
        entries = sorted(os.scandir(mount), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    for entry in entries:
        real = os.path.realpath(entry.path)
        if real in seen or not os.path.isdir(real):
            continue
        seen.add(real)
        out.append(Path(entry.path))
    return out


def pod_cgroups(cgroup_root: list[str], mount: Path = Path(CGROUP_MOUNT)) -> dict[str, list[Path]]:
    """Pod UID -> its ``pod<uid>`` directories, in every hierarchy."""
    found: dict[str, list[Path]] = {}
    for hierarchy in hierarchies(mount):
        kubepods = hierarchy.joinpath(*cgroup_root, "kubepods")
        for qos in QOS_DIRS:
            parent = kubepods / qos if qos else kubepods
            try:
                names = [e.name for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in sorted(names):
                uid = pod_uid(name)
                if uid is not None:
                    found.setdefault(uid, []).append(parent / name)
    return found


def pod_dirs(uid: str, cgroup_root: list[str], mount: Path = Path(CGROUP_MOUNT)) -> list[Path]:
    """Where the ``pod<uid>`` directories of one pod would be, in every hierarchy and QoS
    tier (found or not): removing one pod's needs no listing of everyone's."""
    name = f"{POD_CGROUP_PREFIX}{uid}"
    out = []
    for hierarchy in hierarchies(mount):
        kubepods = hierarchy.joinpath(*cgroup_root, "kubepods")
        out += [(kubepods / qos if qos else kubepods) / name for qos in QOS_DIRS]
    return out


def remove_empty(directories: list[Path]) -> tuple[list[Path], list[str]]:
    """``rmdir`` each; the ones removed, and why the others were not (a missing one is
    neither: something else removed it)."""
    removed, failed = [], []
    for directory in directories:
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            continue
        except OSError as e:
            why = "in use" if e.errno in (errno.EBUSY, errno.ENOTEMPTY) else e.strerror
            failed.append(f"{directory}: {why}")
            continue
        removed.append(directory)
    return removed, failed
