"""The eviction manager's decisions, pure (the kubelet's ``eviction/helpers.go``).

Observations come from the Summary API's JSON (``/stats/summary``), as the kubelet's come from
its summary provider: ``memory.available`` is the node's ``availableBytes`` (capacity less the
root cgroup's working set), ``allocatableMemory.available`` the same for the pods' cgroup,
``nodefs.*`` the node's ``fs``, ``imagefs.*`` ``runtime.imageFs``, ``pid.available`` the
``rlimit``. A threshold is met while the available amount is below its value (plus its
minimum reclaim once it has been met); a condition stays for the transition period after its
last threshold cleared; a soft threshold acts only once met for its grace period.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodeagent.eviction.thresholds import (
    ALLOCATABLE_MEMORY_AVAILABLE,
    IMAGEFS_AVAILABLE,
    IMAGEFS_INODES_FREE,
    MEMORY_AVAILABLE,
    NODEFS_AVAILABLE,
    NODEFS_INODES_FREE,
    PID_AVAILABLE,
    Threshold,
)
from nodeagent.lifecycle.admission import pod_requests
from nodeagent.podspec import Pod
from nodeagent.qos import QOSClass, pod_qos_class
from nodeagent.quantity import value as quantity_value

Json = Mapping[str, Any]
REASON: Final = "Evicted"
THRESHOLD_MET_REASON: Final = "EvictionThresholdMet"
DISRUPTION_TARGET: Final = "DisruptionTarget"
TERMINATION_BY_KUBELET: Final = "TerminationByKubelet"
IMMEDIATE_GRACE_PERIOD: Final = 1
SYSTEM_CRITICAL_PRIORITY: Final = 2_000_000_000
CONDITION_ORDER: Final = ("MemoryPressure", "DiskPressure", "PIDPressure")


@dataclass(frozen=True, slots=True)
class Observation:
    available: int
    capacity: int
    time: str = ""


Observations = Mapping[str, Observation]


def _int(obj: Json | None, key: str) -> int | None:
    if not obj:
        return None
    v = obj.get(key)
    return int(v) if isinstance(v, int | float) else None


def observe(summary: Json, *, allocatable_memory: int | None = None) -> dict[str, Observation]:
    """Signal observations from a ``/stats/summary`` document (``makeSignalObservations``)."""
    out: dict[str, Observation] = {}
    node = summary.get("node") or {}
    mem = node.get("memory") or {}
    available, working = _int(mem, "availableBytes"), _int(mem, "workingSetBytes")
    if available is not None and working is not None:
        out[MEMORY_AVAILABLE] = Observation(available, available + working, mem.get("time", ""))
    if allocatable_memory is not None:
        pods_working = next(
            (
                _int(c.get("memory"), "workingSetBytes")
                for c in node.get("systemContainers") or ()
                if c.get("name") == "pods"
            ),
            None,
        )
        if pods_working is not None:
            out[ALLOCATABLE_MEMORY_AVAILABLE] = Observation(
                max(allocatable_memory - pods_working, 0), allocatable_memory
            )
    fs = node.get("fs") or {}
    for signal, avail_key, cap_key, src in (
        (NODEFS_AVAILABLE, "availableBytes", "capacityBytes", fs),
        (NODEFS_INODES_FREE, "inodesFree", "inodes", fs),
        (IMAGEFS_AVAILABLE, "availableBytes", "capacityBytes", None),
        (IMAGEFS_INODES_FREE, "inodesFree", "inodes", None),
    ):
        obj = src if src is not None else ((node.get("runtime") or {}).get("imageFs") or {})
        a, c = _int(obj, avail_key), _int(obj, cap_key)
        if a is not None and c is not None:
            out[signal] = Observation(a, c, obj.get("time", ""))
    rlimit = node.get("rlimit") or {}
    maxpid, curproc = _int(rlimit, "maxpid"), _int(rlimit, "curproc")
    if maxpid is not None and curproc is not None:
        out[PID_AVAILABLE] = Observation(max(maxpid - curproc, 0), maxpid, rlimit.get("time", ""))
    return out


def threshold_amount(t: Threshold, obs: Observation) -> int:
    return t.value.amount(obs.capacity)


def thresholds_met(
    thresholds: Iterable[Threshold], observations: Observations, *, enforce_min_reclaim: bool
) -> list[Threshold]:
    """Thresholds whose signal is below the threshold (+ min reclaim when enforced)."""
    met = []
    for t in thresholds:
        obs = observations.get(t.signal)
        if obs is None:
            continue
        amount = threshold_amount(t, obs)
        if enforce_min_reclaim:
            amount += t.min_reclaim.amount(obs.capacity)
        if obs.available < amount:
            met.append(t)
    return met


def merge(a: Iterable[Threshold], b: Iterable[Threshold]) -> list[Threshold]:
    out = list(a)
    out += [t for t in b if t not in out]
    return out


def first_observed(
    met: Iterable[Threshold], previous: Mapping[Threshold, float], now: float
) -> dict[Threshold, float]:
    return {t: previous.get(t, now) for t in met}


def grace_period_met(first: Mapping[Threshold, float], now: float) -> list[Threshold]:
    return [t for t, since in first.items() if now - since >= t.grace_period]


def conditions_last_observed(
    met: Iterable[Threshold], previous: Mapping[str, float], now: float
) -> dict[str, float]:
    out = dict(previous)
    for t in met:
        out[t.condition] = now
    return out


def conditions_in_window(
    last_observed: Mapping[str, float], transition_period: float, now: float
) -> list[str]:
    """Conditions observed within the transition period, in the kubelet's order."""
    on = {c for c, at in last_observed.items() if now - at < transition_period}
    return [c for c in CONDITION_ORDER if c in on]


def by_eviction_priority(thresholds: Sequence[Threshold]) -> list[Threshold]:
    """Memory first (``byEvictionPriority``), then the others in their given order."""
    return sorted(thresholds, key=lambda t: 0 if t.resource == "memory" else 1)


# --- pods ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodUsage:
    memory: int = 0
    disk: int = 0
    inodes: int = 0
    processes: int = 0
    containers: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """container name -> resource -> usage (memory, ephemeral-storage)."""


def pod_usage(summary: Json) -> dict[str, PodUsage]:
    """Per pod UID: what the ranking and the message need, from the Summary's ``pods``."""
    out: dict[str, PodUsage] = {}
    for p in summary.get("pods") or ():
        uid = (p.get("podRef") or {}).get("uid", "")
        containers: dict[str, dict[str, int]] = {}
        disk = inodes = 0
        for c in p.get("containers") or ():
            used: dict[str, int] = {}
            if (m := _int(c.get("memory"), "workingSetBytes")) is not None:
                used["memory"] = m
            rootfs, logs = c.get("rootfs") or {}, c.get("logs") or {}
            storage = (_int(rootfs, "usedBytes") or 0) + (_int(logs, "usedBytes") or 0)
            inodes += (_int(rootfs, "inodesUsed") or 0) + (_int(logs, "inodesUsed") or 0)
            used["ephemeral-storage"] = storage
            disk += storage
            containers[str(c.get("name", ""))] = used
        eph = _int(p.get("ephemeral-storage"), "usedBytes")
        memory = _int(p.get("memory"), "workingSetBytes")
        if memory is None:
            memory = sum(u.get("memory", 0) for u in containers.values())
        out[uid] = PodUsage(
            memory=memory,
            disk=eph if eph is not None else disk,
            inodes=_int(p.get("ephemeral-storage"), "inodesUsed") or inodes,
            processes=_int(p.get("process_stats"), "process_count") or 0,
            containers=containers,
        )
    return out


def _request(pod: Pod, resource: str) -> int:
    """The kubelet's ``GetResourceRequestQuantity``: the pod's requests as the scheduler
    counts them (containers and sidecars summed, at least each init container's need),
    plus the overhead when that is not zero."""
    total = pod_requests(pod)[resource]
    raw = pod.spec.overhead.get(resource)
    overhead = quantity_value(raw) if raw is not None else 0
    return total if total - overhead else 0


def priority(pod: Pod) -> int:
    return pod.spec.priority or 0


def is_critical(pod: Pod) -> bool:
    """The kubelet's ``IsCriticalPod``: static, mirror, or system-critical priority."""
    return pod.is_static or pod.is_mirror or priority(pod) >= SYSTEM_CRITICAL_PRIORITY


def rank(pods: Sequence[Pod], usage: Mapping[str, PodUsage], resource: str) -> list[Pod]:
    """Pods in eviction order for ``resource`` (``rankMemoryPressure``, ``rankDiskPressure``,
    ``rankPIDPressure``): those using more than they request first (not for pids), then lower
    priority, then the larger usage above request. A pod without stats ranks first. ``pods``
    carry their allocated resources (the kubelet's ``getAllocatedPods``): a resize the node
    has not accepted does not change what a pod is ranked by."""

    def used(pod: Pod) -> int | None:
        u = usage.get(pod.uid)
        if u is None:
            return None
        return {
            "memory": u.memory,
            "ephemeral-storage": u.disk,
            "inodes": u.inodes,
            "pids": u.processes,
        }[resource]

    def key(pod: Pod) -> tuple[int, int, int]:
        u = used(pod)
        if u is None:
            return (0, priority(pod), 0)
        if resource == "pids":
            return (1, priority(pod), -u)
        request = _request(pod, resource) if resource != "inodes" else 0
        exceeds = u > request
        return (0 if exceeds else 1, priority(pod), -(u - request))

    return sorted(pods, key=key)


def format_quantity(n: int) -> str:
    """A byte count as Go's BinarySI ``Quantity.String()``: the largest exact binary unit."""
    if n == 0:
        return "0"
    for exp, suffix in ((6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        unit = 1024**exp
        if n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def eviction_message(
    resource: str,
    pod: Pod,
    usage: Mapping[str, PodUsage],
    thresholds: Sequence[Threshold],
    observations: Observations,
) -> str:
    """``evictionMessage``: the node's shortage, then each container above its request (the
    allocated request: ``pod`` as the allocation manager has it)."""
    message = f"The node was low on resource: {resource}. "
    for t in thresholds:
        if t.resource != resource:
            continue
        obs = observations.get(t.signal)
        if obs is None:
            continue
        quantity = t.value.text if t.value.quantity is not None else None
        shown = quantity or format_quantity(threshold_amount(t, obs))
        if resource in {"pids", "inodes"}:
            shown = str(threshold_amount(t, obs))
            available = str(obs.available)
        else:
            available = format_quantity(obs.available)
        message += f"Threshold quantity: {shown}, available: {available}. "
        break
    u = usage.get(pod.uid)
    if u is None or resource not in ("memory", "ephemeral-storage"):
        return message
    for c in pod.spec.containers:
        used = u.containers.get(c.name, {}).get(resource)
        if used is None:
            continue
        raw = c.resources.requests.get(resource)
        request = quantity_value(raw) if raw is not None else 0
        if used > request:
            message += (
                f"Container {c.name} was using {format_quantity(used)}, request is "
                f"{raw if raw is not None else '0'}, has larger consumption of {resource}. "
            )
    return message


def disruption_condition(message: str, now: str, generation: int = 0) -> dict[str, Any]:
    """The ``DisruptionTarget`` of an evicted pod, observing the pod's ``generation``."""
    condition: dict[str, Any] = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": TERMINATION_BY_KUBELET,
        "message": message,
        "lastTransitionTime": now,
    }
    if generation:
        condition["observedGeneration"] = generation
    return condition


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    message: str


def _tolerates_memory_pressure(pod: Pod) -> bool:
    for t in pod.spec.tolerations:
        effect = t.get("effect", "")
        if effect and effect != "NoSchedule":
            continue
        key, op = t.get("key", ""), t.get("operator", "Equal")
        if op == "Exists" and (not key or key == "node.kubernetes.io/memory-pressure"):
            return True
        if key == "node.kubernetes.io/memory-pressure" and op == "Equal" and not t.get("value"):
            return True
    return False


def admit(pod: Pod, conditions: Sequence[str]) -> Refusal | None:
    """The eviction manager's admission: under memory pressure only, BestEffort pods (that do
    not tolerate the memory-pressure taint) are refused; under any other pressure every pod;
    critical pods always pass."""
    if not conditions or is_critical(pod):
        return None
    only_memory = list(conditions) == ["MemoryPressure"]
    if only_memory and (
        pod_qos_class(pod) is not QOSClass.BEST_EFFORT or _tolerates_memory_pressure(pod)
    ):
        return None
    return Refusal(REASON, f"The node had condition: [{' '.join(conditions)}]. ")
