"""Local ephemeral storage isolation, pure (the kubelet's ``localStorageEviction``).

With ``localStorageCapacityIsolation`` (the kubelet's default) every eviction pass compares
what each active pod uses on the node's disk, from the Summary API, with what its spec allows,
whatever the node's pressure, and before any node-pressure ranking. A pod is evicted for the
first of, in the kubelet's order:

1. an ``emptyDir`` whose ``usedBytes`` exceeds its ``sizeLimit`` ("Usage of EmptyDir volume
   "x" exceeds the limit "1Mi". ");
2. the pod's ``ephemeral-storage.usedBytes`` (containers' writable layers and logs, local
   ephemeral volumes, ``etc-hosts``, pod-level logs) exceeding the pod's limit: the
   containers' ``limits.ephemeral-storage`` aggregated as ``resourcehelper.PodLimits`` does
   (containers and sidecars summed, at least each init container's, plus a non-zero
   overhead; ephemeral-storage is not a pod-level resource) ("Pod ephemeral local storage
   usage exceeds the total limit of containers 2Mi. ");
3. a container whose logs (and writable layer, unless the images have a file system of their
   own) exceed its own limit ("Container app exceeded its local ephemeral storage limit
   "1Mi". ").

Quantities are shown as ``Quantity.String()`` shows them (the format the first quantity was
written in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodeagent.podspec import Container, Pod
from nodeagent.quantity import canonical, parse_quantity, quantity_format

EPHEMERAL_STORAGE: Final = "ephemeral-storage"
EMPTY_DIR_MESSAGE: Final = 'Usage of EmptyDir volume "{volume}" exceeds the limit "{limit}". '
POD_MESSAGE: Final = (
    "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
)
CONTAINER_MESSAGE: Final = (
    'Container {container} exceeded its local ephemeral storage limit "{limit}". '
)

Json = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ContainerStorage:
    rootfs: int = 0
    logs: int = 0


@dataclass(frozen=True, slots=True)
class PodStorage:
    """A pod's disk usage as the Summary reports it."""

    containers: Mapping[str, ContainerStorage] = field(default_factory=dict)
    volumes: Mapping[str, int] = field(default_factory=dict)
    total: int = 0


def _used(obj: Any) -> int | None:
    if not isinstance(obj, Mapping):
        return None
    v = obj.get("usedBytes")
    return int(v) if isinstance(v, int | float) else None


def storage_usage(summary: Json) -> dict[str, PodStorage]:
    """Per pod UID, from the Summary's ``pods``: each container's ``rootfs`` and ``logs``,
    each volume's ``usedBytes`` and the pod's ``ephemeral-storage``."""
    out: dict[str, PodStorage] = {}
    for p in summary.get("pods") or ():
        uid = str((p.get("podRef") or {}).get("uid", ""))
        containers = {
            str(c.get("name", "")): ContainerStorage(
                rootfs=_used(c.get("rootfs")) or 0, logs=_used(c.get("logs")) or 0
            )
            for c in p.get("containers") or ()
        }
        volumes = {
            str(v.get("name", "")): used
            for v in p.get("volume") or ()
            if (used := _used(v)) is not None
        }
        out[uid] = PodStorage(containers, volumes, _used(p.get(EPHEMERAL_STORAGE)) or 0)
    return out


@dataclass(frozen=True, slots=True)
class Limit:
    amount: int
    fmt: str

    def __str__(self) -> str:
        return canonical(self.amount, self.fmt)


def _limit(raw: str | int | float) -> Limit:
    return Limit(int(parse_quantity(raw)), quantity_format(raw))


def _container_limit(c: Container) -> Limit | None:
    raw = c.resources.limits.get(EPHEMERAL_STORAGE)
    return _limit(raw) if raw is not None else None


def _add(a: Limit | None, b: Limit | None) -> Limit | None:
    if a is None or b is None:
        return a or b
    return Limit(a.amount + b.amount, a.fmt)


def pod_limit(pod: Pod) -> Limit | None:
    """The pod's ephemeral-storage limit (``PodLimits``), None when no container has one."""
    total: Limit | None = None
    for c in pod.spec.containers:
        total = _add(total, _container_limit(c))
    sidecars: Limit | None = None
    init_peak: Limit | None = None
    for c in pod.spec.init_containers:
        own = _container_limit(c)
        if c.restart_policy == "Always":
            total = _add(total, own)
            sidecars = _add(sidecars, own)
            need = sidecars
        else:
            need = _add(own, sidecars)
        if need is not None and (init_peak is None or need.amount > init_peak.amount):
            init_peak = need
    if init_peak is not None and (total is None or init_peak.amount > total.amount):
        total = init_peak
    overhead = pod.spec.overhead.get(EPHEMERAL_STORAGE)
    if total is not None and total.amount != 0 and overhead is not None:
        total = Limit(total.amount + int(parse_quantity(overhead)), total.fmt)
    return total


def _empty_dir_violation(pod: Pod, usage: PodStorage) -> str | None:
    for volume in pod.spec.volumes:
        if volume.empty_dir is None or volume.empty_dir.size_limit is None:
            continue
        used = usage.volumes.get(volume.name)
        size = _limit(volume.empty_dir.size_limit)
        if used is not None and size.amount > 0 and used > size.amount:
            return EMPTY_DIR_MESSAGE.format(volume=volume.name, limit=size)
    return None


def _pod_violation(pod: Pod, usage: PodStorage) -> str | None:
    limit = pod_limit(pod)
    if limit is not None and usage.total > limit.amount:
        return POD_MESSAGE.format(limit=limit)
    return None


def _container_violation(pod: Pod, usage: PodStorage, dedicated_image_fs: bool) -> str | None:
    limits = {
        c.name: limit
        for c in pod.spec.containers
        if (limit := _container_limit(c)) is not None and limit.amount != 0
    }
    for name, used in usage.containers.items():
        limit = limits.get(name)
        if limit is None:
            continue
        total = used.logs + (0 if dedicated_image_fs else used.rootfs)
        if total > limit.amount:
            return CONTAINER_MESSAGE.format(container=name, limit=limit)
    return None


def violation(pod: Pod, usage: PodStorage, *, dedicated_image_fs: bool) -> str | None:
    """The eviction message for the first limit ``pod`` is over, None when it is within all."""
    return (
        _empty_dir_violation(pod, usage)
        or _pod_violation(pod, usage)
        or _container_violation(pod, usage, dedicated_image_fs)
    )


def violations(
    pods: Sequence[Pod], usage: Mapping[str, PodStorage], *, dedicated_image_fs: bool
) -> list[tuple[Pod, str]]:
    """Every pod over one of its limits, with the message (pods without stats are skipped)."""
    out: list[tuple[Pod, str]] = []
    for pod in pods:
        used = usage.get(pod.uid)
        if used is None:
            continue
        message = violation(pod, used, dedicated_image_fs=dedicated_image_fs)
        if message is not None:
            out.append((pod, message))
    return out
