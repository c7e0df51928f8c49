"""Pod CPU and memory from the pod cgroups of a cgroup v1 host, as cAdvisor reads them for the
kubelet.

On cgroup v1 the cgroup sampler (:mod:`.cgroup`) is off, and the pod-level figures of the
Summary API came from the runtime's ``ListPodSandboxStats``. containerd answers that by reading
every pod cgroup's v1 controllers and each sandbox's network namespace: 1.35 s of its time per
call with 100 pods, 6.8 s a minute at one call per housekeeping interval, where everything else
the node asks of it costs 1.1 s (docs/benchmarks.md, 2026-11-28). The kubelet never makes that
call (``PodAndContainerStatsFromCRI`` is off): cAdvisor reads the pod cgroup. So does this, with
the cgroupfs driver and QoS cgroups (the v1 layout the agent makes): ``cpuacct.usage`` and
``memory.{usage_in_bytes,limit_in_bytes,stat}`` of ``<cgroupRoot>/kubepods[/<qos>]/pod<uid>``.

The figures are cAdvisor's v1 ones as the kubelet turns them into the Summary API: the working
set is the usage less ``total_inactive_file``; RSS is ``total_rss``; page faults are the pod
cgroup's own ``pgfault``/``pgmajfault`` (not ``total_*``); ``availableBytes`` only under a
limit (below 2^62 bytes, the kubelet's ``isMemoryUnlimited``).

Blocking (the provider calls :meth:`V1PodCgroups.read` through ``asyncio.to_thread``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nodeagent.cgroups import CGROUP_MOUNT
from nodeagent.kuberuntime.sandbox import KUBEPODS, POD_CGROUP_PREFIX, QOS_DIRS, root_cgroup_name
from nodeagent.stats.cgroup import parse_flat_keyed

UNLIMITED_MEMORY: Final = 1 << 62  # the kubelet's isMemoryUnlimited: above this, no limit
STAT_KEYS: Final = frozenset({"total_inactive_file", "total_rss", "pgfault", "pgmajfault"})


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod cgroup's CPU and memory at one moment."""

    cpu_ns: int  # cumulative CPU time, cpuacct.usage
    memory: dict[str, int]  # the Summary API's memory fields, without "time"


def memory_fields(usage: int, limit: int, stat: str) -> dict[str, int]:
    """The Summary API's pod ``memory`` (no ``time``) from a v1 memory cgroup's files."""
    values = parse_flat_keyed(stat, STAT_KEYS)
    working = max(0, usage - values.get("total_inactive_file", 0))
    out = {
        "usageBytes": usage,
        "workingSetBytes": working,
        "rssBytes": values.get("total_rss", 0),
        "pageFaults": values.get("pgfault", 0),
        "majorPageFaults": values.get("pgmajfault", 0),
    }
    if limit <= UNLIMITED_MEMORY:
        out["availableBytes"] = max(0, limit - working)
    return out


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


class V1PodCgroups:
    """The pod cgroups under ``<mount>/{cpuacct,memory}/<cgroup_root>/kubepods`` (cgroupfs)."""

    def __init__(self, *, cgroup_root: str = "", mount: Path = Path(CGROUP_MOUNT)) -> None:
        parts = root_cgroup_name(cgroup_root)
        self._cpuacct = mount.joinpath("cpuacct", *parts, KUBEPODS)
        self._memory = mount.joinpath("memory", *parts, KUBEPODS)

    def read(self, uids: set[str]) -> dict[str, PodUsage]:
        """Each pod of ``uids`` whose cgroup is found and readable; the others are left out (a
        pod that just went, or a cgroup layout this does not know)."""
        found: dict[str, PodUsage] = {}
        for qos in QOS_DIRS:
            cpu_dir = self._cpuacct / qos if qos else self._cpuacct
            try:
                names = [e.name for e in os.scandir(cpu_dir) if e.is_dir(follow_symlinks=False)]
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                uid = name.removeprefix(POD_CGROUP_PREFIX)
                if not name.startswith(POD_CGROUP_PREFIX) or uid not in uids or uid in found:
                    continue
                memory_dir = (self._memory / qos if qos else self._memory) / name
                try:
                    cpu = _read_int(cpu_dir / name / "cpuacct.usage")
                    memory = memory_fields(
                        _read_int(memory_dir / "memory.usage_in_bytes"),
                        _read_int(memory_dir / "memory.limit_in_bytes"),
                        (memory_dir / "memory.stat").read_text(),
                    )
                except (OSError, ValueError):
                    continue
                found[uid] = PodUsage(cpu_ns=cpu, memory=memory)
        return found
