"""The sampler keeps the pods' and containers' ``memory.max`` / ``pids.max`` and their parsed
texts across passes: every pass gives the same samples and /metrics/cadvisor as a
sampler that reads and parses every file, while the limit files are read a sixth of the time
and unchanged texts are not parsed again, counted over a cgroup tree in a temporary
directory."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cgroup_stats import CPU_PSI, IO_PSI, MEM_PSI, write_cgroup

from nodeagent.clock import FrozenClock
from nodeagent.stats import cgroup
from nodeagent.stats.cadvisor import Owner
from nodeagent.stats.cadvisor import render as render_cadvisor
from nodeagent.stats.cgroup import LIMITS_REFRESH_PASSES, SampleCache, TreeSample, sample_tree
from nodeagent.stats.housekeeping import CgroupStats

T0 = dt.datetime(2026, 11, 25, 4, 0, 0, tzinfo=dt.UTC)
PODS = 12
CONTAINERS = 3  # two and the sandbox
LIMIT_FILES = ("memory.max", "pids.max")


def tree(root: Path) -> tuple[list[Path], list[Path]]:
    write_cgroup(root, usage_usec=10**9, current=0, inactive=0, pids=500)
    kubepods = root / "kubepods.slice"
    write_cgroup(kubepods, usage_usec=10**8, current=2**30, inactive=2**28, pids=60)
    pods, containers = [], []
    for i in range(PODS):
        qos = kubepods / "kubepods-burstable.slice"
        pod = qos / f"kubepods-burstable-pod{i:08x}_0000_4000_8000_{i:012x}.slice"
        write_cgroup(pod, usage_usec=5_000_000 + i, current=300 * 2**20, inactive=0, pids=3)
        pods.append(pod)
        for c in range(CONTAINERS):
            ctr = pod / f"cri-containerd-{i * 10 + c:064x}.scope"
            write_cgroup(ctr, usage_usec=4_000_000 + c, current=2**20, inactive=0, pids=2)
            containers.append(ctr)
    pressure = root / "pressure"
    pressure.mkdir()
    for name, text in (("cpu", CPU_PSI), ("memory", MEM_PSI), ("io", IO_PSI)):
        (pressure / name).write_text(text)
    return pods, containers


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Files the sampler reads, by name."""
    counted: Counter[str] = Counter()
    real = cgroup._read

    def read(path: str, dir_fd: int | None = None) -> str | None:
        counted[path.rsplit("/", 1)[-1]] += 1
        return real(path, dir_fd)

    monkeypatch.setattr(cgroup, "_read", read)
    yield counted


def sample(root: Path, limits: SampleCache | None) -> TreeSample:
    return sample_tree(
        monotonic=0.0,
        timestamp_ns=0,
        root=str(root),
        proc_pressure=str(root / "pressure"),
        cache=limits,
    )


def test_every_pass_samples_what_a_full_read_does_with_a_sixth_of_the_limit_reads(
    tmp_path: Path, reads: Counter[str]
) -> None:
    root = tmp_path / "cg"
    pods, containers = tree(root)
    cache = SampleCache()
    cgroups = PODS * (1 + CONTAINERS)
    for n in range(2 + 2 * LIMITS_REFRESH_PASSES):
        if n == 2:  # a new cgroup's limits are kept once two reads agree: all are by now
            assert cache.reads == 2 * cgroups
            cache.reads = 0
            reads.clear()
        (pods[n % PODS] / "cpu.stat").write_text(f"usage_usec {n}\n")  # what moves
        assert sample(root, cache) == sample(root, None), f"pass {n}"
    # each kept cgroup's limits are read again once every LIMITS_REFRESH_PASSES passes
    assert cache.reads == 2 * cgroups
    # (the full sampler's reads: every cgroup each pass, and the root and kubepods always)
    assert reads["memory.max"] == 2 * cgroups + 2 * LIMITS_REFRESH_PASSES * (cgroups + 2 + 2)

    # A limit written by someone other than the agent shows within LIMITS_REFRESH_PASSES.
    (containers[0] / "memory.max").write_text("1048576\n")
    for _ in range(LIMITS_REFRESH_PASSES):
        if sample(root, cache) == sample(root, None):
            break
    else:
        raise AssertionError("a limit written outside the agent never showed")
    # A removed cgroup is forgotten; one created again under the same name is read anew.
    assert sample(root, cache) == sample(root, None)


def figures(sample: TreeSample | None) -> tuple[object, ...]:
    assert sample is not None
    return (sample.node, sample.node_psi, sample.kubepods, sample.pods, sample.containers)


def cadvisor(sample: TreeSample | None) -> str:
    assert sample is not None
    pods = {uid: Owner(namespace="default", pod=f"p-{uid}") for uid in sample.pods}
    containers = {cid: Owner(namespace="default", container=cid[-4:]) for cid in sample.containers}
    return render_cadvisor(sample, pods=pods, containers=containers, timestamp_ms=1)


async def test_a_limit_the_agent_writes_shows_in_the_next_pass(
    tmp_path: Path, reads: Counter[str]
) -> None:
    root = tmp_path / "cg"
    pods, containers = tree(root)
    clock = FrozenClock(T0)
    generation = [0]
    where = {"root": str(root), "proc_pressure": str(root / "pressure")}
    cached = CgroupStats(
        clock=clock, enabled=True, limits_generation=lambda: generation[0], **where
    )
    full = CgroupStats(clock=clock, enabled=True, **where)
    for _ in range(3):
        await cached.housekeeping()
        await full.housekeeping()
        clock.advance(10)
    reads.clear()
    await cached.housekeeping()
    assert reads["memory.max"] < PODS * (1 + CONTAINERS) // 2  # most are kept by now
    await full.housekeeping()
    assert figures(cached.latest) == figures(full.latest)
    # the agent resizes a pod: its cgroup's limits, with the generation moved around the write
    generation[0] += 1
    (pods[1] / "memory.max").write_text(f"{512 * 2**20}\n")
    (containers[4] / "pids.max").write_text("64\n")
    generation[0] += 1
    await cached.housekeeping()
    await full.housekeeping()
    assert figures(cached.latest) == figures(full.latest)
    assert cached.latest is not None
    assert cached.latest.pods["00000001-0000-4000-8000-000000000001"].memory_max == 512 * 2**20
    assert cadvisor(cached.latest) == cadvisor(full.latest)
    assert "container_spec_memory_limit_bytes" in cadvisor(cached.latest)


def test_a_quiet_pass_parses_only_the_texts_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cg"
    pods, _ = tree(root)
    parsed: Counter[str] = Counter()
    for name in ("parse_psi", "parse_flat_keyed", "parse_io_stat"):
        real = getattr(cgroup, name)

        def counting(text: str, *args: object, _real: Any = real, _name: str = name) -> Any:
            parsed[_name] += 1
            return _real(text, *args)

        monkeypatch.setattr(cgroup, name, counting)
    cache = SampleCache()
    sample(root, cache)
    parsed.clear()
    (pods[3] / "cpu.stat").write_text("usage_usec 7\n")
    (pods[3] / "memory.pressure").write_text(CPU_PSI)
    kept = sample(root, cache)
    # only the root's and kubepods' files (always parsed), /proc/pressure, the two that moved
    # and memory.stat (one regex scan each, never memoized)
    assert parsed["parse_psi"] == 2 * 3 + 3 + 1
    assert parsed["parse_io_stat"] == 2
    assert parsed["parse_flat_keyed"] == 2 * 2 + 1 + PODS * (1 + CONTAINERS)
    assert kept == sample(root, None)
