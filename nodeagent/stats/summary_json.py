"""The Summary API's JSON (stats/v1alpha1), built from CRI stats, cgroup samples and the
node's sample by pure functions: field names and units as the kubelet writes them
(``usageNanoCores``, ``workingSetBytes``, ``psi`` with cumulative microseconds, ...). A pod's
cgroup figures replace the runtime's; without either, a pod's CPU and memory are the sum of its
containers'.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodeagent.gotext import rfc3339
from nodeagent.kuberuntime import types as cri
from nodeagent.stats.cgroup import CgroupSample, Psi, TreeSample
from nodeagent.stats.disk import PodDisk, ephemeral_storage, fs_json
from nodeagent.stats.housekeeping import CgroupStats
from nodeagent.stats.node import FsSample, NodeSample

Json = dict[str, Any]


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


def psi_json(psi: Psi) -> Json:
    """The Summary API's ``psi`` (1.36): ``total`` is the kernel's cumulative stall time in
    microseconds, passed through as cAdvisor does."""

    def line(p: Any) -> Json:
        return {"total": p.total, "avg10": p.avg10, "avg60": p.avg60, "avg300": p.avg300}

    return {"full": line(psi.full), "some": line(psi.some)}


def cgroup_cpu_json(cg: CgroupSample, *, time: str, cores: int | None) -> Json | None:
    usage = cg.usage_ns
    if usage is None:
        return None
    out: Json = {"time": time}
    if cores is not None:
        out["usageNanoCores"] = cores
    out["usageCoreNanoSeconds"] = usage
    if (psi := cg.psi.get("cpu")) is not None:
        out["psi"] = psi_json(psi)
    return out


def cgroup_memory_json(cg: CgroupSample, *, time: str) -> Json | None:
    working = cg.working_set
    if working is None or cg.memory_current is None:
        return None
    out: Json = {"time": time}
    if cg.memory_max is not None:
        out["availableBytes"] = max(cg.memory_max - working, 0)
    out["usageBytes"] = cg.memory_current
    out["workingSetBytes"] = working
    out["rssBytes"] = cg.memory.get("anon", 0)
    out["pageFaults"] = cg.memory.get("pgfault", 0)
    out["majorPageFaults"] = cg.memory.get("pgmajfault", 0)
    if (psi := cg.psi.get("memory")) is not None:
        out["psi"] = psi_json(psi)
    return out


def cgroup_io_json(cg: CgroupSample | None, psi: Psi | None, *, time: str) -> Json | None:
    if psi is None:
        return None
    return {"time": time, "psi": psi_json(psi)}


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
class PodEntry:
    """A pod's part of the summary while it is collected."""

    ref: Json
    start: str
    containers: list[Json]
    cpu: Json | None = None
    memory: Json | None = None
    cgroup: CgroupSample | None = None
    cgroup_cores: int | None = None
    disk: PodDisk | None = None
    persistent: list[Json] = dataclasses.field(default_factory=list)
    """Summary entries of the pod's claimed and CSI volumes (the volume manager's)."""


def pod_json(pod: PodEntry, now: str, node_fs: FsSample | None = None) -> Json:
    pod.containers.sort(key=lambda c: str(c["name"]))
    out: Json = {"podRef": pod.ref, "startTime": pod.start, "containers": pod.containers}
    volumes = [
        {**fs_json(v.usage, v.fs, time=now), "name": v.name}
        for v in (pod.disk.volumes if pod.disk is not None else ())
    ]
    if volumes or pod.persistent:
        out["volume"] = [*volumes, *pod.persistent]
    out["ephemeral-storage"] = fs_json(
        ephemeral_storage(pod.containers, pod.disk), node_fs, time=now
    )
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
    if pod.cgroup is not None:
        apply_cgroup(out, pod.cgroup, cores=pod.cgroup_cores, time=now)
        return out
    if cpu is not None:
        out["cpu"] = cpu
    if memory is not None:
        out["memory"] = memory
    return out


def apply_cri(
    entry: Json, stats: cri.ContainerStats, *, time: str, rate: Callable[[int, int], int | None]
) -> None:
    if stats.HasField("cpu") and (cpu := cpu_json(stats.cpu, time=time, rate=rate)):
        entry["cpu"] = cpu
    if stats.HasField("memory") and (mem := memory_json(stats.memory, time=time)):
        entry["memory"] = mem


def apply_cgroup(entry: Json, cg: CgroupSample, *, cores: int | None, time: str) -> None:
    """A pod's or container's figures from its cgroup (over CRI's where both exist)."""
    if (cpu := cgroup_cpu_json(cg, time=time, cores=cores)) is not None:
        entry["cpu"] = cpu
    if (mem := cgroup_memory_json(cg, time=time)) is not None:
        entry["memory"] = mem
    if (io := cgroup_io_json(cg, cg.psi.get("io"), time=time)) is not None:
        entry["io"] = io
    if cg.pids_current is not None and "containers" in entry:
        entry["process_stats"] = {"process_count": cg.pids_current}


def add_cgroup_node(
    node: Json, tree: TreeSample, *, cgroups: CgroupStats | None, time: str
) -> None:
    """The node's PSI from ``/proc/pressure`` and the ``pods`` system container."""
    if "cpu" in node and (psi := tree.node_psi.get("cpu")) is not None:
        node["cpu"]["psi"] = psi_json(psi)
    if "memory" in node and (psi := tree.node_psi.get("memory")) is not None:
        node["memory"]["psi"] = psi_json(psi)
    if (io := cgroup_io_json(None, tree.node_psi.get("io"), time=time)) is not None:
        node["io"] = io
    if tree.kubepods is not None:
        pods: Json = {"name": "pods", "startTime": node.get("startTime", time)}
        cores = cgroups.rate("k", "") if cgroups is not None else None
        if (cpu := cgroup_cpu_json(tree.kubepods, time=time, cores=cores)) is not None:
            pods["cpu"] = cpu
        if (mem := cgroup_memory_json(tree.kubepods, time=time)) is not None:
            pods["memory"] = mem
        kubepods_io = tree.kubepods.psi.get("io")
        if (io := cgroup_io_json(tree.kubepods, kubepods_io, time=time)) is not None:
            pods["io"] = io
        node["systemContainers"] = [pods]
