"""The Summary API (``/stats/summary``, stats/v1alpha1) from CRI stats and the node's sample.

:class:`StatsProvider` asks CRI for ``ListPodSandboxStats`` (pod CPU and memory; the sum of its
containers when the runtime does not implement it), ``ListContainerStats`` and the running
containers and sandboxes (start times), and samples the node. ``usageNanoCores`` is the rate
between two samples: the runtime's own when it gives one, else the previous sample kept here
(none on the very first request for a container, as the kubelet); for the node a first request
takes two samples 100 ms apart. The JSON is built by pure functions below.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from nodeagent.clock import Clock
from nodeagent.kuberuntime import CriUnimplemented, RuntimeService
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME
from nodeagent.stats.node import NodeSample, read_node_sample

Json = dict[str, Any]
FIRST_SAMPLE_GAP: Final = 0.1
MAX_SAMPLE_AGE: Final = 120.0


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_ns(ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)


def nano_cores(prev: tuple[int, int] | None, cur: tuple[int, int]) -> int | None:
    """Rate between two ``(timestamp ns, cumulative cpu ns)`` samples, in nanocores."""
    if prev is None or cur[0] <= prev[0] or cur[1] < prev[1]:
        return None
    return (cur[1] - prev[1]) * 1_000_000_000 // (cur[0] - prev[0])


def _value(message: Any, field: str) -> int | None:
    return int(getattr(message, field).value) if message.HasField(field) else None


def cpu_json(
    usage: cri.CpuUsage, *, time: str, rate: Callable[[int, int], int | None]
) -> Json | None:
    total = _value(usage, "usage_core_nano_seconds")
    if total is None:
        return None
    out: Json = {"time": time}
    cores = _value(usage, "usage_nano_cores")
    if cores is None:
        cores = rate(usage.timestamp, total)
    if cores is not None:
        out["usageNanoCores"] = cores
    out["usageCoreNanoSeconds"] = total
    return out


def memory_json(usage: cri.MemoryUsage, *, time: str) -> Json | None:
    working = _value(usage, "working_set_bytes")
    if working is None:
        return None
    out: Json = {"time": time}
    for field, key in (
        ("available_bytes", "availableBytes"),
        ("usage_bytes", "usageBytes"),
        ("working_set_bytes", "workingSetBytes"),
        ("rss_bytes", "rssBytes"),
        ("page_faults", "pageFaults"),
        ("major_page_faults", "majorPageFaults"),
    ):
        v = _value(usage, field)
        if v is not None:
            out[key] = v
    return out


def node_json(node_name: str, sample: NodeSample, cores: int | None, *, time: str) -> Json:
    cpu: Json = {"time": time, "usageCoreNanoSeconds": sample.cpu_ns}
    if cores is not None:
        cpu = {"time": time, "usageNanoCores": cores, "usageCoreNanoSeconds": sample.cpu_ns}
    out: Json = {
        "nodeName": node_name,
        "startTime": rfc3339(dt.datetime.fromtimestamp(sample.boot_time, tz=dt.UTC)),
        "cpu": cpu,
        "memory": {
            "time": time,
            "availableBytes": max(sample.memory_total - sample.working_set, 0),
            "usageBytes": sample.memory_usage,
            "workingSetBytes": sample.working_set,
            "rssBytes": sample.anon,
            "pageFaults": sample.page_faults,
            "majorPageFaults": sample.major_page_faults,
        },
    }
    if sample.fs is not None:
        fs = sample.fs
        out["fs"] = {
            "time": time,
            "availableBytes": fs.available,
            "capacityBytes": fs.capacity,
            "usedBytes": fs.used,
            "inodesFree": fs.inodes_free,
            "inodes": fs.inodes,
            "inodesUsed": fs.inodes - fs.inodes_free,
        }
    return out


@dataclass(slots=True)
class _Pod:
    ref: Json
    start: str
    containers: list[Json]
    cpu: Json | None = None
    memory: Json | None = None


class StatsProvider:
    def __init__(
        self,
        *,
        runtime: RuntimeService,
        clock: Clock,
        node_name: str,
        sample_node: Callable[[], Awaitable[NodeSample]],
    ) -> None:
        self._runtime = runtime
        self._clock = clock
        self.clock = clock
        self._node_name = node_name
        self._sample_node = sample_node
        self._last: dict[str, tuple[int, int]] = {}
        self._node_last: tuple[float, tuple[int, int]] | None = None

    def _rate(self, key: str) -> Callable[[int, int], int | None]:
        def rate(timestamp: int, total: int) -> int | None:
            prev = self._last.get(key)
            self._last[key] = (timestamp, total)
            return nano_cores(prev, (timestamp, total))

        return rate

    async def _node(self) -> tuple[NodeSample, int | None]:
        mono = self._clock.monotonic()
        sample = await self._sample_node()
        now_ns = int(self._clock.now().timestamp() * 1e9)
        last = self._node_last
        if last is None or mono - last[0] > MAX_SAMPLE_AGE:
            await asyncio.sleep(FIRST_SAMPLE_GAP)
            prev = (now_ns, sample.cpu_ns)
            mono = self._clock.monotonic()
            sample = await self._sample_node()
            now_ns = int(self._clock.now().timestamp() * 1e9)
            if now_ns <= prev[0]:  # a frozen clock in tests
                now_ns = prev[0] + int(FIRST_SAMPLE_GAP * 1e9)
        else:
            prev = last[1]
        cur = (now_ns, sample.cpu_ns)
        self._node_last = (mono, cur)
        return sample, nano_cores(prev, cur)

    async def summary(self) -> Json:
        now = rfc3339(self._clock.now())
        sample, cores = await self._node()
        sandboxes = {
            s.id: s
            for s in await self._runtime.list_pod_sandbox(
                cri.PodSandboxFilter(state=cri.PodSandboxStateValue(state=cri.SANDBOX_READY))
            )
        }
        running = cri.ContainerFilter(state=cri.ContainerStateValue(state=cri.CONTAINER_RUNNING))
        containers = {c.id: c for c in await self._runtime.list_containers(running)}
        pods: dict[str, _Pod] = {}
        for sb in sandboxes.values():
            pods[sb.id] = _Pod(
                ref={
                    "name": sb.metadata.name,
                    "namespace": sb.metadata.namespace,
                    "uid": sb.metadata.uid,
                },
                start=rfc3339(from_ns(sb.created_at)),
                containers=[],
            )
        for stats in await self._runtime.list_container_stats():
            c = containers.get(stats.attributes.id)
            if c is None or c.pod_sandbox_id not in pods:
                continue
            entry: Json = {
                "name": c.labels.get(CONTAINER_NAME) or c.metadata.name,
                "startTime": rfc3339(from_ns(c.created_at)),
            }
            if stats.HasField("cpu") and (
                cpu := cpu_json(stats.cpu, time=now, rate=self._rate(c.id))
            ):
                entry["cpu"] = cpu
            if stats.HasField("memory") and (mem := memory_json(stats.memory, time=now)):
                entry["memory"] = mem
            if stats.HasField("writable_layer") and stats.writable_layer.HasField("used_bytes"):
                entry["rootfs"] = {
                    "time": now,
                    "usedBytes": stats.writable_layer.used_bytes.value,
                    "inodesUsed": stats.writable_layer.inodes_used.value,
                }
            pods[c.pod_sandbox_id].containers.append(entry)
        try:
            for ps in await self._runtime.list_pod_sandbox_stats():
                pod = pods.get(ps.attributes.id)
                if pod is None or not ps.HasField("linux"):
                    continue
                if ps.linux.HasField("cpu"):
                    pod.cpu = cpu_json(ps.linux.cpu, time=now, rate=self._rate(ps.attributes.id))
                if ps.linux.HasField("memory"):
                    pod.memory = memory_json(ps.linux.memory, time=now)
        except CriUnimplemented:
            pass
        return {
            "node": node_json(self._node_name, sample, cores, time=now),
            "pods": [_pod_json(p, now) for p in pods.values()],
        }


def _pod_json(pod: _Pod, now: str) -> Json:
    pod.containers.sort(key=lambda c: str(c["name"]))
    out: Json = {"podRef": pod.ref, "startTime": pod.start, "containers": pod.containers}
    cpu = pod.cpu
    if cpu is None and pod.containers and all("cpu" in c for c in pod.containers):
        cpu = {
            "time": now,
            "usageCoreNanoSeconds": sum(c["cpu"]["usageCoreNanoSeconds"] for c in pod.containers),
        }
        if all("usageNanoCores" in c["cpu"] for c in pod.containers):
            cpu["usageNanoCores"] = sum(c["cpu"]["usageNanoCores"] for c in pod.containers)
    memory = pod.memory
    if memory is None and pod.containers and all("memory" in c for c in pod.containers):
        memory = {
            "time": now,
            "workingSetBytes": sum(c["memory"]["workingSetBytes"] for c in pod.containers),
        }
    if cpu is not None:
        out["cpu"] = cpu
    if memory is not None:
        out["memory"] = memory
    return out


def host_stats_provider(
    *, runtime: RuntimeService, clock: Clock, node_name: str, fs_path: str
) -> StatsProvider:
    """A provider over this host's ``/proc`` and the file system holding ``fs_path``."""

    async def sample() -> NodeSample:
        return await asyncio.to_thread(read_node_sample, fs_path)

    return StatsProvider(runtime=runtime, clock=clock, node_name=node_name, sample_node=sample)
