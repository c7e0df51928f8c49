"""The kubelet's three pod sync functions, over the runtime manager and the status manager.

- ``sync_pod``: read the runtime state, report the status computed from it (the kubelet
  reports before it acts; a pod past its ``activeDeadlineSeconds`` is Failed
  ``DeadlineExceeded`` there, with a ``DeadlineExceeded`` Event, and so terminated; one
  that is not asks its worker to wake when the deadline falls), stop when the phase is
  terminal, else set up the pod's volumes (one
  that cannot be set up: a ``FailedMount`` Event, and until every volume has been set up once
  no container starts: the kubelet's ``WaitForAttachAndMount``), run the runtime manager's
  ``sync_pod`` with the containers' mounts, remember why containers failed to start (the
  reason cache behind ``CrashLoopBackOff``, ``ErrImagePull``, ...) and report the status again
  if anything moved;
- ``sync_terminating_pod``: kill the pod with its grace period, report the terminal status;
- ``sync_terminated_pod``: report the final status, unmount and remove the pod's volumes; for a
  deleted pod, ask the status manager to remove the API object;
- ``cleanup_pod``: the API object is gone: remove the pod's containers, sandboxes, logs and
  its directory under ``<rootDir>/pods``.

What the runtime manager does is recorded as it happens, as Events about the pod or one of its
containers (``Pulling``, ``Created``, ``Failed``, ``BackOff``, ``Killing``, ...), to ``events``.
The containers' environment inputs come from :mod:`.envsource`, the host's resolver settings
from :mod:`.resolvconf`, and an in-place resize is applied by :mod:`.resize`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from nodeagent.allocation import AllocationManager
from nodeagent.allocation.manager import DEFERRED_RETRY
from nodeagent.clock import Clock
from nodeagent.cm.policy import ResourceConfig
from nodeagent.credentialprovider import PullSecret
from nodeagent.events import DiscardEvents, ObjectEventSink, pod_reference
from nodeagent.gotext import rfc3339
from nodeagent.kuberuntime.manager import MIN_GRACE_PERIOD, RuntimeManager
from nodeagent.kuberuntime.results import ContainerFailure, PodEvent, SyncResult
from nodeagent.kuberuntime.runtime_state import ContainerState, PodRuntimeState
from nodeagent.log import Logger, get_logger
from nodeagent.objectmanager import ObjectManager
from nodeagent.pods import deadline
from nodeagent.pods.envsource import EnvSource
from nodeagent.pods.resize import RESIZE_ERROR_RETRY, RESIZE_POLL, PodResizer
from nodeagent.pods.workers import SyncOutcome
from nodeagent.podspec import Pod
from nodeagent.prober import NoProbes, PodProbes
from nodeagent.status import StatusManager, generate_pod_status, with_container_readiness
from nodeagent.status.conditions import TERMINAL
from nodeagent.volumemanager.manager import VolumeManager

SANDBOX_RETRY: Final = 10.0
FAILED_MOUNT: Final = "FailedMount"
NETWORK_NOT_READY: Final = "network is not ready"  # the kubelet's NetworkNotReadyErrorMsg
NETWORK_NOT_READY_REASON: Final = "NetworkNotReady"
NETWORK_RETRY: Final = 10.0  # the pod workers' back-off after a failed sync


class PullSecretSource(Protocol):
    async def for_pod(self, pod: Pod) -> Sequence[PullSecret]: ...


class PodCgroups(Protocol):
    """The container manager's part in a pod's life (``nodeagent.cm``)."""

    async def ensure_pod(self, pod: Pod, *, widen_only: bool = False) -> None: ...

    def applied(self, uid: str) -> ResourceConfig | None: ...

    def pod_config(self, pod: Pod) -> ResourceConfig: ...

    async def pod_memory_usage(self, uid: str) -> int | None: ...

    async def remove_pod(self, uid: str) -> None: ...

    async def clean_orphans(self, keep: Callable[[str], bool]) -> None: ...


@dataclass(frozen=True, slots=True)
class FinalStatus:
    """A status the agent imposes on a pod it stops (eviction): phase Failed, this reason
    and message, and ``condition`` (``DisruptionTarget``) kept among the conditions."""

    reason: str
    message: str
    condition: Mapping[str, Any] | None = None

    def apply(self, status: dict[str, Any]) -> dict[str, Any]:
        out = {**status, "phase": "Failed", "reason": self.reason, "message": self.message}
        if self.condition is not None:
            kind = self.condition["type"]
            kept = [c for c in status.get("conditions") or [] if c.get("type") != kind]
            old = next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)
            cond = dict(self.condition)
            if old is not None and old.get("status") == cond.get("status"):
                cond["lastTransitionTime"] = old.get("lastTransitionTime", "")
            out["conditions"] = [cond, *kept]
        return out


MIN_DEADLINE_WAKE: Final = 0.05


class PodSync:
    def __init__(
        self,
        *,
        runtime: RuntimeManager,
        status: StatusManager,
        clock: Clock,
        env: EnvSource,
        host_dns: Callable[[], Any],
        host_ips: Callable[[], tuple[str, ...]],
        events: ObjectEventSink | None = None,
        volumes: VolumeManager | None = None,
        probes: PodProbes | None = None,
        cgroups: PodCgroups | None = None,
        allocation: AllocationManager | None = None,
        objects: Sequence[ObjectManager] = (),
        log: Logger | None = None,
        pull_secrets: PullSecretSource | None = None,
        network_errors: Callable[[], Sequence[str]] = tuple,
    ) -> None:
        """``volumes``: the volume manager; without one, a container that mounts a volume
        fails with ``CreateContainerConfigError``. ``cgroups``: the container manager (pod
        cgroups created before the sandbox, removed after it). ``allocation``: the
        allocation manager (in-place resize); without one the spec's resources are used
        as they are and a resize is never applied. ``pull_secrets``: reads a pod's
        ``imagePullSecrets`` (none without it). ``objects``: the ConfigMap and Secret
        managers the pod is registered with while it runs (the kubelet's pod manager
        registers each pod: a new pod reads its objects fresh). ``network_errors``: the
        runtime's network errors (``RuntimeState.network_errors``): while there are any, a
        pod without ``hostNetwork`` is not started (the kubelet's "network is not ready")."""
        self._pull_secrets = pull_secrets
        self._network_errors = network_errors
        self._runtime = runtime
        self._allocation = allocation
        self._objects = objects
        self._cgroups = cgroups
        self._volumes = volumes
        self._probes: PodProbes = probes or NoProbes()
        self._status = status
        self._clock = clock
        self._env = env
        self._host_dns = host_dns
        self._host_ips = host_ips
        self._events: ObjectEventSink = events or DiscardEvents()
        self._log = log or get_logger("podsync")
        self._reasons: dict[str, dict[str, ContainerFailure]] = {}
        self._status_overrides: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self._final: dict[str, FinalStatus] = {}
        self._deadline_passed: set[str] = set()
        self._resizer = PodResizer(
            runtime=runtime, allocation=allocation, cgroups=cgroups, log=self._log
        )

    def _pull_secrets_loader(self, pod: Pod) -> Callable[[], Awaitable[Sequence[PullSecret]]]:
        source = self._pull_secrets

        async def load() -> Sequence[PullSecret]:
            return await source.for_pod(pod) if source is not None else ()

        return load

    def override_status(self, uid: str, mutate: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Apply ``mutate`` to every status computed for the pod from now on (the kubelet's
        ``PodStatusFunc`` of a kill: node shutdown's reason and ``DisruptionTarget``)."""
        self._status_overrides[uid] = mutate

    def set_final_status(self, uid: str, final: FinalStatus) -> None:
        """From now on the pod's status is Failed with ``final``'s reason, message and
        condition (an eviction: the kubelet's ``TerminatePodAbnormally`` status function)."""
        self._final[uid] = final

    def _past_deadline(self, pod: Pod, previous: dict[str, Any], now: dt.datetime) -> bool:
        """The active deadline handler's ``ShouldEvict``: once a pod that has not finished
        passes its deadline, it stays failed; the ``DeadlineExceeded`` Event is recorded
        once."""
        if pod.uid in self._deadline_passed:
            return True
        if TERMINAL & {previous.get("phase"), pod.status.get("phase")}:
            return False
        if not deadline.exceeded(pod, deadline.start_time(previous, pod), now):
            return False
        self._deadline_passed.add(pod.uid)
        self._log.info(
            "Pod exceeded its active deadline",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            active_deadline_seconds=pod.spec.active_deadline_seconds,
        )
        self._events.record_for(pod_reference(pod), "Normal", deadline.REASON, deadline.MESSAGE)
        return True

    def _deadline_wake(self, pod: Pod, status: dict[str, Any]) -> float | None:
        """Seconds until the pod's active deadline falls (its worker syncs then)."""
        left = deadline.seconds_left(pod, status.get("startTime"), self._clock.now())
        return None if left is None else max(left, MIN_DEADLINE_WAKE)

    def _report(self, pod: Pod, state: PodRuntimeState, *, terminal: bool) -> dict[str, Any]:
        previous = self._status.last_status(pod.uid) or pod.status
        now = self._clock.now()
        past_deadline = self._past_deadline(pod, previous, now)
        status = generate_pod_status(
            pod,
            state,
            previous=previous,
            reasons=self._reasons.get(pod.uid, {}),
            runtime_name=self._runtime.settings.runtime_name,
            host_ips=self._host_ips(),
            now=rfc3339(now),
            terminal=terminal,
            probes=self._probes,
            **self._resizer.resize_view(pod),
            evict=(deadline.REASON, deadline.MESSAGE) if past_deadline else None,
        )
        mutate = self._status_overrides.get(pod.uid)
        if mutate is not None:
            status = mutate(status)
        final = self._final.get(pod.uid)
        if final is not None:
            status = final.apply(status)
        self._status.set_status(pod, status)
        return status

    def _record(self, pod: Pod, result: SyncResult) -> None:
        reasons = self._reasons.setdefault(pod.uid, {})
        for name in result.started:
            reasons.pop(name, None)
        reasons.update(result.failures)

    def _on_event(self, pod: Pod) -> Callable[[PodEvent], None]:
        """Log and record the runtime manager's events about ``pod`` as they happen."""
        log = self._log.bind(pod_namespace=pod.namespace, pod_name=pod.name, pod_uid=pod.uid)

        def post(e: PodEvent) -> None:
            fields = {"container_name": e.container} if e.container else {}
            (log.warning if e.type == "Warning" else log.v(2).info)(
                e.message, event_type=e.type, reason=e.reason, **fields
            )
            self._events.record_for(pod_reference(pod, e.container), e.type, e.reason, e.message)

        return post

    async def sync_pod(self, pod: Pod) -> SyncOutcome:
        self._probes.add_pod(pod)
        if self._allocation is not None:
            # From here on the pod is as allocated: a resize the node has not accepted
            # (PodResizePending) changes nothing that runs.
            pod = await self._allocation.allocate(pod)
        # A periodic sync of a pod nothing happened to reuses the state read last (the PLEG
        # relisted it unchanged since); every sync after an action reads it again.
        state = await self._runtime.pod_state(pod.uid, reuse=True)
        view = self._resizer.resize_view(pod)
        reported = self._report(pod, state, terminal=False)
        if reported["phase"] in TERMINAL:
            return SyncOutcome(terminal=True)
        wake_in = self._deadline_wake(pod, reported)
        # Only a pod on the host's network may start while the runtime's network is not ready
        # (a CNI DaemonSet's pod is one), as in the kubelet's SyncPod.
        if not pod.spec.host_network and (network := self._network_errors()):
            message = f"{NETWORK_NOT_READY}: {'; '.join(network)}"
            self._events.record_for(
                pod_reference(pod), "Warning", NETWORK_NOT_READY_REASON, message
            )
            self._log.error(
                "Error syncing pod, skipping",
                pod_namespace=pod.namespace,
                pod_name=pod.name,
                pod_uid=pod.uid,
                error=message,
            )
            return SyncOutcome(retry_in=NETWORK_RETRY, wake_in=wake_in)
        for manager in self._objects:
            manager.register_pod(pod)
        if self._cgroups is not None:
            await self._cgroups.ensure_pod(pod, widen_only=True)
        volumes = None
        if self._volumes is not None:
            volumes = await self._volumes.set_up(pod)
            for message in volumes.events.values():
                self._events.record_for(pod_reference(pod), "Warning", FAILED_MOUNT, message)
            if not volumes.ready:
                return SyncOutcome(retry_in=volumes.retry_in, wake_in=wake_in)
        restarts, resized = await self._resizer.resize(pod, state)
        result = await self._runtime.sync_pod(
            pod,
            state,
            # fetched (ConfigMaps, Secrets, Services) only when a container is to start
            inputs=lambda: self._env.inputs(pod),
            host_dns=await self._host_dns(),
            on_event=self._on_event(pod),
            volumes=volumes,
            startup=self._probes.startup_results(pod.uid),
            failed_probes=self._probes.failed_probes(pod.uid),
            resize_restarts=restarts,
            pull_secrets=self._pull_secrets_loader(pod),
        )
        self._record(pod, result)
        if self._allocation is not None:
            allocation = self._allocation.allocation(pod.uid)
            started = {n: allocation[n] for n in result.started if n in allocation}
            await self._allocation.set_actuated(pod.uid, started)
            if self._allocation.deferred(pod.uid):
                result.retry_after(DEFERRED_RETRY)
        if self._cgroups is not None and resized:
            await self._cgroups.ensure_pod(pod)
        alloc = self._allocation
        if alloc is not None and alloc.in_progress(pod.uid):
            if not resized:  # refused (PodResizeInProgress Error): try again later
                result.retry_after(RESIZE_ERROR_RETRY)
            elif not await self._resizer.finish_resize(pod):  # the runtime has not caught up yet
                result.retry_after(RESIZE_POLL)
        resize_moved = self._resizer.resize_view(pod) != view
        if volumes is not None and volumes.retry_in is not None:
            result.retry_after(volumes.retry_in)
        if result.sandbox_error is not None:
            result.retry_after(SANDBOX_RETRY)
        if (
            result.started
            or result.failures
            or result.sandbox_error
            or result.events
            or resize_moved
        ):
            state = await self._runtime.pod_state(pod.uid)
            if self._report(pod, state, terminal=False)["phase"] in TERMINAL:
                return SyncOutcome(terminal=True)
        return SyncOutcome(retry_in=result.retry_in, wake_in=wake_in)

    def update_readiness(self, pod: Pod) -> None:
        """A readiness result of ``pod`` changed: put it on the pod's last status now (the
        kubelet's ``SetContainerReadiness``), not only at the worker's next sync: a worker
        killing a terminating pod is busy for the whole grace period, while its readiness
        probes still run and a failure must take the pod out of its Services' endpoints."""
        last = self._status.last_status(pod.uid)
        results = self._probes.readiness_results(pod.uid)
        if last is None or not results:
            return
        updated = with_container_readiness(pod, last, results, now=rfc3339(self._clock.now()))
        if updated is not None:
            self._status.set_status(pod, updated)

    async def sync_terminating_pod(self, pod: Pod, grace: int) -> None:
        self._probes.stop_liveness_and_startup(pod)
        state = await self._runtime.pod_state(pod.uid)
        if pod.uid in self._final:
            # the kubelet's SyncTerminatingPod: the imposed status (Failed, Evicted) goes out
            # before the containers are killed, so it survives an agent that dies meanwhile
            self._report(pod, state, terminal=False)
        running = [c.name for c in state.containers if c.state is ContainerState.RUNNING]
        if running:
            self._log.info(
                "Killing pod",
                pod_namespace=pod.namespace,
                pod_name=pod.name,
                pod_uid=pod.uid,
                grace_period=grace,
                containers=",".join(running),
            )
        result = SyncResult(on_event=self._on_event(pod))
        await self._runtime.kill_pod(pod, state, grace=grace, result=result)
        state = await self._runtime.pod_state(pod.uid)
        self._report(pod, state, terminal=True)

    async def sync_terminated_pod(self, pod: Pod) -> None:
        # after a kill, the state its last read kept (settled: reused until the next action)
        state = await self._runtime.pod_state(pod.uid, reuse=True)
        self._report(pod, state, terminal=True)
        await self.tear_down_volumes(pod.uid, keep_pod_dir=True)
        await self._remove_cgroup(pod.uid)
        self._probes.remove_pod(pod.uid)
        if pod.deleted:
            self._status.delete_pod(pod)

    async def cleanup_pod(self, pod: Pod) -> None:
        await self.remove_runtime_pod(pod.uid)
        await self.tear_down_volumes(pod.uid)
        await self._remove_cgroup(pod.uid)
        self._probes.remove_pod(pod.uid)
        if self._allocation is not None:
            await self._allocation.remove_pod(pod.uid)
        self._reasons.pop(pod.uid, None)
        self._status_overrides.pop(pod.uid, None)
        self._final.pop(pod.uid, None)
        self._deadline_passed.discard(pod.uid)
        self._status.forget(pod.uid)

    async def remove_runtime_pod(self, uid: str) -> None:
        """Kill (with the grace recorded on its containers) and remove a pod the API no
        longer has."""
        state = await self._runtime.pod_state(uid, reuse=True)
        if state.empty:
            return
        running = [c for c in state.containers if c.state is ContainerState.RUNNING]
        if running or any(s.ready for s in state.sandboxes):
            recorded = [c.grace_period for c in running if c.grace_period is not None]
            grace = max(recorded, default=MIN_GRACE_PERIOD)
            self._log.info(
                "Killing orphaned pod",
                pod_namespace=state.namespace,
                pod_name=state.name,
                pod_uid=uid,
                grace_period=grace,
            )
            await self._runtime.kill_pod(None, state, grace=grace)
            state = await self._runtime.pod_state(uid)
        await self._runtime.remove_pod(state)
        self._runtime.forget(uid)
        await self.tear_down_volumes(uid)
        await self._remove_cgroup(uid)

    async def _remove_cgroup(self, uid: str) -> None:
        """The pod's cgroup goes once its containers are stopped (the kubelet's
        ``SyncTerminatedPod``); a failure is logged and left to housekeeping."""
        if self._cgroups is None:
            return
        try:
            await self._cgroups.remove_pod(uid)
        except Exception as e:
            self._log.error("Failed to remove the pod's cgroup", pod_uid=uid, error=str(e))

    async def tear_down_volumes(self, uid: str, *, keep_pod_dir: bool = False) -> None:
        """Unmount and remove the pod's volumes (its containers are gone), and its directory
        unless ``keep_pod_dir`` (the pod is still in the API); unregister the pod from the
        ConfigMap and Secret managers."""
        for manager in self._objects:
            manager.unregister_pod(uid)
        if self._volumes is not None:
            await self._volumes.tear_down(uid, keep_pod_dir=keep_pod_dir)

    async def clean_orphaned_pod_dirs(self, keep: Callable[[str], bool]) -> None:
        """Tear down the directories of pods ``keep`` rejects (housekeeping)."""
        if self._volumes is not None:
            await self._volumes.clean_orphans(keep)
        if self._cgroups is not None:
            await self._cgroups.clean_orphans(keep)
        if self._allocation is not None:
            await self._allocation.remove_orphans(keep)
