"""The cgroup v2 sampler: one pass over the pods' cgroups every housekeeping interval.

Like cAdvisor's housekeeping (the kubelet's 10 s), the agent reads every pod and container
cgroup in one batch (a worker thread, plain reads), keeps that sample and the one before it
(for ``usageNanoCores``), and serves ``/stats/summary``, ``/metrics/resource``,
``/metrics/cadvisor`` and the eviction manager from it. ``pass_seconds`` and
``pass_cpu_seconds`` record what the last pass cost, and ``nodeagent_stats_housekeeping_*`` on
``/metrics`` every pass's (``metrics.py``). On a cgroup v1 host it never samples
(:attr:`enabled` is false) and the summary keeps to CRI stats.

The pods' and containers' ``memory.max`` / ``pids.max`` are kept across passes
(``cgroup.SampleCache``): read again every few passes, and for every cgroup as soon as
``limits_generation()`` moves (the agent wrote a pod cgroup's limits or resized a container).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

from nodeagent.clock import Clock
from nodeagent.log import Logger, get_logger
from nodeagent.stats import metrics
from nodeagent.stats.cgroup import (
    CGROUP_ROOT,
    PROC_PRESSURE,
    CgroupSample,
    SampleCache,
    TreeSample,
    sample_tree,
)

HOUSEKEEPING_INTERVAL: Final = 10.0


def nano_cores(prev: tuple[int, int] | None, cur: tuple[int, int]) -> int | None:
    """Rate between two ``(timestamp ns, cumulative cpu ns)`` samples, in nanocores."""
    if prev is None or cur[0] <= prev[0] or cur[1] < prev[1]:
        return None
    return (cur[1] - prev[1]) * 1_000_000_000 // (cur[0] - prev[0])


class CgroupStats:
    def __init__(
        self,
        *,
        clock: Clock,
        enabled: bool,
        interval: float = HOUSEKEEPING_INTERVAL,
        root: str = CGROUP_ROOT,
        proc_pressure: str = PROC_PRESSURE,
        sampler: Callable[..., TreeSample] = sample_tree,
        limits_generation: Callable[[], int] | None = None,
        log: Logger | None = None,
    ) -> None:
        """``limits_generation``: a count the agent moves whenever it writes cgroup limits;
        without it the pods' limits are read on every pass."""
        self._clock = clock
        self.enabled = enabled
        self._interval = interval
        self._root = root
        self._proc_pressure = proc_pressure
        self._sampler = sampler
        self._limits_generation = limits_generation
        self._limits = SampleCache() if limits_generation is not None else None
        self._generation: int | None = None
        self._log = log or get_logger("stats.cgroup")
        self.latest: TreeSample | None = None
        self.previous: TreeSample | None = None
        self.pass_seconds = 0.0
        self.pass_cpu_seconds = 0.0
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return "stats:cgroups"

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def root(self) -> str:
        return self._root

    async def run(self) -> None:
        if not self.enabled:
            self._log.info("cgroup v1 host: pod stats come from CRI only, no PSI")
            await asyncio.Event().wait()
        while True:
            await self.housekeeping()
            await asyncio.sleep(self._interval)

    async def housekeeping(self) -> TreeSample:
        """Take a sample now (also called by a reader that finds none or a stale one)."""
        async with self._lock:
            mono = self._clock.monotonic()
            ts = int(self._clock.now().timestamp() * 1e9)
            if self._limits is not None and self._limits_generation is not None:
                generation = self._limits_generation()
                if generation != self._generation:
                    self._limits.clear()
                    self._generation = generation
            started = time.perf_counter()
            sample = await asyncio.to_thread(self._timed_sample, mono, ts)
            self.pass_seconds = time.perf_counter() - started
            self.previous, self.latest = self.latest, sample
            metrics.HOUSEKEEPING_DURATION.observe(self.pass_seconds)
            metrics.HOUSEKEEPING_CPU.inc(self.pass_cpu_seconds)
            metrics.HOUSEKEEPING_CGROUPS.set(
                1 + (sample.kubepods is not None) + len(sample.pods) + len(sample.containers)
            )
            return sample

    def _timed_sample(self, mono: float, ts: int) -> TreeSample:
        cpu0 = time.thread_time()
        sample = self._sampler(
            monotonic=mono,
            timestamp_ns=ts,
            root=self._root,
            proc_pressure=self._proc_pressure,
            cache=self._limits,
        )
        self.pass_cpu_seconds = time.thread_time() - cpu0
        return sample

    async def current(self, max_age: float) -> TreeSample | None:
        """The newest sample, refreshed first if older than ``max_age`` seconds."""
        if not self.enabled:
            return None
        latest = self.latest
        if latest is None or self._clock.monotonic() - latest.monotonic > max_age:
            return await self.housekeeping()
        return latest

    def rate(self, kind: str, key: str) -> int | None:
        """``usageNanoCores`` of a container (``kind`` "c"), pod ("p") or the node ("n")
        between the last two samples."""
        cur, prev = self.latest, self.previous
        if cur is None or prev is None:
            return None

        def usage(s: TreeSample) -> int | None:
            if kind == "n":
                cg: CgroupSample | None = s.node
            elif kind == "k":
                cg = s.kubepods
            else:
                cg = (s.containers if kind == "c" else s.pods).get(key)
            return cg.usage_ns if cg is not None else None

        a, b = usage(prev), usage(cur)
        if a is None or b is None:
            return None
        return nano_cores((prev.timestamp_ns, a), (cur.timestamp_ns, b))
