"""Stats read straight from cgroup v2 and ``/proc/pressure`` (what cAdvisor gives the kubelet).

Per cgroup: ``cpu.stat`` (usage, user, system, periods, throttled periods and time),
``memory.current`` and ``memory.stat`` (working set = current - ``inactive_file``, RSS = ``anon``,
page faults), ``memory.max``, ``io.stat`` (bytes and operations summed over devices),
``pids.current`` and ``pids.max``, and ``cpu|memory|io.pressure`` (PSI: ``some``/``full`` with
avg10/avg60/avg300 and the cumulative stall ``total`` in microseconds, as the kernel writes it).

The pods' cgroups are found by walking the kubepods tree once per pass, for either cgroup
driver: cgroupfs ``kubepods/burstable/pod<uid>/<container id>`` and systemd
``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
cri-containerd-<id>.scope``. Parsing is pure; :func:`sample_tree` is the blocking edge (plain
``open().read()`` of every file in one batch, run in ``asyncio.to_thread`` once per
housekeeping interval).

``memory.max`` and ``pids.max`` of a pod or container cgroup change only when someone writes
them: the agent (a pod's cgroup, an in-place resize) or the runtime when it creates the cgroup.
With a :class:`SampleCache` a pass reads them for a cgroup until two passes in a row agree,
then reuses them and reads them again every ``refresh`` passes (spread over the passes) and
for every cgroup at once after :meth:`SampleCache.clear` (the agent wrote limits). The root
and kubepods cgroups are always read in full. The cache also keeps each pod and container
cgroup's last ``cpu.stat``, ``io.stat`` and PSI texts with what they parsed to: an idle
container's are the same pass after pass, and the same text is not parsed again.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

CGROUP_ROOT: Final = "/sys/fs/cgroup"
PROC_PRESSURE: Final = "/proc/pressure"
KUBEPODS: Final = ("kubepods", "kubepods.slice")
PSI_RESOURCES: Final = ("cpu", "memory", "io")
READ_SIZE: Final = 65536
PRESSURE_FILES: Final = {r: f"{r}.pressure" for r in PSI_RESOURCES}
_POD_DIR: Final = re.compile(r"(?:^|-)pod([0-9a-fA-F_-]{8,})(?:\.slice)?$")
_CONTAINER_DIR: Final = re.compile(r"^(?:[a-z-]*-)?([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True, slots=True)
class PsiLine:
    avg10: float
    avg60: float
    avg300: float
    total: int


@dataclass(frozen=True, slots=True)
class Psi:
    some: PsiLine
    full: PsiLine


@dataclass(frozen=True, slots=True)
class CgroupSample:
    cpu: Mapping[str, int] = field(default_factory=dict)
    memory_current: int | None = None
    memory_max: int | None = None
    memory: Mapping[str, int] = field(default_factory=dict)
    io: Mapping[str, int] = field(default_factory=dict)
    pids_current: int | None = None
    pids_max: int | None = None
    psi: Mapping[str, Psi] = field(default_factory=dict)

    @property
    def usage_ns(self) -> int | None:
        usec = self.cpu.get("usage_usec")
        return None if usec is None else usec * 1000

    @property
    def working_set(self) -> int | None:
        if self.memory_current is None:
            return None
        return max(self.memory_current - self.memory.get("inactive_file", 0), 0)


#: The ``memory.stat`` keys the Summary and /metrics/cadvisor use (of ~50): keeping only these
#: makes a kept sample of 440 cgroups several MiB smaller.
MEMORY_STAT_KEYS: Final = frozenset(
    {"anon", "file", "inactive_file", "file_mapped", "pgfault", "pgmajfault", "swapcached"}
)
_MEMORY_STAT_LINE: Final = re.compile(
    rf"^({'|'.join(sorted(MEMORY_STAT_KEYS))}) (\d+)$", re.MULTILINE
)
#: The kernel's PSI line (``kernel/sched/psi.c``); anything else falls back to the general parser.
_PSI_LINE: Final = re.compile(
    r"^(some|full) avg10=(\d+\.\d+) avg60=(\d+\.\d+) avg300=(\d+\.\d+) total=(\d+)$", re.MULTILINE
)


def parse_flat_keyed(text: str, keep: frozenset[str] | None = None) -> dict[str, int]:
    """``cpu.stat`` / ``memory.stat``: ``key value`` lines (only ``keep``'s keys if given)."""
    if keep is MEMORY_STAT_KEYS:  # the hot case: 7 of ~50 lines, found by one C-level scan
        return {sys.intern(k): int(v) for k, v in _MEMORY_STAT_LINE.findall(text)}
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if keep is not None and key not in keep:
            continue
        try:
            out[sys.intern(key)] = int(value)
        except ValueError:
            continue
    return out


def parse_io_stat(text: str) -> dict[str, int]:
    """``io.stat``: ``MAJ:MIN rbytes=.. wbytes=.. rios=.. wios=.. ...`` summed over devices."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        for item in line.split()[1:]:
            key, _, value = item.partition("=")
            if value.isdigit():
                out[key] = out.get(key, 0) + int(value)
    return out


def parse_psi(text: str) -> Psi | None:
    """``some avg10=0.00 avg60=0.00 avg300=0.00 total=0`` and the ``full`` line; a file with
    only ``some`` (``cpu.pressure`` on kernels before 5.13) gets a zero ``full``."""
    lines: dict[str, PsiLine] = {
        kind: PsiLine(float(a10), float(a60), float(a300), int(total))
        for kind, a10, a60, a300, total in _PSI_LINE.findall(text)
    }
    if "some" in lines:
        return Psi(some=lines["some"], full=lines.get("full", PsiLine(0.0, 0.0, 0.0, 0)))
    for line in text.splitlines():
        kind, *items = line.split()
        values = dict(item.split("=", 1) for item in items if "=" in item)
        try:
            lines[kind] = PsiLine(
                avg10=float(values["avg10"]),
                avg60=float(values["avg60"]),
                avg300=float(values["avg300"]),
                total=int(values["total"]),
            )
        except (KeyError, ValueError):
            continue
    if "some" not in lines:
        return None
    return Psi(some=lines["some"], full=lines.get("full", PsiLine(0.0, 0.0, 0.0, 0)))


def _max(text: str) -> int | None:
    text = text.strip()
    return None if text == "max" or not text else int(text)


def _read(path: str, dir_fd: int | None = None) -> str | None:
    """The whole file (``path`` relative to ``dir_fd`` when given), or None. ``os.open`` and
    ``os.read`` rather than ``open()``: no buffered text stack per file, which was half of a
    pass's CPU (a pass reads ~10 files per cgroup)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        chunks = [os.read(fd, READ_SIZE)]
        while len(chunks[-1]) == READ_SIZE:  # a larger file (io.stat with many devices)
            chunks.append(os.read(fd, READ_SIZE))
        return b"".join(chunks).decode()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


Limits = tuple[int | None, int | None]
"""A cgroup's ``memory.max`` and ``pids.max`` as a sample holds them (None: ``max`` or none)."""

LIMITS_REFRESH_PASSES: Final = 6
"""How many passes a cgroup's confirmed limits are reused before they are read again."""


@dataclass(slots=True)
class SampleCache:
    """What the sampler keeps of the pod and container cgroups across passes: their
    ``memory.max`` / ``pids.max`` and their last parsed texts (touched only by the sampling
    thread, one pass at a time)."""

    refresh: int = LIMITS_REFRESH_PASSES
    passes: int = 0
    reads: int = 0
    """Cgroups whose limit files were read (what the cache spares is counted in tests)."""
    _seen: dict[str, Limits] = field(default_factory=dict)
    """Read once: kept when the next pass reads the same."""
    _kept: dict[str, tuple[int, Limits]] = field(default_factory=dict)
    """Confirmed: (the pass they expire at, the limits)."""
    parsed: dict[str, dict[str, tuple[str, Any]]] = field(default_factory=dict)
    """Cgroup path -> file -> (its last text, what it parsed to)."""

    def clear(self) -> None:
        """Read every cgroup's limits again (the parse memo stays: it is exact)."""
        self._seen.clear()
        self._kept.clear()

    def get(self, path: str) -> Limits | None:
        kept = self._kept.get(path)
        if kept is None or kept[0] <= self.passes:
            return None
        return kept[1]

    def put(self, path: str, limits: Limits) -> None:
        self.reads += 1
        if self._seen.get(path) == limits or path in self._kept:
            self._seen.pop(path, None)
            # Spread the refreshes over the passes, so a node's pods (created together) are not
            # all read again in the same pass.
            spread = hash(path) % self.refresh if path not in self._kept else 0
            self._kept[path] = (self.passes + self.refresh - spread, limits)
        else:
            self._seen[path] = limits
            self._kept.pop(path, None)

    def end_pass(self, present: set[str]) -> None:
        """Forget the cgroups this pass did not find (removed)."""
        self.passes += 1
        for table in (self._seen, self._kept, self.parsed):
            for path in [p for p in table if p not in present]:
                del table[path]


_T = TypeVar("_T")


def _parse(
    memo: dict[str, tuple[str, Any]] | None, name: str, text: str, parse: Callable[[str], _T]
) -> _T:
    """``parse(text)``, or what the same text of the same file parsed to last pass."""
    if memo is None:
        return parse(text)
    last = memo.get(name)
    if last is not None and last[0] == text:
        return cast(_T, last[1])
    value = parse(text)
    memo[name] = (text, value)
    return value


def read_cgroup(
    path: str,
    limits: Limits | None = None,
    memo: dict[str, tuple[str, Any]] | None = None,
) -> CgroupSample:
    """Blocking: every stat file of one cgroup directory (missing files are left out). The
    files are opened relative to the directory, so the kernel walks the path once, not ten
    times. ``limits``: ``memory.max`` and ``pids.max`` as known already (not read);
    ``memo``: the cgroup's texts parsed last pass (see :func:`_parse`), updated."""
    try:
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return CgroupSample()
    try:
        cpu = _read("cpu.stat", dir_fd)
        mem_cur = _read("memory.current", dir_fd)
        mem_max = _read("memory.max", dir_fd) if limits is None else None
        mem = _read("memory.stat", dir_fd)
        io = _read("io.stat", dir_fd)
        pids = _read("pids.current", dir_fd)
        pids_max = _read("pids.max", dir_fd) if limits is None else None
        psi: dict[str, Psi] = {}
        for resource in PSI_RESOURCES:
            name = PRESSURE_FILES[resource]
            text = _read(name, dir_fd)
            if text is not None and (parsed := _parse(memo, name, text, parse_psi)) is not None:
                psi[resource] = parsed
    finally:
        os.close(dir_fd)
    if limits is None:
        limits = (
            _max(mem_max) if mem_max is not None else None,
            _max(pids_max) if pids_max is not None else None,
        )
    return CgroupSample(
        cpu=_parse(memo, "cpu.stat", cpu, parse_flat_keyed) if cpu is not None else {},
        memory_current=int(mem_cur) if mem_cur and mem_cur.strip().isdigit() else None,
        memory_max=limits[0],
        memory=parse_flat_keyed(mem, MEMORY_STAT_KEYS) if mem is not None else {},
        io=_parse(memo, "io.stat", io, parse_io_stat) if io is not None else {},
        pids_current=int(pids) if pids and pids.strip().isdigit() else None,
        pids_max=limits[1],
        psi=psi,
    )


def _read_kept(path: str, cache: SampleCache | None) -> CgroupSample:
    if cache is None:
        return read_cgroup(path)
    known = cache.get(path)
    memo = cache.parsed.setdefault(path, {})
    sample = read_cgroup(path, known, memo)
    if known is None:
        cache.put(path, (sample.memory_max, sample.pids_max))
    return sample


def read_node_pressure(proc_pressure: str = PROC_PRESSURE) -> dict[str, Psi]:
    out: dict[str, Psi] = {}
    for resource in PSI_RESOURCES:
        text = _read(f"{proc_pressure}/{resource}")
        if text is not None and (parsed := parse_psi(text)) is not None:
            out[resource] = parsed
    return out


def pod_uid_from_dir(name: str) -> str | None:
    """``pod<uid>`` (cgroupfs) or ``kubepods-burstable-pod<uid_>.slice`` (systemd) -> uid."""
    m = _POD_DIR.search(name)
    return m.group(1).replace("_", "-") if m else None


def container_id_from_dir(name: str) -> str | None:
    """``<id>`` (cgroupfs) or ``cri-containerd-<id>.scope`` (systemd) -> the container ID."""
    m = _CONTAINER_DIR.match(name)
    return m.group(1) if m else None


@dataclass(slots=True)
class TreeSample:
    """One housekeeping pass: the node (root cgroup + /proc/pressure), the kubepods cgroup, and
    every pod and container cgroup found below it."""

    monotonic: float
    timestamp_ns: int
    node: CgroupSample
    node_psi: Mapping[str, Psi]
    kubepods: CgroupSample | None = None
    kubepods_path: str = ""
    pods: dict[str, CgroupSample] = field(default_factory=dict)
    pod_paths: dict[str, str] = field(default_factory=dict)
    containers: dict[str, CgroupSample] = field(default_factory=dict)
    container_paths: dict[str, str] = field(default_factory=dict)


def _subdirs(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return [e for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def find_kubepods(root: str = CGROUP_ROOT) -> str | None:
    for name in KUBEPODS:
        path = f"{root}/{name}"
        if os.path.isdir(path):
            return path
    return None


def sample_tree(
    *,
    monotonic: float,
    timestamp_ns: int,
    root: str = CGROUP_ROOT,
    proc_pressure: str = PROC_PRESSURE,
    cache: SampleCache | None = None,
) -> TreeSample:
    """Blocking: read the root cgroup, /proc/pressure, kubepods and every pod and container
    cgroup below it (QoS level directories are walked through, not sampled); the pods' and
    containers' limits and parsed texts through ``cache`` when given."""
    sample = TreeSample(
        monotonic=monotonic,
        timestamp_ns=timestamp_ns,
        node=read_cgroup(root),
        node_psi=read_node_pressure(proc_pressure),
    )
    kubepods = find_kubepods(root)
    if kubepods is None:
        if cache is not None:
            cache.end_pass(set())
        return sample
    sample.kubepods = read_cgroup(kubepods)
    sample.kubepods_path = kubepods
    pending = [kubepods]
    while pending:
        for entry in _subdirs(pending.pop()):
            uid = pod_uid_from_dir(entry.name)
            if uid is None:
                if not entry.name.endswith(".scope"):
                    pending.append(entry.path)  # a QoS level
                continue
            sample.pods[uid] = _read_kept(entry.path, cache)
            sample.pod_paths[uid] = entry.path
            for child in _subdirs(entry.path):
                cid = container_id_from_dir(child.name)
                if cid is not None:
                    sample.containers[cid] = _read_kept(child.path, cache)
                    sample.container_paths[cid] = child.path
    if cache is not None:
        cache.end_pass({*sample.pod_paths.values(), *sample.container_paths.values()})
    return sample


def relative(path: str, root: str = CGROUP_ROOT) -> str:
    """The cgroup's name as cAdvisor writes the ``id`` label: the path below the mount."""
    return path[len(root) :] or "/" if path.startswith(root) else path
