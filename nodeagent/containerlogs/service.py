"""Which file a ``/containerLogs`` request reads: the kubelet's checks, with its messages.

The pod and its status come from the agent (``PodLookup``: the pod as the agent knows it, with
the newest status the agent computed); the container instance is chosen from that status as
the kubelet chooses it (``previous`` is ``lastState.terminated.containerID``), and its log path
and state come from CRI ``ContainerStatus``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.clock import Clock
from nodeagent.containerlogs.options import LogOptions
from nodeagent.containerlogs.reader import Sink, read_log
from nodeagent.kuberuntime import CriError, CriNotFound, RuntimeService
from nodeagent.kuberuntime import types as cri

Pod = Mapping[str, Any]
PodLookup = Callable[[str, str], Pod | None]
"""``(namespace, name)`` → the pod with its current status, or None."""


class LogRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class LogTarget:
    container_id: str
    path: str


def _spec_names(pod: Pod) -> set[str]:
    spec = pod.get("spec") or {}
    return {
        str(c.get("name"))
        for key in ("containers", "initContainers", "ephemeralContainers")
        for c in spec.get(key) or []
    }


def _strip(container_id: str) -> str:
    return container_id.split("://", 1)[-1]


def choose_container(pod: Pod, container: str, *, previous: bool) -> str:
    """The runtime id of the instance whose log is asked for (kubelet
    ``validateContainerLogStatus``); raises ``LogRequestError`` with the kubelet's text."""
    name = str((pod.get("metadata") or {}).get("name", ""))
    status = pod.get("status") or {}
    statuses = [
        s
        for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
        for s in status.get(key) or []
    ]
    found = next((s for s in statuses if s.get("name") == container), None)
    if found is None:
        raise LogRequestError(400, f'container "{container}" in pod "{name}" is not available')
    state = found.get("state") or {}
    last = (found.get("lastState") or {}).get("terminated")
    waiting, running, terminated = (
        state.get("waiting"),
        state.get("running"),
        state.get("terminated"),
    )
    if previous:
        if not last or not last.get("containerID"):
            raise LogRequestError(
                400, f'previous terminated container "{container}" in pod "{name}" not found'
            )
        return _strip(last["containerID"])
    if running is not None:
        return _strip(str(found.get("containerID", "")))
    if terminated is not None:
        cid = terminated.get("containerID") or found.get("containerID")
        if not cid and last and last.get("containerID"):
            cid = last["containerID"]
        if not cid:
            raise LogRequestError(400, f'container "{container}" in pod "{name}" is terminated')
        return _strip(str(cid))
    if last is not None:
        if not last.get("containerID"):
            raise LogRequestError(400, f'container "{container}" in pod "{name}" is terminated')
        return _strip(last["containerID"])
    if waiting is not None:
        reason = waiting.get("reason", "")
        detail = {
            "ErrImagePull": "image can't be pulled",
            "ImagePullBackOff": "trying and failing to pull image",
        }.get(reason, reason)
        raise LogRequestError(
            400, f'container "{container}" in pod "{name}" is waiting to start: {detail}'
        )
    raise LogRequestError(
        400, f'container "{container}" in pod "{name}" is waiting to start - no logs yet'
    )


class ContainerLogs:
    """What the ``/containerLogs`` handler needs, in one object (``request.app[LOGS]``)."""

    def __init__(self, *, runtime: RuntimeService, pods: PodLookup, clock: Clock) -> None:
        self._runtime = runtime
        self._pods = pods
        self.clock = clock

    async def target(
        self, namespace: str, pod_name: str, container: str, *, previous: bool
    ) -> LogTarget:
        if not container:
            raise LogRequestError(400, '{"message": "Missing container name."}')
        pod = self._pods(namespace, pod_name)
        if pod is None:
            raise LogRequestError(404, f'pod "{pod_name}" does not exist')
        if container not in _spec_names(pod):
            raise LogRequestError(404, f'container "{container}" not found in pod "{pod_name}"')
        cid = choose_container(pod, container, previous=previous)
        try:
            status = (await self._runtime.container_status(cid)).status
        except CriNotFound:
            raise LogRequestError(
                400, f'failed to get container status "{cid}": container not found'
            ) from None
        except CriError as e:
            raise LogRequestError(500, f'failed to get container status "{cid}": {e}') from None
        if not status.log_path:
            raise LogRequestError(400, f'container "{container}" in pod "{pod_name}" has no log')
        return LogTarget(container_id=cid, path=status.log_path)

    async def running(self, container_id: str) -> bool:
        try:
            status = (await self._runtime.container_status(container_id)).status
        except CriNotFound:
            return False
        except CriError:
            return True  # the runtime hiccupped: keep following, ask again later
        return bool(status.state == cri.CONTAINER_RUNNING)

    def read(
        self,
        target: LogTarget,
        options: LogOptions,
        *,
        client_alive: Callable[[], bool] = lambda: True,
        sink: Sink | None = None,
    ) -> AsyncIterator[bytes]:
        async def running() -> bool:
            return await self.running(target.container_id)

        return read_log(target.path, options, running=running, client_alive=client_alive, sink=sink)
