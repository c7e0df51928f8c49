"""The container manager: the kubelet's QoS cgroup hierarchy and pod cgroups on cgroup v2.

At start (and again before the first pod if that failed) it creates ``kubepods`` with node
allocatable enforced on it, ``kubepods/burstable`` and ``kubepods/besteffort`` (systemd
driver: ``kubepods.slice``, ``kubepods-burstable.slice``, ``kubepods-besteffort.slice``)
through the driver the runtime uses. Before a pod's sandbox is created, :meth:`ensure_pod`
updates the Burstable weight (the sum of the Burstable pods' cpu requests) and creates the
pod's cgroup with its limits. A pod's sync repeats this every minute, so what it computes is
kept per pod object: a resync of an unchanged pod recomputes nothing and writes no file,
and the QoS cgroups are recomputed only when a pod's share of them changes (a pod added,
removed or resized), and written only when their values change. :meth:`remove_pod` removes
the pod's cgroup once its containers and sandbox are gone; :meth:`clean_orphans`
(housekeeping) removes pod cgroups no pod owns.

On a cgroup v1 host, or with ``cgroupsPerQOS: false``, it does nothing: the runtime creates
the pod's cgroup as before (the kubelet's v1 maintenance mode is not rebuilt here).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nodeagent.atomicfile import write_atomic
from nodeagent.cm import v1pods
from nodeagent.cm.cgroupfs import CgroupFs
from nodeagent.cm.drivers import CgroupDriverOps, CgroupfsDriver, SystemdDriver
from nodeagent.cm.policy import (
    NodeResources,
    QosConfigs,
    QosShare,
    ReservedCgroup,
    ResourceConfig,
    pod_resource_config,
    qos_configs_from,
    qos_share,
    reserved_cgroup_name,
    reserved_from,
    reserved_limits,
    widen,
)
from nodeagent.config import Config, features
from nodeagent.config.units import parse_reserve_percentage
from nodeagent.errors import AgentError
from nodeagent.events import DiscardEvents, EventSink
from nodeagent.gotext import quote_list
from nodeagent.kuberuntime.podsettings import CgroupDriver, PodRuntimeSettings
from nodeagent.kuberuntime.resources import SwapInputs, container_swap
from nodeagent.kuberuntime.sandbox import (
    KUBEPODS,
    POD_CGROUP_PREFIX,
    pod_cgroup_name,
    root_cgroup_name,
)
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Pod
from nodeagent.qos import pod_qos_class
from nodeagent.systemd.dbus import SystemdBus, UnitBus

SETUP_RETRY: Final = 10.0
ENFORCED_REASON: Final = "NodeAllocatableEnforced"
ENFORCEMENT_FAILED_REASON: Final = "FailedNodeAllocatableEnforcement"
SWAP_STATE_FILE: Final = "swap-state.json"
QOS_TIERS: Final = ("burstable", "besteffort")


@dataclass(frozen=True, kw_only=True)
class CmSettings:
    enabled: bool
    """cgroup v2 and ``cgroupsPerQOS``."""
    cgroup_root: list[str] = field(default_factory=list)
    cgroup_root_text: str = "/"
    node: NodeResources = field(default_factory=lambda: NodeResources(milli_cpu=0, memory=0))
    enforce_pods: bool = True
    pod_pids_limit: int = -1
    cpu_cfs_quota: bool = True
    cpu_period: int = 100_000
    swap: SwapInputs = field(default_factory=SwapInputs)
    swap_state: Path | None = None
    """Where each container's swap decision is written for ``nodeagent swap report``."""
    memory_reserve_percent: int | None = None
    """``qosReserved`` memory with the ``QOSReserved`` gate: Burstable/BestEffort limits."""
    reserved: tuple[ReservedCgroup, ...] = ()
    """``system-reserved`` / ``kube-reserved`` in ``enforceNodeAllocatable``, in that order."""
    v1_pod_cgroups: bool = False
    """cgroup v1 and ``cgroupsPerQOS``: inactive, but the empty pod cgroups the runtime made
    are removed (:mod:`nodeagent.cm.v1pods`)."""


class ReservedEnforcementError(AgentError):
    """A reserved cgroup could not be enforced: the kubelet refuses to start on this."""


def read_pid_max(path: str = "/proc/sys/kernel/pid_max") -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


class ContainerManager:
    def __init__(
        self,
        *,
        settings: CmSettings,
        driver: Callable[[], Awaitable[CgroupDriver]],
        fs: CgroupFs | None = None,
        bus: Callable[[], UnitBus] = SystemdBus,
        events: EventSink | None = None,
        log: Logger | None = None,
    ) -> None:
        self._settings = settings
        self._events: EventSink = events or DiscardEvents()
        self._driver = driver
        self._fs = fs or CgroupFs()
        self._bus = bus
        self._log = log or get_logger("cm")
        self._ops: CgroupDriverOps | None = None
        self._lock = asyncio.Lock()
        self._pods: dict[str, Pod] = {}
        self._seen: dict[str, tuple[Pod, ResourceConfig | None]] = {}
        """Pod uid -> the pod object :meth:`ensure_pod` last finished with and its config."""
        self._shares: dict[str, QosShare] = {}
        self._qos_stale = True
        """A pod's share changed since the QoS cgroups were last written."""
        self._applied: dict[str, ResourceConfig] = {}
        self.limits_written = 0
        """Moves before and after each write of a pod cgroup's limits (for the stats sampler)."""
        self._names: dict[str, list[str]] = {}
        self._burstable: ResourceConfig | None = None
        self._besteffort: ResourceConfig | None = None
        self._swap: dict[str, dict[str, Any]] = {}
        self._swap_lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return "cm"

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    @property
    def driver(self) -> CgroupDriverOps | None:
        return self._ops

    async def run(self) -> None:
        if not self.enabled:
            await asyncio.Event().wait()
        while True:
            try:
                await self.setup()
                break
            except ReservedEnforcementError as e:
                # the kubelet exits here ("Failed to start ContainerManager"): so do we
                self._log.error("Failed to start ContainerManager", err=str(e))
                raise
            except Exception as e:
                self._log.error(
                    "Failed to create the QoS cgroup hierarchy; will retry",
                    error=str(e),
                    retry_in_s=SETUP_RETRY,
                )
                await asyncio.sleep(SETUP_RETRY)
        await asyncio.Event().wait()

    def _qos_name(self, tier: str | None) -> list[str]:
        base = [*self._settings.cgroup_root, KUBEPODS]
        return base if tier is None else [*base, tier]

    async def setup(self) -> CgroupDriverOps:
        """Create the QoS hierarchy once (idempotent); returns the driver in use."""
        async with self._lock:
            if self._ops is not None:
                return self._ops
            driver = await self._driver()
            ops: CgroupDriverOps = (
                SystemdDriver(self._fs, self._bus())
                if driver == "systemd"
                else CgroupfsDriver(self._fs)
            )
            configs = self._qos_configs()
            s = self._settings
            for parts in _ancestors(s.cgroup_root):
                await ops.ensure(parts, None)
            await ops.ensure(self._qos_name(None), configs.kubepods)
            await ops.ensure(self._qos_name("burstable"), configs.burstable)
            await ops.ensure(self._qos_name("besteffort"), configs.besteffort)
            self._burstable = configs.burstable
            self._besteffort = configs.besteffort
            self._qos_stale = False
            self._events.record(
                "Normal", ENFORCED_REASON, "Updated Node Allocatable limit across pods"
            )
            await self._enforce_reserved(ops)
            self._ops = ops
            self._log.info(
                "Created the QoS cgroup hierarchy",
                cgroup_driver=driver,
                kubepods=ops.path(self._qos_name(None)),
                **{f"kubepods_{k}": v for k, v in configs.kubepods.files().items()},
            )
            return ops

    async def _enforce_reserved(self, ops: CgroupDriverOps) -> None:
        """``system-reserved`` / ``kube-reserved``: the reservation written to the existing
        cgroup (the kubelet's ``enforceExistingCgroup``); a missing cgroup, or one without the
        controllers the limits need, is the kubelet's start error."""
        for r in self._settings.reserved:
            name = reserved_cgroup_name(r.cgroup, ops.name)
            path = ops.path(name) if ops.name == "systemd" else "/" + "/".join(name)
            limits = reserved_limits(r.reservation)
            self._log.info(
                f"Enforcing {r.lower} on cgroup", cgroup_name=r.cgroup, limits=limits.files()
            )
            error = await asyncio.to_thread(self._validate, name, path, limits.controllers())
            if error is None:
                try:
                    await ops.update_existing(path, limits)
                except Exception as e:
                    error = str(e)
            if error is not None:
                message = r.failure(error)
                self._events.record("Warning", ENFORCEMENT_FAILED_REASON, message)
                raise ReservedEnforcementError(message)
            self._events.record("Normal", ENFORCED_REASON, r.success())

    def _validate(self, name: list[str], path: str, needed: list[str]) -> str | None:
        """The kubelet's v2 ``Validate``: the cgroup's ``cgroup.controllers`` readable and
        holding what the limits need (of what the root cgroup offers)."""
        file = self._fs.path(path) / "cgroup.controllers"
        try:
            enabled = set(file.read_text().split())
        except OSError as e:
            reason = os.strerror(e.errno or 0).lower()
            where = quote_list(name)
            return f"could not read controllers for cgroup {where}: open {file}: {reason}"
        offered = set((self._fs.read("/", "cgroup.controllers") or "").split())
        missing = sorted(c for c in needed if c in offered and c not in enabled)
        if missing:
            return f"cgroup {quote_list(name)} has some missing controllers: {', '.join(missing)}"
        return None

    def _qos_configs(self) -> QosConfigs:
        s = self._settings
        return qos_configs_from(
            self._shares.values(),
            s.node,
            enforce_pods=s.enforce_pods,
            memory_reserve_percent=s.memory_reserve_percent,
        )

    def _set_share(self, uid: str, share: QosShare | None) -> None:
        old = self._shares.pop(uid, None) if share is None else self._shares.get(uid)
        if share is not None:
            self._shares[uid] = share
        if old != share:
            self._qos_stale = True

    async def _update_qos(self, ops: CgroupDriverOps) -> None:
        """Recompute the QoS cgroups when a pod's share moved; write only what changed."""
        if not self._qos_stale:
            return
        configs = self._qos_configs()
        if configs.burstable != self._burstable:
            await ops.ensure(self._qos_name("burstable"), configs.burstable)
            self._burstable = configs.burstable
        if configs.besteffort != self._besteffort:
            await ops.ensure(self._qos_name("besteffort"), configs.besteffort)
            self._besteffort = configs.besteffort
        self._qos_stale = False

    def pod_config(self, pod: Pod) -> ResourceConfig:
        s = self._settings
        return pod_resource_config(
            pod,
            cpu_period=s.cpu_period,
            cpu_cfs_quota=s.cpu_cfs_quota,
            pod_pids_limit=s.pod_pids_limit,
        )

    def applied(self, uid: str) -> ResourceConfig | None:
        """The limits last written to the pod's cgroup (None: none yet, or cm inactive)."""
        return self._applied.get(uid)

    async def pod_memory_usage(self, uid: str) -> int | None:
        """The pod cgroup's ``memory.current`` (None when unknown: cm inactive, no cgroup)."""
        parts = self._names.get(uid)
        if not self.enabled or self._ops is None or parts is None:
            return None
        text = await asyncio.to_thread(self._fs.read, self._ops.path(parts), "memory.current")
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    async def ensure_pod(self, pod: Pod, *, widen_only: bool = False) -> None:
        """The pod's cgroup exists with its limits (before its sandbox is created).
        ``widen_only``: an in-place resize is about to be applied to the containers: each
        limit goes to the larger of the current and the new one (the new ones are written
        by the call without it, once the containers have been resized)."""
        seen = self._seen.get(pod.uid)
        if seen is not None and seen[0] is pod:  # a resync: nothing it depends on moved
            config = seen[1]
        else:
            await self._record_swap(pod)
            config = None
            if self.enabled:
                config = self.pod_config(pod)
                self._set_share(
                    pod.uid,
                    qos_share(pod, with_memory=self._settings.memory_reserve_percent is not None),
                )
            self._seen[pod.uid] = (pod, config)
        if not self.enabled or config is None:
            return
        ops = await self.setup()
        if widen_only:
            config = widen(self._applied.get(pod.uid), config)
        self._pods[pod.uid] = pod
        await self._update_qos(ops)
        if self._applied.get(pod.uid) == config:
            return
        parts = pod_cgroup_name(
            pod, cgroups_per_qos=True, cgroup_root=self._settings.cgroup_root_text
        )
        self.limits_written += 1
        try:
            await ops.ensure(parts, config)
        finally:
            self.limits_written += 1
        self._applied[pod.uid] = config
        self._names[pod.uid] = parts
        self._log.v(4).info(
            "Pod cgroup applied",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            cgroup=ops.path(parts),
        )

    async def remove_pod(self, uid: str) -> None:
        """Remove the pod's cgroup: its containers and sandbox are gone."""
        self._seen.pop(uid, None)
        if self._swap.pop(uid, None) is not None:
            await self._write_swap_state()
        if not self.enabled or self._ops is None:
            self._set_share(uid, None)
            await self._remove_v1({uid})
            return
        ops = self._ops
        parts = self._names.get(uid) or self._find(ops, uid)
        self._pods.pop(uid, None)
        self._set_share(uid, None)
        self._applied.pop(uid, None)
        await self._update_qos(ops)
        if parts is None:
            return
        if await ops.remove(parts):
            self._log.v(4).info("Pod cgroup removed", pod_uid=uid, cgroup=ops.path(parts))
        self._names.pop(uid, None)

    async def _record_swap(self, pod: Pod) -> None:
        """Each container's ``memory.swap.max`` decision (the same one the container's CRI
        config carries) for ``nodeagent swap report``."""
        if self._settings.swap_state is None:
            return
        containers = {}
        for c in (*pod.spec.init_containers, *pod.spec.containers):
            try:
                decision = container_swap(pod, c, self._settings.swap)
            except (ValueError, ArithmeticError):
                continue
            containers[c.name] = dataclasses.asdict(decision)
        entry = {
            "namespace": pod.namespace,
            "name": pod.name,
            "qos": pod_qos_class(pod).value,
            "containers": containers,
        }
        if self._swap.get(pod.uid) != entry:
            self._swap[pod.uid] = entry
            await self._write_swap_state()

    async def _write_swap_state(self) -> None:
        """One writer at a time, each writing the newest state: pod workers sync in parallel,
        and two threads sharing the temporary file could leave an older state in place."""
        path = self._settings.swap_state
        if path is None:
            return
        async with self._swap_lock:
            text = json.dumps({"pods": self._swap}, sort_keys=True)
            try:
                await asyncio.to_thread(write_atomic, path, text.encode(), mode=0o644)
            except OSError as e:
                self._log.error("Cannot write the swap report state", path=str(path), error=str(e))

    def _pod_cgroups(self, ops: CgroupDriverOps) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for tier in (None, *QOS_TIERS):
            parent = self._qos_name(tier)
            for child in self._fs.children(ops.path(parent)):
                uid = ops.pod_uid(child)
                if uid is not None:
                    found[uid] = [*parent, f"{POD_CGROUP_PREFIX}{uid}"]
        return found

    def _find(self, ops: CgroupDriverOps, uid: str) -> list[str] | None:
        return self._pod_cgroups(ops).get(uid)

    async def clean_orphans(self, keep: Callable[[str], bool]) -> None:
        """Remove the cgroups of pods ``keep`` rejects (the kubelet's
        ``cleanupOrphanedPodCgroups`` at housekeeping)."""
        if not self.enabled or self._ops is None:
            await self._remove_v1(None, keep)
            return
        ops = self._ops
        found = await asyncio.to_thread(self._pod_cgroups, ops)
        for uid, parts in found.items():
            if keep(uid) or uid in self._pods:
                continue
            self._log.info("Removing orphaned pod cgroup", pod_uid=uid, cgroup=ops.path(parts))
            try:
                await ops.remove(parts)
            except Exception as e:
                self._log.error("Failed to remove orphaned pod cgroup", pod_uid=uid, error=str(e))

    async def _remove_v1(
        self, uids: set[str] | None, keep: Callable[[str], bool] = lambda _: False
    ) -> None:
        """On cgroup v1, the empty pod cgroups of `uids` (None: of every pod `keep` rejects)."""
        if not self._settings.v1_pod_cgroups:
            return
        root, mount = self._settings.cgroup_root, self._fs.mount
        if uids is not None:  # where they would be: a missing one is skipped by remove_empty
            wanted = sorted(uids)
            gone = await asyncio.to_thread(
                lambda: [d for uid in wanted for d in v1pods.pod_dirs(uid, root, mount)]
            )
        else:
            found = await asyncio.to_thread(v1pods.pod_cgroups, root, mount)
            gone = [
                d
                for uid, dirs in found.items()
                if not keep(uid) and uid not in self._seen
                for d in dirs
            ]
        if not gone:
            return
        removed, failed = await asyncio.to_thread(v1pods.remove_empty, gone)
        by_uid = Counter(d.name.removeprefix(POD_CGROUP_PREFIX) for d in removed)
        for uid, count in sorted(by_uid.items()):
            self._log.v(4).info("Pod cgroup removed", pod_uid=uid, hierarchies=count)
        for why in failed:
            self._log.v(4).info("Pod cgroup not removed", cgroup=why)


def _ancestors(root: list[str]) -> list[list[str]]:
    return [root[: i + 1] for i in range(len(root))]


def node_resources(
    *, num_cpus: int, memory: int, kube_reserved: dict[str, int], pid_max: int | None = None
) -> NodeResources:
    return NodeResources(
        milli_cpu=num_cpus * 1000,
        memory=memory,
        pids=pid_max,
        reserved_milli_cpu=kube_reserved.get("cpu", 0),
        reserved_memory=kube_reserved.get("memory", 0),
        reserved_pids=kube_reserved.get("pid", 0),
    )


def online_cpus() -> int:
    return len(os.sched_getaffinity(0)) or (os.cpu_count() or 1)


def container_manager(
    config: Config,
    *,
    settings: PodRuntimeSettings,
    driver: Callable[[], Awaitable[CgroupDriver]],
    num_cpus: int | None = None,
    events: EventSink | None = None,
) -> ContainerManager:
    """The container manager for ``config`` on this host (inactive on cgroup v1 or with
    ``cgroupsPerQOS: false``)."""
    k = config.kubelet
    reserved = reserved_from(k.kube_reserved, k.system_reserved)
    cm_settings = CmSettings(
        enabled=settings.cgroup_v2 and k.cgroups_per_qos,
        v1_pod_cgroups=not settings.cgroup_v2 and k.cgroups_per_qos,
        cgroup_root=root_cgroup_name(settings.cgroup_root),
        cgroup_root_text=settings.cgroup_root,
        node=node_resources(
            num_cpus=num_cpus if num_cpus is not None else online_cpus(),
            memory=settings.memory_capacity,
            kube_reserved=reserved,
            pid_max=read_pid_max(),
        ),
        enforce_pods="pods" in k.enforce_node_allocatable,
        pod_pids_limit=k.pod_pids_limit,
        cpu_cfs_quota=settings.cpu_cfs_quota,
        cpu_period=settings.cpu_cfs_quota_period_us,
        swap=settings.swap,
        swap_state=Path(config.node.root_dir) / SWAP_STATE_FILE,
        memory_reserve_percent=memory_reserve_percent(config),
        reserved=reserved_cgroups(config),
    )
    return ContainerManager(settings=cm_settings, driver=driver, events=events)


def memory_reserve_percent(config: Config) -> int | None:
    """``qosReserved: {memory: N%}`` when the ``QOSReserved`` gate is on (validated)."""
    k = config.kubelet
    if not features.effective(k.feature_gates).get("QOSReserved") or "memory" not in (
        k.qos_reserved
    ):
        return None
    return parse_reserve_percentage(k.qos_reserved["memory"])


def reserved_cgroups(config: Config) -> tuple[ReservedCgroup, ...]:
    """The reserved levels ``enforceNodeAllocatable`` lists (validation made sure each has its
    cgroup), system first as the kubelet enforces them."""
    k = config.kubelet
    levels = k.enforce_node_allocatable
    out = []
    if "system-reserved" in levels:
        out.append(
            ReservedCgroup(
                level="system-reserved",
                cgroup=k.system_reserved_cgroup,
                reservation=dict(k.system_reserved),
            )
        )
    if "kube-reserved" in levels:
        out.append(
            ReservedCgroup(
                level="kube-reserved",
                cgroup=k.kube_reserved_cgroup,
                reservation=dict(k.kube_reserved),
            )
        )
    return tuple(out)
