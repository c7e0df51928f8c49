"""The eviction manager: watch the node's signals, report pressure, reclaim, evict.

Every ``monitoring_interval`` (the kubelet's 10 s) :meth:`EvictionManager.synchronize` takes a
summary, derives the signal observations and which thresholds are met (:mod:`.policy`), keeps
the node conditions for the transition period, and once a threshold's grace period has passed:
records ``EvictionThresholdMet`` on the node, runs the node-level reclaim for its signal (dead
containers and unused images for disk), and if the thresholds still hold evicts at most one
pod, ranked as the kubelet ranks them, then waits (up to 30 s) for that pod to be cleaned up.
``active_pods`` gives the pods with their allocated resources (the kubelet's
``getAllocatedPods``), so a resize the node has not accepted (``PodResizePending``) changes
neither the ranking nor the message; an accepted one counts from its acceptance, as the
kubelet's allocation checkpoint does, before the containers are resized.

With ``local_storage`` (the kubelet's ``localStorageCapacityIsolation``, on by default) each
pass first evicts every active pod over one of its local ephemeral storage limits
(:mod:`.localstorage`: an ``emptyDir`` over its ``sizeLimit``, the pod over its containers'
total ``limits.ephemeral-storage``, a container over its own), with or without node pressure
and before any ranking: grace 1 s, status Failed/``Evicted`` with the kubelet's message and
no ``DisruptionTarget`` condition (the kubelet passes none for these), the ``Evicted`` Event;
then it waits for them all to be cleaned up. Whether the images have a file system of their
own (``dedicated_image_fs``, asked once as the kubelet's ``HasDedicatedImageFs``) decides
whether a container's writable layer counts against its own limit.

A memory threshold notifier (:meth:`EvictionManager.run_notifier`) polls the node's available
memory every ``notifier_interval`` (one read of ``/proc/meminfo``, about 20 µs) and starts a
synchronize at once when it falls under a memory threshold, so a fast spike is not left for up
to a whole monitoring interval. The kubelet's own notifier uses cgroup v1 memory threshold
events (eventfd), which cgroup v2 does not have; a poll is the v2 equivalent.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from nodeagent.clock import Clock
from nodeagent.events import DiscardEvents, EventSink, ObjectEventSink, pod_reference
from nodeagent.eviction import localstorage, policy
from nodeagent.eviction.thresholds import ALLOCATABLE_MEMORY_AVAILABLE, MEMORY_AVAILABLE, Threshold
from nodeagent.gotext import rfc3339
from nodeagent.kuberuntime import CriError
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Pod, termination_grace_period

MONITORING_INTERVAL: Final = 10.0
NOTIFIER_INTERVAL: Final = 1.0
POD_CLEANUP_TIMEOUT: Final = 30.0
POD_CLEANUP_POLL: Final = 1.0

Json = Mapping[str, Any]
Reclaim = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Eviction:
    """What the pod's final status gets: phase Failed with these, and the condition."""

    reason: str
    message: str
    grace_period: int
    condition: Mapping[str, str] | None


class Terminator(Protocol):
    async def evict(self, pod: Pod, eviction: Eviction) -> None:
        """Kill the pod with the eviction's grace and report its status (returns once asked;
        the manager then waits for the pod to be cleaned up)."""
        ...


class EvictionManager:
    def __init__(
        self,
        *,
        thresholds: Sequence[Threshold],
        transition_period: float,
        max_pod_grace_period: int,
        summary: Callable[[], Awaitable[Json]],
        active_pods: Callable[[], list[Pod]],
        terminator: Terminator,
        clock: Clock,
        pod_cleaned_up: Callable[[str], bool] = lambda uid: True,
        reclaim: Mapping[str, Sequence[Reclaim]] | None = None,
        allocatable_memory: Callable[[], int | None] = lambda: None,
        memory_available: Callable[[], Awaitable[int | None]] | None = None,
        node_events: EventSink | None = None,
        pod_events: ObjectEventSink | None = None,
        on_change: Callable[[], None] = lambda: None,
        monitoring_interval: float = MONITORING_INTERVAL,
        notifier_interval: float = NOTIFIER_INTERVAL,
        local_storage: bool = True,
        dedicated_image_fs: Callable[[], Awaitable[bool]] | None = None,
        log: Logger | None = None,
    ) -> None:
        """``local_storage``: enforce the pods' local ephemeral storage limits
        (``localStorageCapacityIsolation``); ``dedicated_image_fs``: whether the runtime's
        image file system is not the root dir's (asked once; without it, not)."""
        self._thresholds = list(thresholds)
        self._transition = transition_period
        self._max_grace = max_pod_grace_period
        self._summary = summary
        self._active_pods = active_pods
        self._terminator = terminator
        self._clock = clock
        self._cleaned_up = pod_cleaned_up
        self._reclaim = reclaim or {}
        self._allocatable_memory = allocatable_memory
        self._memory_available = memory_available
        self._node_events: EventSink = node_events or DiscardEvents()
        self._pod_events: ObjectEventSink = pod_events or DiscardEvents()
        self._on_change = on_change
        self._interval = monitoring_interval
        self._notifier_interval = notifier_interval
        self._local_storage = local_storage
        self._ask_dedicated_image_fs = dedicated_image_fs
        self._dedicated_image_fs: bool | None = None if dedicated_image_fs else False
        self._log = log or get_logger("eviction")
        self._wake = asyncio.Event()
        self._conditions: list[str] = []
        self._first_observed: dict[Threshold, float] = {}
        self._last_observed: dict[str, float] = {}
        self._met: list[Threshold] = []
        self.last_observations: dict[str, policy.Observation] = {}
        self.evicted: deque[str] = deque(maxlen=64)  # the newest evictions' pod UIDs

    @property
    def name(self) -> str:
        return "eviction"

    # --- what other managers ask -----------------------------------------------------------

    @property
    def conditions(self) -> list[str]:
        return list(self._conditions)

    def under_memory_pressure(self) -> bool:
        return "MemoryPressure" in self._conditions

    def under_disk_pressure(self) -> bool:
        return "DiskPressure" in self._conditions

    def under_pid_pressure(self) -> bool:
        return "PIDPressure" in self._conditions

    def admit(self, pod: Pod) -> policy.Refusal | None:
        refusal = policy.admit(pod, self._conditions)
        if refusal is not None:
            self._log.info(
                "Failed to admit pod to node",
                pod_namespace=pod.namespace,
                pod_name=pod.name,
                node_condition=",".join(self._conditions),
            )
        return refusal

    # --- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        if not self._thresholds and not self._local_storage:
            self._log.info("Eviction manager: no thresholds configured, not monitoring")
            await asyncio.Event().wait()
        async with asyncio.TaskGroup() as tg:
            if self._memory_available is not None and self._memory_thresholds():
                tg.create_task(self.run_notifier(), name="eviction:notifier")
            while True:
                try:
                    evicted = await self.synchronize()
                except CriError as e:  # the runtime is down or starting: the next pass retries
                    self._log.error("Eviction manager: failed to get summary stats", error=str(e))
                    evicted = []
                except Exception as e:  # one bad pass must not stop eviction
                    self._log.exception("Eviction manager: failed to synchronize", error=str(e))
                    evicted = []
                if evicted:
                    self._log.info(
                        "Eviction manager: pods evicted, waiting for pod to be cleaned up",
                        pods=",".join(f"{p.namespace}/{p.name}" for p in evicted),
                    )
                    await self._wait_cleanup(evicted)
                else:
                    await self._sleep(self._interval)

    async def _sleep(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()

    async def _wait_cleanup(self, pods: list[Pod]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + POD_CLEANUP_TIMEOUT
        names = ",".join(f"{p.namespace}/{p.name}" for p in pods)
        while loop.time() < deadline:
            await asyncio.sleep(POD_CLEANUP_POLL)
            if all(self._cleaned_up(p.uid) for p in pods):
                self._log.info("Eviction manager: pods successfully cleaned up", pods=names)
                return
        self._log.info("Eviction manager: timed out waiting for pods to be cleaned up", pods=names)

    def _memory_thresholds(self) -> list[Threshold]:
        return [
            t
            for t in self._thresholds
            if t.signal in (MEMORY_AVAILABLE, ALLOCATABLE_MEMORY_AVAILABLE)
        ]

    async def run_notifier(self) -> None:
        """Poll available memory; wake the loop when it falls below a memory threshold."""
        assert self._memory_available is not None
        memory = [t for t in self._memory_thresholds() if t.signal == MEMORY_AVAILABLE]
        below = False
        while True:
            await asyncio.sleep(self._notifier_interval)
            available = await self._memory_available()
            obs = self.last_observations.get(MEMORY_AVAILABLE)
            if available is None or obs is None:
                continue
            now_below = any(available < policy.threshold_amount(t, obs) for t in memory)
            if now_below and not below:
                self._log.info(
                    "Eviction manager: memory threshold crossed between housekeeping passes",
                    available=available,
                )
                self._wake.set()
            below = now_below

    async def synchronize(self) -> list[Pod]:
        """One pass; returns the pods evicted (at most one for node pressure)."""
        if self._dedicated_image_fs is None and self._ask_dedicated_image_fs is not None:
            try:
                self._dedicated_image_fs = await self._ask_dedicated_image_fs()
            except CriError as e:  # as the kubelet: no pass until it is known
                self._log.error("Eviction manager: failed to get HasDedicatedImageFs", error=str(e))
                return []
        summary = await self._summary()
        observations = policy.observe(summary, allocatable_memory=self._allocatable_memory())
        usage = policy.pod_usage(summary)
        met = policy.thresholds_met(self._thresholds, observations, enforce_min_reclaim=False)
        if self._met:
            unresolved = policy.thresholds_met(self._met, observations, enforce_min_reclaim=True)
            met = policy.merge(met, unresolved)
        now = self._clock.monotonic()
        self._first_observed = policy.first_observed(met, self._first_observed, now)
        self._last_observed = policy.conditions_last_observed(met, self._last_observed, now)
        conditions = policy.conditions_in_window(self._last_observed, self._transition, now)
        if conditions != self._conditions:
            self._log.info(
                "Eviction manager: node conditions changed",
                conditions=",".join(conditions) or "none",
            )
            self._conditions = conditions
            self._on_change()
        actionable = policy.grace_period_met(self._first_observed, now)
        self._met = actionable
        self.last_observations = observations
        if self._local_storage:
            evicted = await self._local_storage_eviction(summary)
            if evicted:
                return evicted
        if not actionable:
            return []
        ordered = policy.by_eviction_priority(actionable)
        target = ordered[0]
        resource = target.resource
        self._log.info("Eviction manager: attempting to reclaim", resource_name=resource)
        self._node_events.record(
            "Warning", policy.THRESHOLD_MET_REASON, f"Attempting to reclaim {resource}"
        )
        if await self._reclaim_node_level(target):
            self._log.info(
                "Eviction manager: able to reduce resource pressure without evicting pods.",
                resource_name=resource,
            )
            return []
        self._log.info("Eviction manager: must evict pod(s) to reclaim", resource_name=resource)
        pods = self._active_pods()
        if not pods:
            self._log.error(
                "Eviction manager: eviction thresholds have been met, "
                "but no pods are active to evict"
            )
            return []
        ranked = policy.rank(pods, usage, resource)
        self._log.info(
            "Eviction manager: pods ranked for eviction",
            pods=",".join(f"{p.namespace}/{p.name}" for p in ranked),
        )
        for pod in ranked:
            grace = policy.IMMEDIATE_GRACE_PERIOD
            if not target.hard:
                grace = (
                    min(self._max_grace, termination_grace_period(pod))
                    if self._max_grace > 0
                    else termination_grace_period(pod)
                )
            message = policy.eviction_message(resource, pod, usage, actionable, observations)
            now_text = rfc3339(self._clock.now())
            condition = policy.disruption_condition(message, now_text, pod.metadata.generation)
            if await self._evict(pod, grace, message, condition):
                return [pod]
        self._log.info("Eviction manager: unable to evict any pods from the node")
        return []

    async def _local_storage_eviction(self, summary: Json) -> list[Pod]:
        """Every active pod over one of its local ephemeral storage limits, evicted at once
        (``localStorageEviction``)."""
        found = localstorage.violations(
            self._active_pods(),
            localstorage.storage_usage(summary),
            dedicated_image_fs=bool(self._dedicated_image_fs),
        )
        evicted = []
        for pod, message in found:
            if await self._evict(pod, policy.IMMEDIATE_GRACE_PERIOD, message, None):
                evicted.append(pod)
        return evicted

    async def _evict(
        self, pod: Pod, grace: int, message: str, condition: Mapping[str, str] | None
    ) -> bool:
        """The kubelet's ``evictPod``: never a critical pod; the Event, then the kill."""
        if policy.is_critical(pod):
            self._log.error("Eviction manager: cannot evict a critical pod", pod=pod.name)
            return False
        self._pod_events.record_for(pod_reference(pod), "Warning", policy.REASON, message)
        self._log.info(
            "Evicting pod", pod_namespace=pod.namespace, pod_name=pod.name, message=message
        )
        eviction = Eviction(
            reason=policy.REASON, message=message, grace_period=grace, condition=condition
        )
        await self._terminator.evict(pod, eviction)
        self.evicted.append(pod.uid)
        return True

    async def _reclaim_node_level(self, threshold: Threshold) -> bool:
        funcs = self._reclaim.get(threshold.signal, ())
        if not funcs:
            return False
        for reclaim in funcs:
            try:
                await reclaim()
            except Exception as e:
                self._log.info(
                    "Eviction manager: unexpected error when attempting to reduce resource "
                    "pressure",
                    resource_name=threshold.resource,
                    error=str(e),
                )
        summary = await self._summary()
        observations = policy.observe(summary, allocatable_memory=self._allocatable_memory())
        return not policy.thresholds_met(self._thresholds, observations, enforce_min_reclaim=True)
