"""The pod lifecycle event generator: relist the runtime every second, emit what changed.

Like the kubelet's generic PLEG, each relist lists every sandbox and container through CRI
(two calls, whatever the number of pods), groups them by the ``io.kubernetes.pod.uid`` label
and compares each one's state with the previous relist: a container that starts gives
``CONTAINER_STARTED``, one that exits ``CONTAINER_DIED``, one that disappears
``CONTAINER_REMOVED`` (after a ``CONTAINER_DIED`` if it was not seen exited). Sandboxes count
as containers (ready = running). Events go to ``on_event``, only on change.

``health()`` is the kubelet's PLEG health check: unhealthy when no relist succeeded for 3
minutes (``pleg was last seen active 3m0.5s ago; threshold is 3m0s``).

``listed(uid)`` gives the runtime manager what the last relist saw of a pod (and when that
relist started), so a periodic sync of a pod whose sandboxes and containers did not change
reuses the state it read before instead of asking the runtime again (the kubelet's pod
workers read the PLEG's cache the same way).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from nodeagent.gotext import duration_seconds
from nodeagent.kuberuntime import CriError, RuntimeService
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_NAME, POD_NAMESPACE, POD_UID
from nodeagent.kuberuntime.runtime_state import (
    LISTED_EXITED,
    LISTED_RUNNING,
    LISTED_UNKNOWN,
    Listing,
)
from nodeagent.log import Logger, get_logger
from nodeagent.pods import metrics

RELIST_PERIOD: Final = 1.0
RELIST_THRESHOLD: Final = 180.0


class EventType(enum.Enum):
    CONTAINER_STARTED = "ContainerStarted"
    CONTAINER_DIED = "ContainerDied"
    CONTAINER_REMOVED = "ContainerRemoved"
    CONTAINER_CHANGED = "ContainerChanged"


@dataclass(frozen=True, slots=True)
class PodLifecycleEvent:
    uid: str
    type: EventType
    data: str
    """The container (or sandbox) id."""


class _State(enum.Enum):
    RUNNING = LISTED_RUNNING
    EXITED = LISTED_EXITED
    UNKNOWN = LISTED_UNKNOWN
    NON_EXISTENT = "non-existent"


@dataclass(frozen=True, slots=True)
class RelistedPod:
    uid: str
    name: str
    namespace: str
    states: Mapping[str, _State]

    @property
    def running(self) -> bool:
        return any(s is _State.RUNNING for s in self.states.values())


_CONTAINER: Final = {
    cri.CONTAINER_RUNNING: _State.RUNNING,
    cri.CONTAINER_EXITED: _State.EXITED,
}


def events_for(uid: str, cid: str, old: _State, new: _State) -> list[PodLifecycleEvent]:
    """``generateEvents`` of the kubelet's generic PLEG."""
    if new is old:
        return []
    if new is _State.RUNNING:
        return [PodLifecycleEvent(uid, EventType.CONTAINER_STARTED, cid)]
    if new is _State.EXITED:
        return [PodLifecycleEvent(uid, EventType.CONTAINER_DIED, cid)]
    if new is _State.UNKNOWN:
        return [PodLifecycleEvent(uid, EventType.CONTAINER_CHANGED, cid)]
    removed = PodLifecycleEvent(uid, EventType.CONTAINER_REMOVED, cid)
    if old is _State.EXITED:
        return [removed]
    return [PodLifecycleEvent(uid, EventType.CONTAINER_DIED, cid), removed]


def group(
    sandboxes: list[cri.PodSandbox], containers: list[cri.Container]
) -> dict[str, RelistedPod]:
    states: dict[str, dict[str, _State]] = {}
    names: dict[str, tuple[str, str]] = {}
    for sandbox in sandboxes:
        uid = sandbox.labels.get(POD_UID, "")
        if not uid:
            continue
        ready = sandbox.state == cri.SANDBOX_READY
        states.setdefault(uid, {})[sandbox.id] = _State.RUNNING if ready else _State.EXITED
        names[uid] = (sandbox.labels.get(POD_NAME, ""), sandbox.labels.get(POD_NAMESPACE, ""))
    for container in containers:
        uid = container.labels.get(POD_UID, "")
        if not uid:
            continue
        states.setdefault(uid, {})[container.id] = _CONTAINER.get(container.state, _State.UNKNOWN)
        names.setdefault(
            uid, (container.labels.get(POD_NAME, ""), container.labels.get(POD_NAMESPACE, ""))
        )
    return {
        uid: RelistedPod(uid=uid, name=names[uid][0], namespace=names[uid][1], states=s)
        for uid, s in states.items()
    }


class GenericPleg:
    def __init__(
        self,
        *,
        runtime: RuntimeService,
        on_event: Callable[[PodLifecycleEvent], None],
        relist_period: float = RELIST_PERIOD,
        relist_threshold: float = RELIST_THRESHOLD,
        log: Logger | None = None,
    ) -> None:
        self._runtime = runtime
        self._on_event = on_event
        self._period = relist_period
        self._threshold = relist_threshold
        self._log = log or get_logger("pleg")
        self._pods: dict[str, RelistedPod] = {}
        self._last_relist: float | None = None
        self._relist_started: float | None = None
        self._relisted = asyncio.Event()
        self._failing = False

    @property
    def name(self) -> str:
        return "pleg"

    def pods(self) -> dict[str, RelistedPod]:
        """What the last relist saw, by pod uid."""
        return dict(self._pods)

    def listed(self, uid: str) -> tuple[float, Listing] | None:
        """(when the last successful relist started, what it saw of pod ``uid``); None
        before the first one."""
        if self._relist_started is None:
            return None
        pod = self._pods.get(uid)
        listing: Listing = (
            frozenset((cid, s.value) for cid, s in pod.states.items()) if pod else frozenset()
        )
        return self._relist_started, listing

    @property
    def relisted_once(self) -> bool:
        return self._last_relist is not None

    async def wait_relisted(self) -> None:
        await self._relisted.wait()

    def health(self) -> str | None:
        """None when healthy, else the kubelet's ``PLEG is not healthy: ...`` message."""
        if self._last_relist is None:
            return "PLEG is not healthy: pleg has yet to be successful"
        since = asyncio.get_running_loop().time() - self._last_relist
        if since > self._threshold:
            return (
                f"PLEG is not healthy: pleg was last seen active {duration_seconds(since)} ago; "
                f"threshold is {duration_seconds(self._threshold)}"
            )
        return None

    async def run(self) -> None:
        while True:
            await self.relist()
            await asyncio.sleep(self._period)

    async def relist(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self._relist_started is not None:
            metrics.PLEG_RELIST_INTERVAL.observe(started - self._relist_started)
        try:
            sandboxes = await self._runtime.list_pod_sandbox()
            containers = await self._runtime.list_containers()
        except CriError as e:
            if not self._failing:
                self._log.error("PLEG: Ignoring events because relist failed", error=str(e))
                self._failing = True
            return
        finally:
            metrics.PLEG_RELIST_DURATION.observe(loop.time() - started)
        self._failing = False
        metrics.running(sandboxes, containers)
        current = group(sandboxes, containers)
        for uid in current.keys() | self._pods.keys():
            old = self._pods.get(uid)
            new = current.get(uid)
            old_states = old.states if old else {}
            new_states = new.states if new else {}
            for cid in old_states.keys() | new_states.keys():
                before = old_states.get(cid, _State.NON_EXISTENT)
                after = new_states.get(cid, _State.NON_EXISTENT)
                for event in events_for(uid, cid, before, after):
                    self._on_event(event)
        self._pods = current
        self._relist_started = started
        self._last_relist = asyncio.get_running_loop().time()
        self._relisted.set()
