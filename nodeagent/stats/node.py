"""The node's own figures from ``/proc`` and ``statvfs`` (per-cgroup figures and PSI: ``cgroup``).

Parsing is pure (text in, numbers out); :func:`read_node_sample` is the I/O edge, to be run in
``asyncio.to_thread``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

CLK_TCK: Final = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class FsSample:
    capacity: int
    available: int
    used: int
    inodes: int
    inodes_free: int


@dataclass(frozen=True, slots=True)
class NodeSample:
    cpu_ns: int
    """CPU time used by everything on the node (all cores, not idle/iowait), nanoseconds."""
    memory_total: int
    memory_free: int
    inactive_file: int
    anon: int
    page_faults: int
    major_page_faults: int
    fs: FsSample | None
    boot_time: float
    max_pid: int | None = None
    processes: int | None = None

    @property
    def memory_usage(self) -> int:
        return self.memory_total - self.memory_free

    @property
    def working_set(self) -> int:
        """Usage less the inactive page cache, as cAdvisor counts the root cgroup's."""
        return max(self.memory_usage - self.inactive_file, 0)


def cpu_ns_from_stat(text: str, clk_tck: int = CLK_TCK) -> int:
    """Busy CPU time from the ``cpu`` line of ``/proc/stat`` (user, nice, system, irq,
    softirq, steal; not idle nor iowait; guest time is already in user)."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            f = [int(x) for x in line.split()[1:]]
            f += [0] * (8 - len(f))
            busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
            return busy * 1_000_000_000 // clk_tck
    raise ValueError("/proc/stat has no cpu line")


def boot_time_from_stat(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` in bytes."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            out[name] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def memory_available(proc: str = "/proc") -> int | None:
    """``memory.available`` as the summary computes it (MemFree + Inactive(file)), from one
    read of ``/proc/meminfo`` (procfs never blocks; about 20 µs); None when it cannot be
    read. What the eviction manager's memory signal reads between two summaries."""
    try:
        with open(f"{proc}/meminfo") as f:
            mem = meminfo(f.read())
    except OSError:
        return None
    return mem.get("MemFree", 0) + mem.get("Inactive(file)", 0)


def vmstat(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[name] = int(value)
    return out


def fs_sample(path: str) -> FsSample | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return FsSample(
        capacity=st.f_blocks * st.f_frsize,
        available=st.f_bavail * st.f_frsize,
        used=(st.f_blocks - st.f_bfree) * st.f_frsize,
        inodes=st.f_files,
        inodes_free=st.f_ffree,
    )


def node_sample_from(
    stat: str, mem: Mapping[str, int], vm: Mapping[str, int], fs: FsSample | None
) -> NodeSample:
    return NodeSample(
        cpu_ns=cpu_ns_from_stat(stat),
        memory_total=mem.get("MemTotal", 0),
        memory_free=mem.get("MemFree", 0),
        inactive_file=mem.get("Inactive(file)", 0),
        anon=mem.get("AnonPages", 0),
        page_faults=vm.get("pgfault", 0),
        major_page_faults=vm.get("pgmajfault", 0),
        fs=fs,
        boot_time=boot_time_from_stat(stat),
    )


def processes_from_loadavg(text: str) -> int | None:
    """The number of tasks (``/proc/loadavg``'s ``running/total``), what ``sysinfo`` calls
    ``procs`` and the kubelet's ``rlimit.curproc`` counts."""
    fields = text.split()
    if len(fields) >= 4 and "/" in fields[3]:
        total = fields[3].split("/", 1)[1]
        return int(total) if total.isdigit() else None
    return None


def read_node_sample(fs_path: str, proc: str = "/proc") -> NodeSample:
    """Blocking: read ``/proc`` and ``statvfs(fs_path)``."""
    with open(f"{proc}/stat") as f:
        stat = f.read()
    with open(f"{proc}/meminfo") as f:
        mem = meminfo(f.read())
    with open(f"{proc}/vmstat") as f:
        vm = vmstat(f.read())
    sample = node_sample_from(stat, mem, vm, fs_sample(fs_path))
    try:
        with open(f"{proc}/sys/kernel/pid_max") as f:
            max_pid: int | None = int(f.read())
        with open(f"{proc}/loadavg") as f:
            processes = processes_from_loadavg(f.read())
    except (OSError, ValueError):
        max_pid = processes = None
    return dataclasses.replace(sample, max_pid=max_pid, processes=processes)


def dir_usage(path: str) -> tuple[int, int] | None:
    """Bytes and inodes used by the files below ``path`` (a container's log directory, a few
    files: no mount crossing, no symlinks followed); None when it does not exist."""
    used = inodes = 0
    pending = [path]
    found = False
    while pending:
        try:
            with os.scandir(pending.pop()) as it:
                found = True
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    inodes += 1
                    used += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        except OSError:
            continue
    return (used, inodes) if found else None
