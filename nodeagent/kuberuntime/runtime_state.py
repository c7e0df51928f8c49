"""What the runtime has for one pod: its sandboxes and containers, newest first.

This is the kubelet's ``kubecontainer.PodStatus``: plain frozen records converted from CRI
messages once, so the policy functions (``actions``, ``nodeagent.status``) never see protobuf.
Timestamps are nanoseconds since the epoch, as CRI reports them (0 = not yet).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from nodeagent.kuberuntime import labels
from nodeagent.kuberuntime import types as cri
from nodeagent.podspec import Container, Pod

NODE_NETWORK = 2  # NamespaceMode.NODE


class ContainerState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"


_FROM_CRI = {
    cri.CONTAINER_CREATED: ContainerState.CREATED,
    cri.CONTAINER_RUNNING: ContainerState.RUNNING,
    cri.CONTAINER_EXITED: ContainerState.EXITED,
}


@dataclass(frozen=True, slots=True)
class AppliedResources:
    """What the runtime reports a container runs with (CRI ``ContainerStatus.resources``):
    cpu shares, CFS quota and period (microseconds; quota 0 or -1: none) and the memory
    limit in bytes (0: none)."""

    cpu_shares: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    memory_limit: int = 0


@dataclass(frozen=True, slots=True)
class ContainerRecord:
    id: str
    name: str
    state: ContainerState
    restart_count: int = 0
    hash: str = ""
    created_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    image: str = ""
    image_ref: str = ""
    image_id: str = ""
    sandbox_id: str = ""
    grace_period: int | None = None
    """The pod's grace period recorded on the container (killing it without its pod)."""
    resources: AppliedResources | None = None
    """The resources the runtime reports, None when it reports none."""
    restored: tuple[Pod, Container] | None = field(default=None, compare=False, repr=False)
    """The pod and container restored from the annotations, when it has a preStop hook to
    run when it is killed without its pod."""


@dataclass(frozen=True, slots=True)
class SandboxRecord:
    id: str
    ready: bool
    attempt: int = 0
    created_at: int = 0
    ip: str = ""
    additional_ips: tuple[str, ...] = ()
    host_network: bool = False

    @property
    def ips(self) -> tuple[str, ...]:
        return (self.ip, *self.additional_ips) if self.ip else ()


@dataclass(frozen=True, slots=True)
class PodRuntimeState:
    uid: str
    name: str = ""
    namespace: str = ""
    sandboxes: tuple[SandboxRecord, ...] = ()
    containers: tuple[ContainerRecord, ...] = field(default=())

    def find(self, name: str) -> ContainerRecord | None:
        """The newest container created for ``name``."""
        return next((c for c in self.containers if c.name == name), None)

    def running(self) -> list[ContainerRecord]:
        return [c for c in self.containers if c.state is ContainerState.RUNNING]

    @property
    def empty(self) -> bool:
        return not self.sandboxes and not self.containers

    @property
    def settled(self) -> bool:
        """Nothing runs and nothing starts by itself: every container exited, no sandbox
        ready. Such a state changes only when the agent acts on the pod (or container GC
        removes what it lists, which removal tolerates)."""
        return (
            not self.empty
            and not any(s.ready for s in self.sandboxes)
            and all(c.state is ContainerState.EXITED for c in self.containers)
        )


_R = TypeVar("_R", SandboxRecord, ContainerRecord)


def sandbox_record(status: cri.PodSandboxStatus) -> SandboxRecord:
    network = status.network
    mode = status.linux.namespaces.options.network
    return SandboxRecord(
        id=status.id,
        ready=status.state == cri.SANDBOX_READY,
        attempt=status.metadata.attempt,
        created_at=status.created_at,
        ip=network.ip,
        additional_ips=tuple(ip.ip for ip in network.additional_ips),
        host_network=mode == NODE_NETWORK,
    )


def listed_sandbox_record(sandbox: cri.PodSandbox) -> SandboxRecord:
    return SandboxRecord(
        id=sandbox.id,
        ready=sandbox.state == cri.SANDBOX_READY,
        attempt=sandbox.metadata.attempt,
        created_at=sandbox.created_at,
    )


def container_record(status: cri.ContainerStatus, sandbox_id: str = "") -> ContainerRecord:
    return ContainerRecord(
        id=status.id,
        name=status.metadata.name or status.labels.get(labels.CONTAINER_NAME, ""),
        state=_FROM_CRI.get(status.state, ContainerState.UNKNOWN),
        restart_count=labels.restart_count_of(status.annotations),
        hash=status.annotations.get(labels.CONTAINER_HASH, ""),
        created_at=status.created_at,
        started_at=status.started_at,
        finished_at=status.finished_at,
        exit_code=status.exit_code,
        reason=status.reason,
        message=status.message,
        image=status.image.image,
        image_ref=status.image_ref,
        image_id=status.image_id,
        sandbox_id=sandbox_id,
        grace_period=labels.grace_period_of(status.annotations, None),
        resources=applied_resources(status),
        restored=labels.restore_pod_spec(status.annotations, status.labels),
    )


def applied_resources(status: cri.ContainerStatus) -> AppliedResources | None:
    if not status.HasField("resources") or not status.resources.HasField("linux"):
        return None
    linux = status.resources.linux
    return AppliedResources(
        cpu_shares=linux.cpu_shares,
        cpu_quota=linux.cpu_quota,
        cpu_period=linux.cpu_period,
        memory_limit=linux.memory_limit_in_bytes,
    )


def listed_container_record(container: cri.Container) -> ContainerRecord:
    return ContainerRecord(
        id=container.id,
        name=container.metadata.name or container.labels.get(labels.CONTAINER_NAME, ""),
        state=_FROM_CRI.get(container.state, ContainerState.UNKNOWN),
        restart_count=labels.restart_count_of(container.annotations),
        hash=container.annotations.get(labels.CONTAINER_HASH, ""),
        created_at=container.created_at,
        image=container.image.image,
        image_ref=container.image_ref,
        sandbox_id=container.pod_sandbox_id,
    )


LISTED_RUNNING: Final = "running"
LISTED_EXITED: Final = "exited"
LISTED_UNKNOWN: Final = "unknown"
_LISTED: Final = {
    ContainerState.RUNNING: LISTED_RUNNING,
    ContainerState.EXITED: LISTED_EXITED,
}

Listing = frozenset[tuple[str, str]]
"""A pod as a relist sees it: each sandbox and container id with its coarse state
(``running``: a ready sandbox or a running container, ``exited``, ``unknown``)."""

RelistView = Callable[[str], "tuple[float, Listing] | None"]
"""The PLEG's last successful relist: (event-loop time it started, the pod's :data:`Listing`,
empty when the relist saw nothing of it); None before the first relist."""


def listing_of(state: PodRuntimeState) -> Listing:
    """``state`` as a relist would see it (the PLEG's ``group`` of the same objects)."""
    sandboxes = ((s.id, LISTED_RUNNING if s.ready else LISTED_EXITED) for s in state.sandboxes)
    containers = ((c.id, _LISTED.get(c.state, LISTED_UNKNOWN)) for c in state.containers)
    return frozenset((*sandboxes, *containers))


def newest_first(records: Iterable[_R]) -> tuple[_R, ...]:
    return tuple(sorted(records, key=lambda r: r.created_at, reverse=True))
