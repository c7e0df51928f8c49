"""Which dead containers, sandboxes and pod log directories container GC removes. Pure.

The kubelet's ``kuberuntime_gc.go``, as functions over plain records:

- a container is *evictable* when it is not running and was created more than ``min_age`` ago;
  evictable containers are grouped in *evict units*, one per (pod uid, container name);
- a unit whose pod's content may be removed (the pod is gone) goes whole; then every unit keeps
  its ``max_per_pod_container`` newest; then, when ``max_containers`` >= 0 and more are left,
  every unit keeps ``max_containers // units`` (at least 1) and, if still too many, the oldest
  of all go;
- a sandbox goes when it is *inactive* (not ready and no container left in it) and it is not
  the newest of a pod that still exists;
- a pod log directory ``<namespace>_<name>_<uid>`` goes when its pod's content may be removed.

``removable(uid)`` answers "may this pod's content be removed": the pod is known neither to the
API nor to the pod workers, and the pod sources have synced (the kubelet's
``ShouldPodContentBeRemoved``). Removal order is oldest first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass
from typing import Final

MIN_AGE: Final = 0.0  # --minimum-container-ttl-duration
MAX_PER_POD_CONTAINER: Final = 1  # --maximum-dead-containers-per-container
MAX_CONTAINERS: Final = -1  # --maximum-dead-containers (-1: no global cap)
CONTAINER_GC_PERIOD: Final = 60.0  # ContainerGCPeriod

Removable = Callable[[str], bool]


@dataclass(frozen=True, kw_only=True)
class ContainerGCPolicy:
    min_age: float = MIN_AGE
    """Seconds a dead container is kept at least."""
    max_per_pod_container: int = MAX_PER_POD_CONTAINER
    """Dead instances kept per container of a pod; < 0: no limit."""
    max_containers: int = MAX_CONTAINERS
    """Dead containers kept on the node; < 0: no limit."""


@dataclass(frozen=True, slots=True)
class DeadContainer:
    id: str
    pod_uid: str
    name: str
    created_at: int
    """Nanoseconds since the epoch, as CRI reports it."""
    unknown: bool = False
    """In CONTAINER_UNKNOWN state: it may still run, so it is stopped before removal."""


@dataclass(frozen=True, slots=True)
class RuntimeContainer:
    """A container as listed by the runtime (running or not), reduced to what GC reads."""

    id: str
    pod_uid: str
    name: str
    sandbox_id: str
    created_at: int
    running: bool
    unknown: bool = False


@dataclass(frozen=True, slots=True)
class Sandbox:
    id: str
    pod_uid: str
    created_at: int
    ready: bool


def evictable_containers(
    containers: Iterable[RuntimeContainer], *, now_ns: int, min_age: float
) -> list[DeadContainer]:
    """The containers GC may consider: not running, created at least ``min_age`` ago."""
    newest_gc_time = now_ns - int(min_age * 1e9)
    return [
        DeadContainer(
            id=c.id, pod_uid=c.pod_uid, name=c.name, created_at=c.created_at, unknown=c.unknown
        )
        for c in containers
        if not c.running and c.created_at <= newest_gc_time
    ]


def _newest_first(items: Iterable[DeadContainer]) -> list[DeadContainer]:
    return sorted(items, key=lambda c: c.created_at, reverse=True)


def containers_to_remove(
    dead: Sequence[DeadContainer],
    *,
    policy: ContainerGCPolicy,
    removable: Removable,
) -> list[DeadContainer]:
    """The evictable containers to remove, in removal order (``evictContainers``)."""
    units: dict[tuple[str, str], list[DeadContainer]] = defaultdict(list)
    for container in dead:
        units[(container.pod_uid, container.name)].append(container)
    removed: list[DeadContainer] = []

    def remove_oldest(unit: list[DeadContainer], count: int) -> list[DeadContainer]:
        ordered = _newest_first(unit)
        keep = max(len(ordered) - count, 0)
        removed.extend(reversed(ordered[keep:]))
        return ordered[:keep]

    for key in [k for k in units if removable(k[0])]:
        gone = units.pop(key)
        remove_oldest(gone, len(gone))

    def enforce_per_unit(limit: int) -> None:
        for key, unit in units.items():
            if len(unit) > limit:
                units[key] = remove_oldest(unit, len(unit) - limit)

    if policy.max_per_pod_container >= 0:
        enforce_per_unit(policy.max_per_pod_container)
    total = sum(len(unit) for unit in units.values())
    if policy.max_containers >= 0 and total > policy.max_containers:
        enforce_per_unit(max(policy.max_containers // len(units), 1))
        left = [c for unit in units.values() for c in unit]
        if len(left) > policy.max_containers:
            remove_oldest(left, len(left) - policy.max_containers)
    return removed


def sandboxes_to_remove(
    sandboxes: Sequence[Sandbox], *, in_use: Set[str], removable: Removable
) -> list[Sandbox]:
    """Inactive sandboxes to remove (``evictSandboxes``): all those of a pod that is gone, all
    but the newest of a pod that exists. ``in_use``: ids of sandboxes that still hold a
    container (removed containers excluded)."""
    by_pod: dict[str, list[Sandbox]] = defaultdict(list)
    for sandbox in sandboxes:
        by_pod[sandbox.pod_uid].append(sandbox)
    out: list[Sandbox] = []
    for uid, pods in by_pod.items():
        ordered = sorted(pods, key=lambda s: s.created_at, reverse=True)
        candidates = ordered if removable(uid) else ordered[1:]
        out.extend(s for s in reversed(candidates) if not s.ready and s.id not in in_use)
    return out


def pod_uid_of_log_dir(name: str) -> str:
    """``<namespace>_<name>_<uid>`` -> ``<uid>`` (``parsePodUIDFromLogsDirectory``)."""
    return name.rsplit("_", maxsplit=1)[-1]


def log_dirs_to_remove(names: Iterable[str], *, removable: Removable) -> list[str]:
    """Pod log directories (names under ``podLogsDir``) whose pod's content may go."""
    return sorted(name for name in names if removable(pod_uid_of_log_dir(name)))


def container_id_of_log_symlink(name: str) -> str | None:
    """``<pod>_<namespace>_<container>-<id>.log`` -> ``<id>``; None for other names."""
    last = name.rsplit("-", maxsplit=1)[-1]
    if not last.endswith(".log") or len(last) == len(".log"):
        return None
    return last.removesuffix(".log")
