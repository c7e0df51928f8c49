"""In-place resize of a running pod (the kubelet's ``doPodResizeAction`` and the resize
status): the allocation manager decides what each container is allocated; :class:`PodResizer`
applies it to the running containers through CRI ``UpdateContainerResources`` (or lets the
plan restart a container whose resize policy says so), refuses to shrink a pod's memory below
what it uses, and reports the resize done once the runtime reads back what was set.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from nodeagent.allocation import AllocationManager
from nodeagent.allocation.policy import (
    MEMORY_USAGE_MESSAGE,
    Resources,
    resizable_containers,
    resize_restarts,
    same_resources,
)
from nodeagent.cm.policy import ResourceConfig
from nodeagent.kuberuntime.env import ContainerConfigError
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.runtime_state import ContainerState, PodRuntimeState
from nodeagent.log import Logger
from nodeagent.podspec import Pod
from nodeagent.quantity import value

RESIZE_POLL: Final = 1.0
"""How soon a resize the runtime has not yet read back is looked at again."""
RESIZE_ERROR_RETRY: Final = 10.0
"""How soon a resize that failed to apply is tried again."""


def _shrinks_memory(old: Resources, new: Resources) -> bool:
    a = old.get("limits", {}).get("memory")
    b = new.get("limits", {}).get("memory")
    try:
        return (a is None and b is not None) or (
            a is not None and b is not None and value(b) < value(a)
        )
    except (ValueError, ArithmeticError):
        return False


class ResizeCgroups(Protocol):
    """What a resize asks of the container manager (``nodeagent.cm``)."""

    def applied(self, uid: str) -> ResourceConfig | None: ...

    def pod_config(self, pod: Pod) -> ResourceConfig: ...

    async def pod_memory_usage(self, uid: str) -> int | None: ...


class PodResizer:
    """Without an allocation manager nothing is ever resized: the spec's resources are used
    as they are."""

    def __init__(
        self,
        *,
        runtime: RuntimeManager,
        allocation: AllocationManager | None,
        cgroups: ResizeCgroups | None,
        log: Logger,
    ) -> None:
        self._runtime = runtime
        self._allocation = allocation
        self._cgroups = cgroups
        self._log = log

    def resize_view(self, pod: Pod) -> dict[str, Any]:
        """The resize conditions and each container's allocated / actual resources."""
        if self._allocation is None:
            return {}
        allocation = self._allocation.allocation(pod.uid)
        actuated = self._allocation.actuated(pod.uid)
        resources = {
            name: (dict(alloc.get("requests", {})), actuated.get(name, {}))
            for name, alloc in allocation.items()
        }
        return {
            "resize_conditions": self._allocation.conditions(pod.uid),
            "resources": resources,
        }

    async def resize(self, pod: Pod, state: PodRuntimeState) -> tuple[dict[str, str], bool]:
        """Apply the pod's allocation to its running containers (the kubelet's
        ``doPodResizeAction``): the pod cgroup is already widened to the larger of the old
        and new limits; each container whose allocation differs from what it runs with gets
        CRI ``UpdateContainerResources`` (shrinking memory first), a ``RestartContainer``
        policy restarts it instead. Returns (containers to restart -> message, whether the
        pod cgroup may now take its new limits)."""
        alloc = self._allocation
        if alloc is None:
            return {}, True
        allocation = alloc.allocation(pod.uid)
        running = {
            c.name: c
            for c in reversed(state.containers)
            if c.state is ContainerState.RUNNING and c.name in allocation
        }
        actuated = alloc.actuated(pod.uid)
        unknown = {n: allocation[n] for n in running if n not in actuated}
        if unknown:  # started before the allocation was recorded: it runs with it
            await alloc.set_actuated(pod.uid, unknown)
            actuated.update(unknown)
        restarts = resize_restarts(pod, actuated, list(running))
        updates = [
            c
            for c in resizable_containers(pod)
            if c.name in running
            and c.name not in restarts
            and not same_resources(actuated[c.name], allocation[c.name])
        ]
        if not updates and not restarts:
            return {}, True
        alloc.resize_applying(pod)
        if not await self._memory_allows(pod):
            return {}, False
        updates.sort(key=lambda c: not _shrinks_memory(actuated[c.name], allocation[c.name]))
        for container in updates:
            record = running[container.name]
            try:
                await self._runtime.update_container_resources(pod, container, record.id)
            except (CriError, ContainerConfigError) as e:
                text = e.status_text if isinstance(e, CriError) else str(e)
                self._log.warning(
                    "Cannot update container resources",
                    pod_namespace=pod.namespace,
                    pod_name=pod.name,
                    pod_uid=pod.uid,
                    container_name=container.name,
                    error=text,
                )
                alloc.resize_failed(pod, text)
                return {}, False
            await alloc.set_actuated(pod.uid, {container.name: allocation[container.name]})
        return restarts, True

    async def _memory_allows(self, pod: Pod) -> bool:
        """A pod memory limit never goes below what the pod uses (the kubelet aborts the
        resize, ``PodResizeInProgress`` with ``Error``, and tries again later)."""
        if self._cgroups is None or self._allocation is None:
            return True
        new = self._cgroups.pod_config(pod).memory_max
        old = self._cgroups.applied(pod.uid)
        if new is None or (
            old is not None and old.memory_max is not None and new >= old.memory_max
        ):
            return True
        usage = await self._cgroups.pod_memory_usage(pod.uid)
        if usage is None or usage < new:
            return True
        self._allocation.resize_failed(pod, MEMORY_USAGE_MESSAGE.format(pod=pod.name))
        return False

    async def finish_resize(self, pod: Pod) -> bool:
        if self._allocation is None or not await self._resize_settled(pod):
            return False
        self._allocation.resize_done(pod)
        return True

    async def _resize_settled(self, pod: Pod) -> bool:
        """Every running container runs with its allocation, as the runtime reads it back
        (when it reports resources) and as the agent last set it."""
        if self._allocation is None:
            return True
        allocation = self._allocation.allocation(pod.uid)
        actuated = self._allocation.actuated(pod.uid)
        state = await self._runtime.pod_state(pod.uid)
        by_name = {c.name: c for c in resizable_containers(pod)}
        for name, alloc in allocation.items():
            record = state.find(name)
            if record is None or record.state is not ContainerState.RUNNING:
                continue
            if not same_resources(actuated.get(name, {}), alloc):
                return False
            container = by_name.get(name)
            if record.resources is None or container is None:
                continue
            want = self._runtime.desired_resources(pod, container)
            got = record.resources
            if got.memory_limit != want.memory_limit_in_bytes or got.cpu_shares != want.cpu_shares:
                return False
            if want.cpu_quota > 0 and got.cpu_quota != want.cpu_quota:
                return False
        return True
