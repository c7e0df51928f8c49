"""What each pod's volumes, ``etc-hosts`` and pod-level logs hold on the node: the Summary's
``volume`` list and the disk part of its ``ephemeral-storage``.

The kubelet measures a pod's volumes by walking them (``MetricsDu``: the blocks of every file,
hard links once, not crossing into other file systems), an emptyDir on every pass and the
API-filled volumes (configMap, secret, downwardAPI, projected) once (``CachedMetrics``).
:class:`VolumeStats` does the same for the pods the summary lists, in one worker-thread batch,
and keeps the result: a new walk only when the last one is older than the housekeeping
interval, and never more often than five times its own duration (so walking a huge volume
takes at most a fifth of one core). A volume on a file system of its own (a memory-backed
emptyDir is a tmpfs mount) is not local ephemeral storage; a disk emptyDir and a configMap
are (the kubelet's ``IsLocalEphemeralVolume``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from nodeagent.clock import Clock
from nodeagent.stats.node import FsSample, dir_usage, fs_sample
from nodeagent.volumemanager.layout import PLUGIN_DIRS, pod_dir

Json = dict[str, Any]
EMPTY_DIR: Final = PLUGIN_DIRS["emptyDir"]
CONFIG_MAP: Final = PLUGIN_DIRS["configMap"]
CACHED: Final = frozenset(
    PLUGIN_DIRS[s] for s in ("configMap", "secret", "downwardAPI", "projected")
)
ETC_HOSTS: Final = "etc-hosts"
COST_FACTOR: Final = 5.0
PERSISTENT: Final = frozenset({"kubernetes.io~csi", "kubernetes.io~local-volume"})
"""Claimed and CSI volumes: measured by the volume manager (statfs, the CSI driver), never
walked here, and not local ephemeral storage."""


@dataclass(frozen=True, slots=True)
class Usage:
    used: int
    inodes: int


@dataclass(frozen=True, slots=True)
class VolumeUsage:
    name: str
    usage: Usage
    fs: FsSample | None
    ephemeral: bool
    """Counts toward the pod's ephemeral-storage (a disk emptyDir, a configMap)."""


@dataclass(frozen=True, slots=True)
class PodDisk:
    volumes: tuple[VolumeUsage, ...] = ()
    etc_hosts: Usage | None = None
    pod_logs: Usage | None = None
    """The files right in the pod's log directory (not its containers' directories)."""

    @property
    def ephemeral(self) -> Usage:
        parts = [v.usage for v in self.volumes if v.ephemeral]
        parts += [u for u in (self.etc_hosts, self.pod_logs) if u is not None]
        return Usage(sum(u.used for u in parts), sum(u.inodes for u in parts))


def disk_usage(path: str) -> Usage | None:
    """``du`` of ``path``: blocks of it and everything below, each inode once, without
    following symlinks or entering other file systems; None when it is gone."""
    try:
        top = os.lstat(path)
    except OSError:
        return None
    used, inodes = top.st_blocks * 512, 1
    seen: set[int] = set()
    pending = [path] if os.path.isdir(path) and not os.path.islink(path) else []
    while pending:
        try:
            with os.scandir(pending.pop()) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if st.st_dev != top.st_dev:
                        continue
                    if st.st_nlink > 1 and not entry.is_dir(follow_symlinks=False):
                        if st.st_ino in seen:
                            continue
                        seen.add(st.st_ino)
                    used += st.st_blocks * 512
                    inodes += 1
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        except OSError:
            continue
    return Usage(used, inodes)


def _files_usage(directory: str) -> Usage | None:
    """The regular files right in ``directory`` (the kubelet's pod log stats)."""
    used = inodes = 0
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.is_file(follow_symlinks=False):
                    try:
                        used += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
                    inodes += 1
    except OSError:
        return None
    return Usage(used, inodes) if inodes else None


def measure_pod(
    root_dir: str, uid: str, pod_logs: str | None, cache: dict[str, Usage], node_fs: FsSample | None
) -> PodDisk:
    """One pod's volumes (``<rootDir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>``),
    ``etc-hosts`` and pod-level log files. Blocking: run it in a worker thread."""
    base = pod_dir(root_dir, uid)
    volumes: list[VolumeUsage] = []
    try:
        plugins = sorted(os.listdir(base / "volumes"))
    except OSError:
        plugins = []
    for plugin in plugins:
        if plugin in PERSISTENT:
            continue
        plugin_path = base / "volumes" / plugin
        try:
            parent = os.stat(plugin_path).st_dev
            names = sorted(os.listdir(plugin_path))
        except OSError:
            continue
        for name in names:
            path = str(plugin_path / name)
            try:
                own_fs = os.stat(path).st_dev != parent
            except OSError:
                continue
            usage = cache.get(path) if plugin in CACHED else None
            if usage is None:
                usage = disk_usage(path)
                if usage is None:
                    continue
                if plugin in CACHED:
                    cache[path] = usage
            fs = fs_sample(path) if own_fs else node_fs
            ephemeral = (plugin == EMPTY_DIR and not own_fs) or plugin == CONFIG_MAP
            volumes.append(VolumeUsage(name, usage, fs, ephemeral))
    etc_hosts = None
    try:
        st = os.lstat(base / ETC_HOSTS)
        etc_hosts = Usage(st.st_blocks * 512, 1)
    except OSError:
        pass
    logs = _files_usage(pod_logs) if pod_logs is not None else None
    return PodDisk(tuple(volumes), etc_hosts, logs)


class VolumeStats:
    """The pods' :class:`PodDisk`, measured at most once per ``interval`` (see the module)."""

    def __init__(self, *, root_dir: str, clock: Clock, interval: float) -> None:
        self._root_dir = root_dir
        self._clock = clock
        self._interval = interval
        self._cache: dict[str, dict[str, Usage]] = {}
        """Per pod UID, the API-filled volumes' walks, kept while the pod is listed."""
        self._latest: dict[str, PodDisk] = {}
        self._measured_at: float | None = None
        self._next_at = 0.0
        self._lock = asyncio.Lock()
        self.pass_seconds = 0.0

    async def current(
        self, pods: Mapping[str, str | None], node_fs: FsSample | None
    ) -> dict[str, PodDisk]:
        """``pods``: UID -> the pod's log directory. A pod first seen is measured at once."""
        async with self._lock:
            now = self._clock.monotonic()
            new = [uid for uid in pods if uid not in self._latest]
            if now >= self._next_at:
                todo = list(pods)
            elif new:
                todo = new
            else:
                todo = []
            if todo:
                started = time.perf_counter()
                measured = await asyncio.to_thread(self._measure, todo, pods, node_fs)
                self.pass_seconds = time.perf_counter() - started
                if len(todo) == len(pods):
                    self._latest = measured
                    gap = max(self._interval, COST_FACTOR * self.pass_seconds)
                    self._next_at = self._clock.monotonic() + gap
                else:
                    self._latest.update(measured)
            return {uid: self._latest[uid] for uid in pods if uid in self._latest}

    def _measure(
        self, uids: list[str], pods: Mapping[str, str | None], node_fs: FsSample | None
    ) -> dict[str, PodDisk]:
        self._cache = {uid: c for uid, c in self._cache.items() if uid in pods}
        return {
            uid: measure_pod(
                self._root_dir, uid, pods[uid], self._cache.setdefault(uid, {}), node_fs
            )
            for uid in uids
        }


# --- the Summary's JSON -------------------------------------------------------------------


def fs_json(usage: Usage, fs: FsSample | None, *, time: str) -> Json:
    out: Json = {"time": time}
    if fs is not None:
        out.update(
            availableBytes=fs.available,
            capacityBytes=fs.capacity,
            inodesFree=fs.inodes_free,
            inodes=fs.inodes,
        )
    out["usedBytes"], out["inodesUsed"] = usage.used, usage.inodes
    return out


def ephemeral_storage(containers: list[Json], disk: PodDisk | None) -> Usage:
    """``calcEphemeralStorage``: each container's writable layer and, when it has one, its
    logs; the pod's local ephemeral volumes, ``etc-hosts`` and pod-level log files."""
    used = inodes = 0
    for c in containers:
        rootfs = c.get("rootfs")
        if rootfs is None:
            continue
        logs = c.get("logs") or {}
        used += int(rootfs.get("usedBytes", 0)) + int(logs.get("usedBytes", 0))
        inodes += int(rootfs.get("inodesUsed", 0)) + int(logs.get("inodesUsed", 0))
    if disk is not None:
        rest = disk.ephemeral
        used, inodes = used + rest.used, inodes + rest.inodes
    return Usage(used, inodes)


async def add_logs(log_dirs: list[tuple[Json, str]], fs: FsSample | None, *, time: str) -> None:
    """Each container's ``logs``: what its log directory holds, on the node's file system."""
    usages = await asyncio.to_thread(lambda: [dir_usage(d) for _, d in log_dirs])
    for (entry, _), usage in zip(log_dirs, usages, strict=True):
        if usage is not None:
            entry["logs"] = fs_json(Usage(*usage), fs, time=time)
