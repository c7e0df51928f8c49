"""Stopping one container, as the kubelet's ``killContainer`` (``kuberuntime_container.go``).

:meth:`ContainerKiller.kill_container` is the one place a container is stopped: the
``Killing`` event, the preStop hook within the grace period (the time it takes is deducted),
the wait for the containers that must stop first (sidecars, ``termination_order``), then
StopContainer with what is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final

from nodeagent.clock import Clock
from nodeagent.kuberuntime.errors import CriNotFound
from nodeagent.kuberuntime.hooks import (
    FAILED_PRE_STOP_HOOK,
    LIFECYCLE_HTTP_FALLBACK,
    PRE_STOP_EVENT_MESSAGE,
    HookRunner,
    grace_after_pre_stop,
    stop_grace,
)
from nodeagent.kuberuntime.results import SyncResult
from nodeagent.kuberuntime.service import RuntimeService
from nodeagent.kuberuntime.termination_order import TerminationOrdering
from nodeagent.log import Logger
from nodeagent.podspec import Container, Pod

STOPPED_REMEMBERED: Final = 1024
"""How many of the latest stopped container ids :meth:`ContainerKiller.stopped` knows."""


class ContainerKiller:
    """``acting`` tells the runtime manager that a pod is about to change in the runtime."""

    def __init__(
        self,
        *,
        runtime: RuntimeService,
        clock: Clock,
        hooks: HookRunner,
        acting: Callable[[str], None],
        log: Logger,
    ) -> None:
        self._runtime = runtime
        self._clock = clock
        self._hooks = hooks
        self._acting = acting
        self._log = log
        self._stopped: dict[str, None] = {}

    def stopped(self, container_id: str) -> bool:
        """Whether the agent asked the runtime to stop this container (one of the latest
        :data:`STOPPED_REMEMBERED`): its SIGKILL exit is the agent's own doing."""
        return container_id in self._stopped

    async def kill_container(
        self,
        pod: Pod | None,
        container_id: str,
        name: str,
        *,
        grace: int,
        message: str = "",
        override: int | None = None,
        result: SyncResult | None = None,
        pod_ips: Sequence[str] = (),
        ordering: TerminationOrdering | None = None,
    ) -> None:
        """The one place a container is stopped, as the kubelet's ``killContainer``: the
        ``Killing`` event, the preStop hook within ``grace`` (the time it takes is deducted),
        the wait for the containers that must stop first (sidecars), then StopContainer with
        what is left (at least 2 s, unless ``override``)."""
        spec = _container_spec(pod, name) if pod is not None else None
        if pod is not None:
            self._acting(pod.uid)
        if result is not None:
            result.event(
                "Normal", "Killing", message or f"Stopping container {name}", container=name
            )
        pre_stop = spec.lifecycle.pre_stop if spec is not None and spec.lifecycle else None
        if pod is not None and spec is not None and pre_stop is not None and grace > 0:
            started = self._clock.monotonic()
            try:
                hook = self._hooks.run(
                    pod,
                    spec,
                    container_id,
                    pre_stop,
                    pod_ips=pod_ips,
                    on_fallback=lambda text: (
                        result.event("Warning", LIFECYCLE_HTTP_FALLBACK, text) if result else None
                    ),
                )
                failure = await asyncio.wait_for(hook, grace)
            except TimeoutError:
                failure = None
                self._log.v(2).info(
                    "PreStop hook not completed in grace period",
                    pod_namespace=pod.namespace,
                    pod_name=pod.name,
                    container_name=name,
                    grace_period=grace,
                )
            if failure is not None:
                self._log.error(
                    "PreStop hook failed",
                    pod_namespace=pod.namespace,
                    pod_name=pod.name,
                    pod_uid=pod.uid,
                    container_name=name,
                    container_id=container_id,
                    error=failure,
                )
                if result is not None:
                    result.event(
                        "Warning", FAILED_PRE_STOP_HOOK, PRE_STOP_EVENT_MESSAGE, container=name
                    )
            grace = grace_after_pre_stop(grace, self._clock.monotonic() - started)
        if ordering is not None and grace > 0:
            grace -= int(await ordering.wait_for_turn(name, grace))
        seconds = stop_grace(grace, override=override)
        try:
            await self._stop_container(pod, container_id, name, seconds)
        finally:
            if ordering is not None:
                ordering.terminated(name)

    async def _stop_container(
        self, pod: Pod | None, container_id: str, name: str, grace: int
    ) -> None:
        self._stopped[container_id] = None
        if len(self._stopped) > STOPPED_REMEMBERED:
            del self._stopped[next(iter(self._stopped))]
        try:
            await self._runtime.stop_container(container_id, grace)
        except CriNotFound:
            return
        fields = (
            {"pod_namespace": pod.namespace, "pod_name": pod.name, "pod_uid": pod.uid}
            if pod
            else {}
        )
        self._log.v(2).info(
            "Stopped container",
            container_name=name,
            container_id=container_id,
            grace_period=grace,
            **fields,
        )


def _container_spec(pod: Pod, name: str) -> Container | None:
    return next(
        (c for c in (*pod.spec.init_containers, *pod.spec.containers) if c.name == name), None
    )
