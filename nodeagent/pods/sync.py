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
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from nodeagent.allocation import AllocationManager
from nodeagent.allocation.manager import DEFERRED_RETRY
from nodeagent.allocation.policy import (
    MEMORY_USAGE_MESSAGE,
    Resources,
    resizable_containers,
    resize_restarts,
    same_resources,
)
from nodeagent.apiserver import Api, NotFound, Resource
from nodeagent.clock import Clock
from nodeagent.cm.policy import ResourceConfig
from nodeagent.events import DiscardEvents, ObjectEventSink, pod_reference
from nodeagent.kuberuntime.dns import parse_resolv_conf
from nodeagent.kuberuntime.env import (
    ContainerConfigError,
    EnvInputs,
    referenced_objects,
    service_env,
)
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.manager import MIN_GRACE_PERIOD, RuntimeManager
from nodeagent.kuberuntime.podsettings import ResolvConf
from nodeagent.kuberuntime.results import ContainerFailure, PodEvent, SyncResult
from nodeagent.kuberuntime.runtime_state import ContainerState, PodRuntimeState
from nodeagent.log import Logger, get_logger
from nodeagent.pods import deadline
from nodeagent.pods.workers import SyncOutcome
from nodeagent.podspec import Pod
from nodeagent.prober import NoProbes, PodProbes
from nodeagent.quantity import value
from nodeagent.status import StatusManager, generate_pod_status, with_container_readiness
from nodeagent.status.conditions import TERMINAL
from nodeagent.volumemanager.layout import setup_failed_message
from nodeagent.volumemanager.manager import VolumeManager


@dataclass(frozen=True, slots=True)
class _AllNamespaces(Resource):
    """Pods across namespaces: ``/api/v1/pods`` for list and watch. (``Resource.path``
    refuses a namespaced collection without a namespace; drop this once it allows it.)"""

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        if namespace is None and name is None and subresource is None:
            return f"/api/{self.version}/{self.plural}"
        return Resource.path(self, namespace=namespace, name=name, subresource=subresource)


ALL_PODS: Final = _AllNamespaces("", "v1", "pods", "Pod", namespaced=True)
ALL_SERVICES: Final = Resource("", "v1", "services", "Service", namespaced=False)
"""Every namespace's Services: the source of the containers' ``*_SERVICE_HOST`` variables."""
CONFIGMAPS: Final = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
SECRETS: Final = Resource("", "v1", "secrets", "Secret", namespaced=True)
SANDBOX_RETRY: Final = 10.0
SERVICES_FIRST_LIST_WAIT: Final = 5.0
RESOLV_CONF_TTL: Final = 10.0
FAILED_MOUNT: Final = "FailedMount"
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


class EnvSource(Protocol):
    async def inputs(self, pod: Pod) -> EnvInputs: ...


class PodCgroups(Protocol):
    """The container manager's part in a pod's life (``nodeagent.cm``)."""

    async def ensure_pod(self, pod: Pod, *, widen_only: bool = False) -> None: ...

    def applied(self, uid: str) -> ResourceConfig | None: ...

    def pod_config(self, pod: Pod) -> ResourceConfig: ...

    async def pod_memory_usage(self, uid: str) -> int | None: ...

    async def remove_pod(self, uid: str) -> None: ...

    async def clean_orphans(self, keep: Callable[[str], bool]) -> None: ...


class ApiEnvSource:
    """ConfigMaps and Secrets a pod's environment reads, fetched from the API when needed;
    Services from a cache; the node's IPs and allocatable from callables."""

    def __init__(
        self,
        *,
        api: Api,
        host_ips: Callable[[], tuple[str, ...]],
        allocatable: Callable[[], Mapping[str, str]],
        services: Callable[[], Sequence[Mapping[str, Any]]] = list,
        services_synced: Callable[[], bool] = lambda: True,
        wait_services: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._api = api
        self._host_ips = host_ips
        self._allocatable = allocatable
        self._services = services
        self._services_synced = services_synced
        self._wait_services = wait_services

    async def _data(self, res: Resource, namespace: str, name: str) -> dict[str, str] | None:
        try:
            obj = await self._api.get(res, name, namespace=namespace)
        except NotFound:
            return None
        data = {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
        if res is SECRETS:
            try:
                data = {k: base64.b64decode(v).decode() for k, v in data.items()}
            except (binascii.Error, UnicodeDecodeError):
                data = {}
        return data

    async def inputs(self, pod: Pod) -> EnvInputs:
        config_map_names, secret_names = referenced_objects(pod)
        config_maps = {n: await self._data(CONFIGMAPS, pod.namespace, n) for n in config_map_names}
        secrets = {n: await self._data(SECRETS, pod.namespace, n) for n in secret_names}
        links = pod.spec.enable_service_links is not False
        # As the kubelet: a static pod never waits for the Service list (it must run while
        # the API server is unreachable, e.g. the API server's own static pod).
        must_sync = not pod.is_static
        if must_sync and not self._services_synced() and self._wait_services is not None:
            # Just after start the first Service list is usually a moment away: wait for it
            # briefly rather than refuse the container (and retry it 10 s later).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wait_services(), SERVICES_FIRST_LIST_WAIT)
        return EnvInputs(
            host_ips=self._host_ips(),
            node_allocatable=dict(self._allocatable()),
            service_env=service_env(
                self._services(), namespace=pod.namespace, enable_service_links=links
            ),
            services_synced=self._services_synced() or not must_sync,
            config_maps=config_maps,
            secrets=secrets,
        )


class HostResolvConf:
    """The host's resolver settings, re-read at most every 10 seconds."""

    def __init__(self, *, path: str) -> None:
        self._path = path
        self._value: ResolvConf | None = None
        self._read_at = 0.0

    def _read(self) -> ResolvConf:
        try:
            with open(self._path) as f:
                return parse_resolv_conf(f.read())
        except OSError:
            return ResolvConf()

    async def __call__(self) -> ResolvConf:
        if not self._path:
            return ResolvConf()
        now = asyncio.get_running_loop().time()
        if self._value is None or now - self._read_at > RESOLV_CONF_TTL:
            self._value = await asyncio.to_thread(self._read)
            self._read_at = now
        return self._value


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


RFC3339: Final = "%Y-%m-%dT%H:%M:%SZ"
MIN_DEADLINE_WAKE: Final = 0.05


def rfc3339(clock: Clock) -> str:
    return clock.now().strftime(RFC3339)


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
        log: Logger | None = None,
    ) -> None:
        """``volumes``: the volume manager; without one, a container that mounts a volume
        fails with ``CreateContainerConfigError``. ``cgroups``: the container manager (pod
        cgroups created before the sandbox, removed after it). ``allocation``: the
        allocation manager (in-place resize); without one the spec's resources are used
        as they are and a resize is never applied."""
        self._runtime = runtime
        self._allocation = allocation
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
            now=now.strftime(RFC3339),
            terminal=terminal,
            probes=self._probes,
            **self._resize_view(pod),
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

    def _resize_view(self, pod: Pod) -> dict[str, Any]:
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

    async def sync_pod(self, pod: Pod) -> SyncOutcome:
        self._probes.add_pod(pod)
        if self._allocation is not None:
            # From here on the pod is as allocated: a resize the node has not accepted
            # (PodResizePending) changes nothing that runs.
            pod = await self._allocation.allocate(pod)
        # A periodic sync of a pod nothing happened to reuses the state read last (the PLEG
        # relisted it unchanged since); every sync after an action reads it again.
        state = await self._runtime.pod_state(pod.uid, reuse=True)
        view = self._resize_view(pod)
        reported = self._report(pod, state, terminal=False)
        if reported["phase"] in TERMINAL:
            return SyncOutcome(terminal=True)
        wake_in = self._deadline_wake(pod, reported)
        if self._cgroups is not None:
            await self._cgroups.ensure_pod(pod, widen_only=True)
        volumes = None
        if self._volumes is not None:
            volumes = await self._volumes.set_up(pod)
            for name, why in volumes.failures.items():
                message = setup_failed_message(name, why)
                self._events.record_for(pod_reference(pod), "Warning", FAILED_MOUNT, message)
            if not volumes.ready:
                return SyncOutcome(retry_in=volumes.retry_in, wake_in=wake_in)
        restarts, resized = await self._resize(pod, state)
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
            elif not await self._finish_resize(pod):  # the runtime has not caught up yet
                result.retry_after(RESIZE_POLL)
        resize_moved = self._resize_view(pod) != view
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

    async def _resize(self, pod: Pod, state: PodRuntimeState) -> tuple[dict[str, str], bool]:
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

    async def _finish_resize(self, pod: Pod) -> bool:
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

    def update_readiness(self, pod: Pod) -> None:
        """A readiness result of ``pod`` changed: put it on the pod's last status now (the
        kubelet's ``SetContainerReadiness``), not only at the worker's next sync: a worker
        killing a terminating pod is busy for the whole grace period, while its readiness
        probes still run and a failure must take the pod out of its Services' endpoints."""
        last = self._status.last_status(pod.uid)
        results = self._probes.readiness_results(pod.uid)
        if last is None or not results:
            return
        updated = with_container_readiness(pod, last, results, now=rfc3339(self._clock))
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
        state = await self._runtime.pod_state(pod.uid)
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
        state = await self._runtime.pod_state(uid)
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
        unless ``keep_pod_dir`` (the pod is still in the API)."""
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
