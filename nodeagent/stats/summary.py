"""The Summary API (``/stats/summary``, stats/v1alpha1) from CRI stats and the node's sample.

:class:`StatsProvider` takes pod CPU and memory from the pod cgroups (the v2 sampler, or the v1
reader of :mod:`.cgroupv1`), else from CRI's ``ListPodSandboxStats`` (the sum of its containers
when the runtime does not implement it); it asks CRI for ``ListContainerStats`` and the running
containers and sandboxes (start times), and samples the node. ``usageNanoCores`` is the rate
between two samples: the runtime's own when it gives one, else the previous sample kept here
(none on the very first request for a container, as the kubelet); for the node a first request
takes two samples 100 ms apart. The JSON is built by the pure functions of :mod:`.summary_json`.

Disk figures: each container's ``rootfs`` is its writable layer as the runtime measures it
(``ContainerStats.writable_layer``), ``logs`` what its log directory holds; each pod's
``volume`` list and the rest of its ``ephemeral-storage`` (local ephemeral volumes,
``etc-hosts``, pod-level log files) come from :class:`~nodeagent.stats.disk.VolumeStats`
(walked at most once per housekeeping interval, off the event loop), as the kubelet's
``calcEphemeralStorage`` adds them up.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Final

from nodeagent.clock import Clock
from nodeagent.gotext import rfc3339
from nodeagent.kuberuntime import CriError, CriUnimplemented, RuntimeService
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME, POD_NAME, POD_NAMESPACE
from nodeagent.log import get_logger
from nodeagent.stats.cadvisor import Owner
from nodeagent.stats.cadvisor import render as render_cadvisor
from nodeagent.stats.cgroup import TreeSample
from nodeagent.stats.cgroupv1 import V1PodCgroups
from nodeagent.stats.disk import (
    Usage,
    VolumeStats,
    add_logs,
    fs_json,
)
from nodeagent.stats.housekeeping import HOUSEKEEPING_INTERVAL, CgroupStats
from nodeagent.stats.node import NodeSample, fs_sample, read_node_sample
from nodeagent.stats.summary_json import (
    Json,
    PodEntry,
    add_cgroup_node,
    apply_cgroup,
    apply_cri,
    cpu_json,
    from_ns,
    memory_json,
    nano_cores,
    node_json,
    pod_json,
)

FIRST_SAMPLE_GAP: Final = 0.1
MAX_SAMPLE_AGE: Final = 120.0


class StatsProvider:
    def __init__(
        self,
        *,
        runtime: RuntimeService,
        clock: Clock,
        node_name: str,
        sample_node: Callable[[], Awaitable[NodeSample]],
        cgroups: CgroupStats | None = None,
        image_fs: Callable[[], Awaitable[cri.ImageFsInfoResponse]] | None = None,
        max_sample_age: float = 2.0,
        pod_logs_dir: str | None = None,
        volumes: VolumeStats | None = None,
        root_dir: str | None = None,
        persistent_volumes: Callable[[str], Awaitable[list[Json]]] | None = None,
        v1_pods: V1PodCgroups | None = None,
    ) -> None:
        """``cgroups``: the cgroup v2 sampler (pods' and containers' CPU, memory, IO, pids
        and PSI from their cgroups, refreshed when older than ``max_sample_age`` housekeeping
        intervals' worth of seconds); without it, or on cgroup v1, CRI stats only.
        ``volumes``: the pods' volumes, ``etc-hosts`` and pod log files (none without it).
        ``root_dir``: the agent's root dir (whether the images have a file system of their
        own is decided against it). ``persistent_volumes``: the Summary entries (no ``time``)
        of a pod's claimed and CSI volumes, by pod UID (the volume manager measures them).
        ``v1_pods``: on a cgroup v1 host, the pod cgroups (pods' CPU and memory without
        ``ListPodSandboxStats``)."""
        self._v1_pods = v1_pods
        self._persistent = persistent_volumes
        self._persistent_last: dict[str, list[Json]] = {}
        self._cgroups = cgroups
        self._volumes = volumes
        self._root_dir = root_dir
        self._log = get_logger("stats")
        self._pod_logs_dir = pod_logs_dir
        self._image_fs = image_fs
        self._max_sample_age = max_sample_age
        self._runtime = runtime
        self._clock = clock
        self.clock = clock
        self._node_name = node_name
        self._sample_node = sample_node
        self._last: dict[str, tuple[int, int]] = {}
        self._node_last: tuple[float, tuple[int, int]] | None = None

    def _cgroup_rate(self, kind: str, key: str) -> int | None:
        return self._cgroups.rate(kind, key) if self._cgroups is not None else None

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

    async def _add_persistent(
        self, pods: dict[str, PodEntry], sandboxes: dict[str, cri.PodSandbox], now: str
    ) -> None:
        if self._persistent is None:
            return
        last: dict[str, list[Json]] = {}
        for sb_id, pod in pods.items():
            uid = sandboxes[sb_id].metadata.uid
            found = await self._persistent(uid)
            pod.persistent = [{"time": now, **v} for v in found]
            last[uid] = pod.persistent
        self._persistent_last = last

    def persistent_entries(self) -> list[Json]:
        """The claimed and CSI volume entries of the last summary (the volume metrics)."""
        return [v for entries in self._persistent_last.values() for v in entries]

    async def summary(self) -> Json:
        now = rfc3339(self._clock.now())
        sample, cores = await self._node()
        tree: TreeSample | None = None
        if self._cgroups is not None and self._cgroups.enabled:
            tree = await self._cgroups.current(self._max_sample_age)
        sandboxes = {
            s.id: s
            for s in await self._runtime.list_pod_sandbox(
                cri.PodSandboxFilter(state=cri.PodSandboxStateValue(state=cri.SANDBOX_READY))
            )
        }
        running = cri.ContainerFilter(state=cri.ContainerStateValue(state=cri.CONTAINER_RUNNING))
        containers = {c.id: c for c in await self._runtime.list_containers(running)}
        pods: dict[str, PodEntry] = {}
        for sb in sandboxes.values():
            pods[sb.id] = PodEntry(
                ref={
                    "name": sb.metadata.name,
                    "namespace": sb.metadata.namespace,
                    "uid": sb.metadata.uid,
                },
                start=rfc3339(from_ns(sb.created_at)),
                containers=[],
            )
        log_dirs: list[tuple[Json, str]] = []
        listed_stats = await self._container_stats(cgroups=tree is not None)
        for c in containers.values():
            if c.pod_sandbox_id not in pods:
                continue
            stats = listed_stats.get(c.id)
            if stats is None and tree is None:
                continue
            entry: Json = {
                "name": c.labels.get(CONTAINER_NAME) or c.metadata.name,
                "startTime": rfc3339(from_ns(c.created_at)),
            }
            if stats is not None:
                apply_cri(entry, stats, time=now, rate=self._rate(c.id))
            if tree is not None and (cg := tree.containers.get(c.id)) is not None:
                apply_cgroup(entry, cg, cores=self._cgroup_rate("c", c.id), time=now)
            if (
                stats is not None
                and stats.HasField("writable_layer")
                and stats.writable_layer.HasField("used_bytes")
            ):
                entry["rootfs"] = {
                    "time": now,
                    "usedBytes": stats.writable_layer.used_bytes.value,
                    "inodesUsed": stats.writable_layer.inodes_used.value,
                }
            pods[c.pod_sandbox_id].containers.append(entry)
            if (pod_log_dir := self._pod_log_dir(sandboxes[c.pod_sandbox_id].metadata)) is not None:
                log_dirs.append((entry, f"{pod_log_dir}/{entry['name']}"))
        if log_dirs:
            await add_logs(log_dirs, sample.fs, time=now)
        if self._volumes is not None and pods:
            wanted = {
                sb.metadata.uid: self._pod_log_dir(sb.metadata)
                for sb_id, sb in sandboxes.items()
                if sb_id in pods
            }
            disks = await self._volumes.current(wanted, sample.fs)
            for sb_id, pod in pods.items():
                pod.disk = disks.get(sandboxes[sb_id].metadata.uid)
        await self._add_persistent(pods, sandboxes, now)
        await self._pod_cpu_memory(pods, sandboxes, tree, now)
        node = node_json(self._node_name, sample, cores, time=now)
        if sample.max_pid is not None and sample.processes is not None:
            node["rlimit"] = {"time": now, "maxpid": sample.max_pid, "curproc": sample.processes}
        if self._image_fs is not None:
            image_fs = await self._image_fs_json(now)
            if image_fs is not None:
                node["runtime"] = {"imageFs": image_fs}
        if tree is not None:
            add_cgroup_node(node, tree, cgroups=self._cgroups, time=now)
        return {"node": node, "pods": [pod_json(p, now, sample.fs) for p in pods.values()]}

    def _pod_log_dir(self, meta: cri.PodSandboxMetadata) -> str | None:
        if self._pod_logs_dir is None:
            return None
        return f"{self._pod_logs_dir}/{meta.namespace}_{meta.name}_{meta.uid}"

    async def dedicated_image_fs(self) -> bool:
        """Whether the runtime's image file system is not the root dir's (the kubelet's
        ``HasDedicatedImageFs``); false when either is unknown."""
        if self._image_fs is None or self._root_dir is None:
            return False
        info = await self._image_fs()
        if not info.image_filesystems:
            return False
        mountpoint = info.image_filesystems[0].fs_id.mountpoint
        root_dir = self._root_dir
        return await asyncio.to_thread(_other_device, mountpoint, root_dir)

    async def _container_stats(self, *, cgroups: bool) -> dict[str, cri.ContainerStats]:
        try:
            return {s.attributes.id: s for s in await self._runtime.list_container_stats()}
        except CriError as e:
            # containerd fails the whole call when one container's metrics cannot be read (a
            # task that died with its cgroup); with the cgroups sampled the rest still stands
            if not cgroups:
                raise
            self._log.warning("ListContainerStats failed; using the cgroups", error=str(e))
            return {}

    async def _pod_cpu_memory(
        self,
        pods: dict[str, PodEntry],
        sandboxes: dict[str, cri.PodSandbox],
        tree: TreeSample | None,
        now: str,
    ) -> None:
        """Each pod's CPU and memory: its cgroup (v2 sample or v1 files), else the runtime's."""
        if tree is not None:
            for sb_id, pod in pods.items():
                uid = sandboxes[sb_id].metadata.uid
                if (cg := tree.pods.get(uid)) is not None:
                    pod.cgroup = cg
                    pod.cgroup_cores = self._cgroup_rate("p", uid)
        elif self._v1_pods is not None and pods:
            await self._v1_pod_level(pods, sandboxes, now)
        if any(pod.cgroup is None and pod.memory is None for pod in pods.values()):
            # a pod's cgroup figures replace the runtime's: ask for these only when needed
            await self._pod_level(pods, now)

    async def _v1_pod_level(
        self, pods: dict[str, PodEntry], sandboxes: dict[str, cri.PodSandbox], now: str
    ) -> None:
        """Pods' CPU and memory from their v1 cgroups (:mod:`.cgroupv1`), where found."""
        assert self._v1_pods is not None
        uids = {sandboxes[sb_id].metadata.uid: sb_id for sb_id in pods}
        usage = await asyncio.to_thread(self._v1_pods.read, set(uids))
        stamp = int(self._clock.now().timestamp() * 1_000_000_000)
        for uid, found in usage.items():
            sb_id = uids[uid]
            cpu: Json = {"time": now}
            if (cores := self._rate(sb_id)(stamp, found.cpu_ns)) is not None:
                cpu["usageNanoCores"] = cores
            cpu["usageCoreNanoSeconds"] = found.cpu_ns
            pods[sb_id].cpu = cpu
            pods[sb_id].memory = {"time": now, **found.memory}

    async def _pod_level(self, pods: dict[str, PodEntry], now: str) -> None:
        """The runtime's pod-level CPU and memory (``ListPodSandboxStats``), where it has them."""
        try:
            for ps in await self._runtime.list_pod_sandbox_stats():
                pod = pods.get(ps.attributes.id)
                if pod is None or pod.memory is not None or not ps.HasField("linux"):
                    continue
                if ps.linux.HasField("cpu"):
                    pod.cpu = cpu_json(ps.linux.cpu, time=now, rate=self._rate(ps.attributes.id))
                if ps.linux.HasField("memory"):
                    pod.memory = memory_json(ps.linux.memory, time=now)
        except CriUnimplemented:
            pass
        except CriError as e:  # one sandbox whose metrics cannot be read fails the whole call
            self._log.warning(
                "ListPodSandboxStats failed; pods from their containers", error=str(e)
            )

    async def cadvisor(self) -> str:
        """``/metrics/cadvisor`` from the newest cgroup sample (empty on cgroup v1)."""
        if self._cgroups is None or not self._cgroups.enabled:
            return ""
        tree = await self._cgroups.current(self._max_sample_age)
        if tree is None:
            return ""
        pods: dict[str, Owner] = {}
        for sb in await self._runtime.list_pod_sandbox(None):
            meta = sb.metadata
            pods[meta.uid] = Owner(namespace=meta.namespace, pod=meta.name)
        containers: dict[str, Owner] = {}
        for c in await self._runtime.list_containers(None):
            labels = c.labels
            containers[c.id] = Owner(
                namespace=labels.get(POD_NAMESPACE, ""),
                pod=labels.get(POD_NAME, ""),
                container=labels.get(CONTAINER_NAME) or c.metadata.name,
                image=c.image.image or c.image_ref,
                name=c.id,
            )
        stamp = int(self._clock.now().timestamp() * 1000)
        return render_cadvisor(tree, pods=pods, containers=containers, timestamp_ms=stamp)

    async def _image_fs_json(self, now: str) -> Json | None:
        assert self._image_fs is not None
        try:
            info = await self._image_fs()
        except CriError:
            return None
        if not info.image_filesystems:
            return None
        usage = info.image_filesystems[0]
        fs = await asyncio.to_thread(fs_sample, usage.fs_id.mountpoint)
        used = Usage(used=int(usage.used_bytes.value), inodes=int(usage.inodes_used.value))
        out = fs_json(used, fs, time=now)
        return out


def _other_device(a: str, b: str) -> bool:
    try:
        return os.stat(a).st_dev != os.stat(b).st_dev
    except OSError:
        return False


def host_stats_provider(
    *,
    runtime: RuntimeService,
    clock: Clock,
    node_name: str,
    fs_path: str,
    cgroups: CgroupStats | None = None,
    image_fs: Callable[[], Awaitable[cri.ImageFsInfoResponse]] | None = None,
    pod_logs_dir: str | None = None,
    persistent_volumes: Callable[[str], Awaitable[list[Json]]] | None = None,
    v1_pods: V1PodCgroups | None = None,
) -> StatsProvider:
    """A provider over this host's ``/proc``, the file system holding ``fs_path`` (the root
    dir, whose ``pods/`` hold the pods' volumes) and, on cgroup v2, the pods' cgroups through
    ``cgroups``."""

    async def sample() -> NodeSample:
        return await asyncio.to_thread(read_node_sample, fs_path)

    max_age = 2 * cgroups.interval if cgroups is not None else 2.0
    interval = cgroups.interval if cgroups is not None else HOUSEKEEPING_INTERVAL
    return StatsProvider(
        runtime=runtime,
        clock=clock,
        node_name=node_name,
        sample_node=sample,
        cgroups=cgroups,
        image_fs=image_fs,
        max_sample_age=max_age,
        pod_logs_dir=pod_logs_dir,
        volumes=VolumeStats(root_dir=fs_path, clock=clock, interval=interval),
        root_dir=fs_path,
        persistent_volumes=persistent_volumes,
        v1_pods=v1_pods,
    )
