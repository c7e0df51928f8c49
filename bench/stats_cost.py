"""What one housekeeping pass of the cgroup v2 stats costs with 110 pods.

The agent reads every pod and container cgroup once per ``housekeepingInterval`` (10 s) in one
batch (``nodeagent.stats.cgroup.sample_tree``: plain ``open().read()`` of cpu.stat,
memory.current/max/stat, io.stat, pids.current/max and the three PSI files per cgroup). This
script measures that pass: CPU seconds per pass (the sampling thread's ``thread_time``), wall
time, files read, and the process's RSS before and after holding the samples.

By default it builds a synthetic cgroup v2 tree (``--pods`` pods, ``--containers`` containers
each, systemd layout, file contents as a 6.1 kernel writes them) in a temporary directory, so it
runs on the cgroup v1 CI host too (a tmpfs read costs about what a cgroupfs read does: both are
in-memory; cgroupfs renders stat files on each read, so the real tree is somewhat slower). With
``--real`` on a cgroup v2 host it samples ``/sys/fs/cgroup`` as it is (run it in the VM).

    .venv/bin/python bench/stats_cost.py [--pods 110] [--containers 2] [--passes 50] [--real]
        [--keep-limits]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nodeagent.stats.cgroup import SampleCache, sample_tree

CPU_STAT = (
    "usage_usec 123456789\nuser_usec 100000000\nsystem_usec 23456789\nnr_periods 12345\n"
    "nr_throttled 234\nthrottled_usec 3456789\nnr_bursts 0\nburst_usec 0\n"
)
MEMORY_STAT_KEYS = [
    "anon",
    "file",
    "kernel",
    "kernel_stack",
    "pagetables",
    "sec_pagetables",
    "percpu",
    "sock",
    "vmalloc",
    "shmem",
    "zswap",
    "zswapped",
    "file_mapped",
    "file_dirty",
    "file_writeback",
    "swapcached",
    "anon_thp",
    "file_thp",
    "shmem_thp",
    "inactive_anon",
    "active_anon",
    "inactive_file",
    "active_file",
    "unevictable",
    "slab_reclaimable",
    "slab_unreclaimable",
    "slab",
    "workingset_refault_anon",
    "workingset_refault_file",
    "workingset_activate_anon",
    "workingset_activate_file",
    "workingset_restore_anon",
    "workingset_restore_file",
    "workingset_nodereclaim",
    "pgscan",
    "pgsteal",
    "pgscan_kswapd",
    "pgscan_direct",
    "pgsteal_kswapd",
    "pgsteal_direct",
    "pgfault",
    "pgmajfault",
    "pgrefill",
    "pgactivate",
    "pgdeactivate",
    "pglazyfree",
    "pglazyfreed",
    "thp_fault_alloc",
    "thp_collapse_alloc",
]
PSI = (
    "some avg10=0.12 avg60=0.34 avg300=0.56 total=1234567\n"
    "full avg10=0.01 avg60=0.02 avg300=0.03 total=123456\n"
)


def write_cgroup(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    files = {
        "cpu.stat": CPU_STAT,
        "memory.current": "52428800\n",
        "memory.max": "268435456\n",
        "memory.stat": "".join(f"{k} {i * 4096}\n" for i, k in enumerate(MEMORY_STAT_KEYS)),
        "io.stat": "8:0 rbytes=1048576 wbytes=2097152 rios=12 wios=34 dbytes=0 dios=0\n",
        "pids.current": "3\n",
        "pids.max": "max\n",
        "cpu.pressure": PSI,
        "memory.pressure": PSI,
        "io.pressure": PSI,
    }
    for name, text in files.items():
        (path / name).write_text(text)


def synthetic_tree(root: Path, pods: int, containers: int) -> None:
    write_cgroup(root)
    kubepods = root / "kubepods.slice"
    write_cgroup(kubepods)
    for qos in ("kubepods-burstable.slice", "kubepods-besteffort.slice"):
        write_cgroup(kubepods / qos)
    for i in range(pods):
        uid = f"{i:08x}_0000_4000_8000_{i:012x}"
        qos = "burstable" if i % 2 else "besteffort"
        pod = kubepods / f"kubepods-{qos}.slice" / f"kubepods-{qos}-pod{uid}.slice"
        write_cgroup(pod)
        for c in range(containers + 1):  # + the sandbox (pause) container
            write_cgroup(pod / f"cri-containerd-{(i * 10 + c):064x}.scope")
    pressure = root / "pressure"
    pressure.mkdir()
    for name in ("cpu", "memory", "io"):
        (pressure / name).write_text(PSI)


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def measure(
    root: str, proc_pressure: str, passes: int, *, keep_limits: bool = False
) -> dict[str, float]:
    rss_before = rss_kib()
    cpu, wall = [], []
    kept = []
    limits = SampleCache() if keep_limits else None
    for _ in range(passes):
        w0, c0 = time.perf_counter(), time.thread_time()
        tree = sample_tree(
            monotonic=0.0,
            timestamp_ns=0,
            root=root,
            proc_pressure=proc_pressure,
            cache=limits,
        )
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
        kept = [tree, *kept[:1]]  # the agent keeps the newest sample and the one before
    tree = kept[0]
    return {
        "pods": len(tree.pods),
        "containers": len(tree.containers),
        "cgroups": 2 + len(tree.pods) + len(tree.containers),
        "cpu_ms_median": statistics.median(cpu) * 1000,
        "cpu_ms_p90": sorted(cpu)[int(0.9 * (len(cpu) - 1))] * 1000,
        "wall_ms_median": statistics.median(wall) * 1000,
        "rss_kib_before": rss_before,
        "rss_kib_after": rss_kib(),
        "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--containers", type=int, default=2)
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--real", action="store_true", help="sample /sys/fs/cgroup (v2 only)")
    parser.add_argument(
        "--keep-limits",
        action="store_true",
        help="keep memory.max/pids.max across passes as the agent does",
    )
    args = parser.parse_args(argv)
    keep = args.keep_limits
    if args.real:
        result = measure("/sys/fs/cgroup", "/proc/pressure", args.passes, keep_limits=keep)
        where = "/sys/fs/cgroup"
    else:
        with tempfile.TemporaryDirectory(prefix="stats-cost-") as tmp:
            root = Path(tmp)
            synthetic_tree(root / "cg", args.pods, args.containers)
            result = measure(
                str(root / "cg"), str(root / "cg" / "pressure"), args.passes, keep_limits=keep
            )
        where = f"synthetic tree ({args.pods} pods x {args.containers} containers + sandbox)"
    kept_note = ", limits kept across passes" if keep else ""
    print(f"# {where}, {args.passes} passes{kept_note}")
    for key, value in result.items():
        print(f"{key:>16}: {value:.2f}" if isinstance(value, float) else f"{key:>16}: {value}")
    per_10s = result["cpu_ms_median"] / 10_000 * 100
    print(f"{'cpu_per_10s':>16}: {per_10s:.3f} % of one core at a 10 s housekeeping interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
