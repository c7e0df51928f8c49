"""The container manager's decisions, as the kubelet makes them on cgroup v2. Pure functions.

- :func:`shares_to_weight`: ``cpu.shares`` (the CRI and cgroup v1 unit) to cgroup v2
  ``cpu.weight``, the kubelet's ``CpuSharesToCpuWeight`` (1 + (shares - 2) * 9999 / 262142).
- :func:`pod_resource_config`: the pod cgroup's limits (``ResourceConfigForPod``):
  ``cpu.weight`` from the pod's cpu requests, ``cpu.max`` when every container limits cpu,
  ``memory.max`` when every container limits memory, ``pids.max`` from ``podPidsLimit``; a
  BestEffort pod gets the minimal weight and no limits.
- :func:`qos_resource_configs`: ``kubepods`` (node allocatable when ``enforceNodeAllocatable``
  has ``pods``, else capacity), ``kubepods/burstable`` (the sum of the Burstable pods' cpu
  requests as shares) and ``kubepods/besteffort`` (the minimal shares).
- :func:`reserved_limits`: what ``enforceNodeAllocatable`` ``system-reserved`` /
  ``kube-reserved`` write to ``systemReservedCgroup`` / ``kubeReservedCgroup`` (the kubelet's
  ``getCgroupConfig``): ``cpu.weight`` from the reserved cpu as shares, ``memory.max`` the
  reserved memory, ``pids.max`` the reserved pids; what is not reserved is left alone.
- :func:`swap_on_refusal`: ``failSwapOn`` against ``/proc/swaps``, with the kubelet's text.

CPU units (shares, quota) and one container's swap are the runtime manager's, as in the
kubelet: :mod:`nodeagent.kuberuntime.resources`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from nodeagent.gotext import quote
from nodeagent.kuberuntime.resources import (
    MAX_SHARES,
    MIN_SHARES,
    SWAP_MAX_FILE,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
)
from nodeagent.podspec import Container, Pod
from nodeagent.qos import QOSClass, pod_qos_class
from nodeagent.quantity import milli_value, value

MAX_WEIGHT: Final = 10000
SWAP_REFUSAL: Final = (
    "running with swap on is not supported, please disable swap! or set --fail-swap-on flag "
    "to false. /proc/swaps contained: "
)


def shares_to_weight(shares: int) -> int:
    """cgroup v1 ``cpu.shares`` [2, 262144] to v2 ``cpu.weight`` [1, 10000]."""
    if shares == 0:
        return 0
    shares = max(MIN_SHARES, min(MAX_SHARES, shares))
    return 1 + ((shares - 2) * 9999) // 262142


@dataclass(frozen=True, kw_only=True)
class ResourceConfig:
    """What one cgroup gets; None leaves the file at the kernel's default (``max``)."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None  # microseconds per period; None = no quota ("max")
    cpu_period: int | None = None
    memory_max: int | None = None
    pids_max: int | None = None
    memory_min: int | None = None

    @property
    def cpu_weight(self) -> int | None:
        return None if self.cpu_shares is None else shares_to_weight(self.cpu_shares)

    def files(self) -> dict[str, str]:
        """The cgroup v2 interface files and their contents."""
        out: dict[str, str] = {}
        if (weight := self.cpu_weight) is not None:
            out["cpu.weight"] = str(weight)
        if self.cpu_period is not None:
            quota = "max" if self.cpu_quota is None else str(self.cpu_quota)
            out["cpu.max"] = f"{quota} {self.cpu_period}"
        out["memory.max"] = "max" if self.memory_max is None else str(self.memory_max)
        if self.pids_max is not None:
            out["pids.max"] = str(self.pids_max)
        return out


def _is_sidecar(container: Container) -> bool:
    return container.restart_policy == "Always"


def _request(container: Container, name: str) -> str | int | float | None:
    """The request as the apiserver defaults it: the limit when only that is set."""
    res = container.resources
    return res.requests.get(name, res.limits.get(name))


def _effective(pod: Pod, amount: Mapping[str, int]) -> int:
    """``PodRequests``/``PodLimits``: app containers plus sidecars, or the largest init
    container plus the sidecars started before it, whichever is larger; plus overhead."""
    spec = pod.spec
    sidecars = 0
    init_peak = 0
    for c in spec.init_containers:
        if _is_sidecar(c):
            sidecars += amount.get(c.name, 0)
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + amount.get(c.name, 0))
    apps = sum(amount.get(c.name, 0) for c in spec.containers) + sidecars
    return max(apps, init_peak)


def _all_containers(pod: Pod) -> tuple[Container, ...]:
    return (*pod.spec.init_containers, *pod.spec.containers)


def pod_resource_config(
    pod: Pod, *, cpu_period: int = 100_000, cpu_cfs_quota: bool = True, pod_pids_limit: int = -1
) -> ResourceConfig:
    """The pod cgroup's resources (the kubelet's ``ResourceConfigForPod``)."""
    overhead = pod.spec.overhead
    cpu_req: dict[str, int] = {}
    cpu_lim: dict[str, int] = {}
    mem_lim: dict[str, int] = {}
    cpu_declared = mem_declared = True
    for c in _all_containers(pod):
        raw = _request(c, "cpu")
        cpu_req[c.name] = milli_value(raw) if raw is not None else 0
        if "cpu" in c.resources.limits:
            cpu_lim[c.name] = milli_value(c.resources.limits["cpu"])
        else:
            cpu_declared = False
        if "memory" in c.resources.limits:
            mem_lim[c.name] = value(c.resources.limits["memory"])
        else:
            mem_declared = False
    milli_request = _effective(pod, cpu_req) + (
        milli_value(overhead["cpu"]) if "cpu" in overhead else 0
    )
    milli_limit = _effective(pod, cpu_lim) + (
        milli_value(overhead["cpu"]) if "cpu" in overhead else 0
    )
    memory_limit = _effective(pod, mem_lim) + (
        value(overhead["memory"]) if "memory" in overhead else 0
    )
    pids = pod_pids_limit if pod_pids_limit > 0 else None
    qos = pod_qos_class(pod)
    period = cpu_period if cpu_cfs_quota else None
    if qos is QOSClass.GUARANTEED:
        return ResourceConfig(
            cpu_shares=milli_cpu_to_shares(milli_request),
            cpu_quota=milli_cpu_to_quota(milli_limit, cpu_period) if cpu_cfs_quota else None,
            cpu_period=period,
            memory_max=memory_limit,
            pids_max=pids,
        )
    if qos is QOSClass.BURSTABLE:
        quota = None
        if cpu_cfs_quota and cpu_declared and milli_limit > 0:
            quota = milli_cpu_to_quota(milli_limit, cpu_period)
        return ResourceConfig(
            cpu_shares=milli_cpu_to_shares(milli_request),
            cpu_quota=quota,
            cpu_period=period,
            memory_max=memory_limit if mem_declared and memory_limit > 0 else None,
            pids_max=pids,
        )
    return ResourceConfig(cpu_shares=MIN_SHARES, cpu_period=period, pids_max=pids)


def _larger(a: int | None, b: int | None) -> int | None:
    """The looser of two limits, None being no limit."""
    return None if a is None or b is None else max(a, b)


def widen(old: ResourceConfig | None, new: ResourceConfig) -> ResourceConfig:
    """What a pod cgroup holds while a resize is applied: each value at the larger of the
    old and the new, so the pod grows before its containers and shrinks after them (the
    kubelet's ``doPodResizeAction`` order)."""
    if old is None:
        return new
    shares = None
    if old.cpu_shares is not None or new.cpu_shares is not None:
        shares = max(old.cpu_shares or 0, new.cpu_shares or 0)
    return ResourceConfig(
        cpu_shares=shares,
        cpu_quota=_larger(old.cpu_quota, new.cpu_quota),
        cpu_period=new.cpu_period,
        memory_max=_larger(old.memory_max, new.memory_max),
        pids_max=new.pids_max,
        memory_min=new.memory_min,
    )


def pod_memory_request(pod: Pod) -> int:
    """``PodRequests`` memory, in bytes (overhead included)."""
    amount = {}
    for c in _all_containers(pod):
        raw = _request(c, "memory")
        amount[c.name] = value(raw) if raw is not None else 0
    overhead = pod.spec.overhead
    return _effective(pod, amount) + (value(overhead["memory"]) if "memory" in overhead else 0)


def pod_cpu_request_milli(pod: Pod) -> int:
    amount = {}
    for c in _all_containers(pod):
        raw = _request(c, "cpu")
        amount[c.name] = milli_value(raw) if raw is not None else 0
    overhead = pod.spec.overhead
    return _effective(pod, amount) + (milli_value(overhead["cpu"]) if "cpu" in overhead else 0)


@dataclass(frozen=True, kw_only=True)
class NodeResources:
    """Capacity and the reservations, in milli-cpu, bytes and pids."""

    milli_cpu: int
    memory: int
    pids: int | None = None
    reserved_milli_cpu: int = 0
    reserved_memory: int = 0
    reserved_pids: int = 0

    def allocatable(self) -> NodeResources:
        return NodeResources(
            milli_cpu=max(0, self.milli_cpu - self.reserved_milli_cpu),
            memory=max(0, self.memory - self.reserved_memory),
            pids=None if self.pids is None else max(0, self.pids - self.reserved_pids),
        )


def reserved_from(*reservations: Mapping[str, str]) -> dict[str, int]:
    """``kubeReserved`` + ``systemReserved`` as milli-cpu, memory bytes and pids."""
    out = {"cpu": 0, "memory": 0, "pid": 0}
    for r in reservations:
        if "cpu" in r:
            out["cpu"] += milli_value(r["cpu"])
        if "memory" in r:
            out["memory"] += value(r["memory"])
        if "pid" in r:
            out["pid"] += value(r["pid"])
    return out


@dataclass(frozen=True, kw_only=True)
class QosConfigs:
    kubepods: ResourceConfig
    burstable: ResourceConfig
    besteffort: ResourceConfig


def kubepods_config(node: NodeResources, *, enforce_pods: bool) -> ResourceConfig:
    """``kubepods``: the node's allocatable (capacity - kubeReserved - systemReserved, without
    the eviction thresholds, as the kubelet's ``enforceNodeAllocatableCgroups``) when
    ``enforceNodeAllocatable`` has ``pods``, else capacity."""
    base = node.allocatable() if enforce_pods else node
    return ResourceConfig(
        cpu_shares=milli_cpu_to_shares(base.milli_cpu),
        memory_max=base.memory if enforce_pods else None,
        pids_max=base.pids if enforce_pods and node.reserved_pids else None,
    )


@dataclass(frozen=True, slots=True)
class QosShare:
    """What one pod adds to the QoS cgroups' settings: its class, its cpu request (counted
    for Burstable pods) and its memory request (with ``qosReserved`` memory only, else 0)."""

    qos: QOSClass
    cpu_request_milli: int = 0
    memory_request: int = 0


def qos_share(pod: Pod, *, with_memory: bool = False) -> QosShare:
    """``pod``'s :class:`QosShare`; its memory request only ``with_memory`` (``qosReserved``)."""
    qos = pod_qos_class(pod)
    cpu = pod_cpu_request_milli(pod) if qos is QOSClass.BURSTABLE else 0
    memory = (
        pod_memory_request(pod)
        if with_memory and qos in (QOSClass.GUARANTEED, QOSClass.BURSTABLE)
        else 0
    )
    return QosShare(qos=qos, cpu_request_milli=cpu, memory_request=memory)


def _memory_limits(
    shares: Iterable[QosShare], allocatable_memory: int, percent_reserve: int
) -> tuple[int, int] | None:
    if allocatable_memory <= 0:
        return None
    requests = {QOSClass.GUARANTEED: 0, QOSClass.BURSTABLE: 0}
    for share in shares:
        if share.qos in requests:
            requests[share.qos] += share.memory_request
    burstable = allocatable_memory - requests[QOSClass.GUARANTEED] * percent_reserve // 100
    besteffort = burstable - requests[QOSClass.BURSTABLE] * percent_reserve // 100
    return burstable, besteffort


def qos_memory_limits(
    pods: Iterable[Pod], allocatable_memory: int, percent_reserve: int
) -> tuple[int, int] | None:
    """``qosReserved`` memory (the kubelet's ``setMemoryReserve``): Burstable may use what
    the Guaranteed pods' requests leave (``percent_reserve`` of them held back), BestEffort
    what the Burstable pods' requests leave after that. None when allocatable is 0."""
    if allocatable_memory <= 0:
        return None
    shares = [qos_share(p, with_memory=True) for p in pods]
    return _memory_limits(shares, allocatable_memory, percent_reserve)


def qos_configs_from(
    shares: Iterable[QosShare],
    node: NodeResources,
    *,
    enforce_pods: bool,
    memory_reserve_percent: int | None = None,
) -> QosConfigs:
    """The QoS cgroups' settings from the pods' :class:`QosShare` (taken ``with_memory``
    when ``memory_reserve_percent`` is set): the container manager keeps one share per pod
    and recomputes this only when a share changes."""
    shares = list(shares)
    burstable_milli = sum(s.cpu_request_milli for s in shares if s.qos is QOSClass.BURSTABLE)
    limits = None
    if memory_reserve_percent is not None:
        limits = _memory_limits(shares, node.allocatable().memory, memory_reserve_percent)
    return QosConfigs(
        kubepods=kubepods_config(node, enforce_pods=enforce_pods),
        burstable=ResourceConfig(
            cpu_shares=milli_cpu_to_shares(burstable_milli),
            memory_max=limits[0] if limits else None,
        ),
        besteffort=ResourceConfig(cpu_shares=MIN_SHARES, memory_max=limits[1] if limits else None),
    )


def qos_resource_configs(
    pods: Iterable[Pod],
    node: NodeResources,
    *,
    enforce_pods: bool,
    memory_reserve_percent: int | None = None,
) -> QosConfigs:
    """The QoS cgroups' cpu weights (Burstable: the sum of its pods' cpu requests) and, with
    ``qosReserved`` memory, the Burstable and BestEffort memory limits."""
    with_memory = memory_reserve_percent is not None
    return qos_configs_from(
        (qos_share(p, with_memory=with_memory) for p in pods),
        node,
        enforce_pods=enforce_pods,
        memory_reserve_percent=memory_reserve_percent,
    )


# --- system-reserved / kube-reserved ------------------------------------------------------

# level -> (the kubelet's name in its error, in its success event)
RESERVED_LEVELS: Final[Mapping[str, tuple[str, str]]] = {
    "system-reserved": ("System Reserved", "system reserved"),
    "kube-reserved": ("Kube Reserved", "kube reserved"),
}


@dataclass(frozen=True, kw_only=True)
class ReservedCgroup:
    """One ``enforceNodeAllocatable`` level beyond ``pods``: its cgroup as configured
    (``/system.slice``) and the reservation to enforce on it."""

    level: str
    cgroup: str
    reservation: Mapping[str, str]

    @property
    def title(self) -> str:
        return RESERVED_LEVELS[self.level][0]

    @property
    def lower(self) -> str:
        return RESERVED_LEVELS[self.level][1]

    def failure(self, error: str) -> str:
        """The kubelet's ``FailedNodeAllocatableEnforcement`` text (and its start error)."""
        where = quote(self.cgroup)
        return f"Failed to enforce {self.title} Cgroup Limits on {where}: {error}"

    def success(self) -> str:
        return f"Updated limits on {self.lower} cgroup {self.cgroup}"


@dataclass(frozen=True, kw_only=True)
class ReservedLimits:
    cpu_shares: int | None = None
    memory_max: int | None = None
    pids_max: int | None = None

    @property
    def cpu_weight(self) -> int | None:
        return None if self.cpu_shares is None else shares_to_weight(self.cpu_shares)

    def files(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if (weight := self.cpu_weight) is not None:
            out["cpu.weight"] = str(weight)
        if self.memory_max is not None:
            out["memory.max"] = str(self.memory_max)
        if self.pids_max is not None:
            out["pids.max"] = str(self.pids_max)
        return out

    def controllers(self) -> list[str]:
        """The cgroup v2 controllers these files need."""
        files = self.files()
        return [c for c in ("cpu", "memory", "pids") if any(f.startswith(c + ".") for f in files)]


def reserved_limits(reservation: Mapping[str, str]) -> ReservedLimits:
    """The kubelet's ``getCgroupConfig`` for a reservation: memory in bytes, cpu as shares
    (``MilliCPUToShares``), pids; ephemeral-storage has no cgroup file."""
    return ReservedLimits(
        cpu_shares=milli_cpu_to_shares(milli_value(reservation["cpu"]))
        if "cpu" in reservation
        else None,
        memory_max=value(reservation["memory"]) if "memory" in reservation else None,
        pids_max=value(reservation["pid"]) if "pid" in reservation else None,
    )


def reserved_cgroup_name(cgroup: str, driver: str) -> list[str]:
    """The kubelet's ``CgroupName(name)`` for a configured reserved cgroup: systemd parses the
    last slice (``/system.slice`` -> ``[system]``, ``/kube-reserved.slice`` ->
    ``[kube, reserved]``), cgroupfs splits the path."""
    if driver == "systemd":
        base = cgroup.rstrip("/").rsplit("/", 1)[-1].removesuffix(".slice")
        return [p.replace("_", "-") for p in base.split("-")] if base else []
    return [p for p in cgroup.split("/") if p]


def swap_on_refusal(proc_swaps: str) -> str | None:
    """``failSwapOn``: the kubelet's error when ``/proc/swaps`` lists more than its header."""
    lines = proc_swaps.strip().split("\n")
    if len(lines) <= 1:
        return None
    return SWAP_REFUSAL + "[" + " ".join(lines) + "]"


def own_swap_max_path(proc_self_cgroup: str, mount: str = "/sys/fs/cgroup") -> str | None:
    """Where the kubelet looks for the v2 swap controller: ``memory.swap.max`` in its own
    cgroup (the ``0::/path`` line of ``/proc/self/cgroup``); None on a v1-only host."""
    for line in proc_self_cgroup.splitlines():
        if line.startswith("0::"):
            return f"{mount}{line[3:].rstrip('/')}/{SWAP_MAX_FILE}"
    return None
