"""The pods manager: the kubelet's sync loop over the pods bound to this node.

Producers put typed events on one queue and :meth:`SyncLoop.sync_loop_iteration` dispatches
them (``match``, one short arm each):

- :class:`PodsChanged` — the pod source (a watch on ``spec.nodeName=<node>`` and the static
  pod manifests; mirror pods are skipped, their static pod runs) changed: new
  pods go through admission and get a worker, updated ones (spec, labels, a deletion
  timestamp) go to their worker, vanished ones are terminated and cleaned up; a pod whose
  status alone moved is handed to its worker without a sync, unless its Ready condition no
  longer matches its readiness gates' conditions (the kubelet's ``HandlePodReconcile``), and
  a condition the agent reports that another changed (the node lifecycle controller's Ready
  False on a node it lost) makes the status manager send the agent's status again;
- :class:`PlegEvent` — a container of a known pod changed in the runtime: sync it now;
- :class:`ProbeResult` — a liveness, readiness or startup result of a pod's container
  changed (the prober manager): its readiness goes on its last status at once (the kubelet's
  ``SetContainerReadiness``: a terminating pod's worker is busy killing it for the whole
  grace period, and its readiness probes still run), and it is synced, which regenerates its
  status and kills a container whose liveness or startup probe failed;
- :class:`Housekeeping` — every 2s: runtime pods no source knows (deleted while the agent was
  down) are killed and removed, once the source and the PLEG have both synced once; then the
  pod directories (volumes) of pods neither a source, a worker nor the runtime knows are
  unmounted and removed.

``run()`` owns one TaskGroup with the PLEG, the pod workers, the status manager, the source
watcher, the housekeeping ticker and orphan removals. ``heartbeat`` is the loop time of the
last iteration (the kubelet's ``syncLoopMonitor``) for a health endpoint.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import msgspec

from nodeagent.clock import Clock
from nodeagent.events import DiscardEvents, ObjectEventSink, ObjectReference, pod_reference
from nodeagent.gotext import rfc3339
from nodeagent.kuberuntime import runtime_errors
from nodeagent.lifecycle.admission import ADMITTED, AdmitResult, admit_pod, admit_sysctls
from nodeagent.log import Logger, get_logger
from nodeagent.pods import metrics
from nodeagent.pods.activepods import is_inactive
from nodeagent.pods.pleg import GenericPleg, PodLifecycleEvent
from nodeagent.pods.sync import PodSync
from nodeagent.pods.workers import TERMINAL_PHASES, PodWorkers
from nodeagent.podspec import Pod, decode_checked_pod
from nodeagent.staticpods.stores import Store
from nodeagent.status import StatusManager, rejected_status
from nodeagent.status.conditions import needs_readiness_reconcile
from nodeagent.sysctl import SAFE_SYSCTLS, Allowlist

HOUSEKEEPING_PERIOD: Final = 2.0
FAILED_VALIDATION: Final = "FailedValidation"
UNREADABLE_POD: Final = "Pod cannot run on this node, its spec does not pass the node's checks"
SHUTDOWN_REASON: Final = "NodeShutdown"
SHUTDOWN_MESSAGE: Final = "Pod was rejected as the node is shutting down."
ALL_SAFE_SYSCTLS: Final = Allowlist.build(name for name, _ in SAFE_SYSCTLS)


class PodStore(Store, Protocol):
    """What the pod source offers: a ``WatchCache`` of Pods with ``spec.nodeName=<node>``, or
    ``staticpods.PodSources`` merging it with the static pod file source. ``wait_synced``
    returns once there are pods to run (any source has listed: static pods run while the API
    server is unreachable); ``synced`` — which gates housekeeping — holds once every source
    has listed, so no pod is taken for an orphan before its source has spoken."""


@dataclass(frozen=True, slots=True)
class PodsChanged:
    pass


@dataclass(frozen=True, slots=True)
class PlegEvent:
    event: PodLifecycleEvent


@dataclass(frozen=True, slots=True)
class ProbeResult:
    uid: str


@dataclass(frozen=True, slots=True)
class Housekeeping:
    pass


SyncEvent = PodsChanged | PlegEvent | ProbeResult | Housekeeping


class SyncEvents:
    """The sync loop's one queue. Create it first and give ``pleg_event`` to the PLEG as its
    ``on_event``."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[SyncEvent] = asyncio.Queue()

    def put(self, event: SyncEvent) -> None:
        self.queue.put_nowait(event)

    def pleg_event(self, event: PodLifecycleEvent) -> None:
        self.queue.put_nowait(PlegEvent(event))

    def probe_result(self, uid: str) -> None:
        """The prober's ``on_update``."""
        self.queue.put_nowait(ProbeResult(uid))


def node_allocatable(node: Mapping[str, Any] | None) -> Mapping[str, str] | None:
    if not node:
        return None
    allocatable = (node.get("status") or {}).get("allocatable")
    return dict(allocatable) if allocatable else None


def node_internal_ips(node: Mapping[str, Any] | None, fallback: tuple[str, ...]) -> tuple[str, ...]:
    addresses = ((node or {}).get("status") or {}).get("addresses") or []
    ips = tuple(a["address"] for a in addresses if a.get("type") == "InternalIP")
    return ips or fallback


def _moved(cache: Any, *, since: str | None) -> bool:
    return bool(cache.resource_version != since)


def _differ(old: Pod | None, new: Pod) -> bool:
    """What the kubelet's pod config calls a semantic change: spec, labels, annotations,
    deletion. Status and resourceVersion do not count."""
    if old is None:
        return True
    a, b = old.metadata, new.metadata
    return (
        old.spec != new.spec
        or a.labels != b.labels
        or a.annotations != b.annotations
        or a.deletion_timestamp != b.deletion_timestamp
        or a.deletion_grace_period_seconds != b.deletion_grace_period_seconds
    )


class SyncLoop:
    def __init__(
        self,
        *,
        node_name: str,
        events: SyncEvents,
        source: PodStore,
        workers: PodWorkers,
        pleg: GenericPleg,
        podsync: PodSync,
        status: StatusManager,
        clock: Clock,
        allocatable: Callable[[], Mapping[str, str] | None] = lambda: None,
        housekeeping_period: float = HOUSEKEEPING_PERIOD,
        event_sink: ObjectEventSink | None = None,
        shutting_down: Callable[[], bool] = lambda: False,
        allocated: Callable[[list[Pod]], list[Pod]] = list,
        sysctls: Allowlist = ALL_SAFE_SYSCTLS,
        node: Callable[[], Mapping[str, Any] | None] = lambda: None,
        comparison_operators: bool = False,
        on_admitted: Callable[[Pod], None] = lambda _pod: None,
        load_allocations: Callable[[], Awaitable[None]] | None = None,
        log: Logger | None = None,
    ) -> None:
        """``shutting_down``: the node shutdown manager's ``shutdown_in_progress``; while it
        holds, new pods are refused (``NodeShutdown``). ``allocated``: the admitted pods as
        allocated (a resize the node has not accepted does not count against admission).
        ``sysctls``: the sysctls pods may set (``sysctl.node_allowlist``); others are
        ``SysctlForbidden``. ``node``: the Node object, for the general predicates (node
        affinity, host ports, ``NoExecute`` taints); ``comparison_operators``: the
        ``TaintTolerationComparisonOperators`` gate. ``on_admitted``: told of each pod
        admission lets in (the allocation manager records its allocation then);
        ``load_allocations``: awaited before the first pod is admitted (the allocation
        checkpoint, so a restarted agent admits its pods with what it had allocated)."""
        self._sysctls = sysctls
        self._on_admitted = on_admitted
        self._load_allocations = load_allocations
        self._node_object = node
        self._comparison_operators = comparison_operators
        self._allocated = allocated
        self._node = node_name
        self._shutting_down = shutting_down
        self._source = source
        self._workers = workers
        self._pleg = pleg
        self._podsync = podsync
        self._status = status
        self._clock = clock
        self._allocatable = allocatable
        self._period = housekeeping_period
        self._event_sink: ObjectEventSink = event_sink or DiscardEvents()
        self._log = log or get_logger("pods")
        self._events = events
        self._known: dict[str, Pod] = {}
        self._mirrors = 0  # mirror pods in the source, at the last pass
        self._rejected: set[str] = set()
        self._undecodable: set[str] = set()
        # uid -> (resourceVersion, decoded pod): every status patch comes back as a watch
        # event, and a burst of n pods would otherwise decode all n pods n times over
        self._decoded: dict[str, tuple[str, Pod | None]] = {}
        self._orphans: dict[str, asyncio.Task[None]] = {}
        self._dir_cleanup: asyncio.Task[None] | None = None
        self._leaving: dict[str, Pod] = {}  # removed static pods, until their worker is done
        self._successor_waits = False
        self._tg: asyncio.TaskGroup | None = None
        self.heartbeat: float | None = None
        # extra admit handlers run before the resource fit (the eviction manager's): each
        # returns None to admit, else a refusal with the kubelet's reason and message
        self.admit_handlers: list[Callable[[Pod], AdmitResult | None]] = []

    @property
    def name(self) -> str:
        return "pods"

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            tg.create_task(self._status.run(), name="pods:status")
            tg.create_task(self._workers.run(), name="pods:workers")
            tg.create_task(self._pleg.run(), name="pods:pleg")
            tg.create_task(self._watch_source(), name="pods:source")
            tg.create_task(self._tick(), name="pods:housekeeping")
            while True:
                event = await self._events.queue.get()
                await self.sync_loop_iteration(event)
                self.heartbeat = loop.time()

    async def sync_loop_iteration(self, event: SyncEvent) -> None:
        match event:
            case PodsChanged():
                self._reconcile_source()
            case PlegEvent(event=e):
                self._workers.sync(e.uid)
            case ProbeResult(uid=uid):
                pod = self._known.get(uid)
                if pod is not None:
                    self._podsync.update_readiness(pod)  # not held behind a busy worker
                self._workers.sync(uid)
            case Housekeeping():
                self._housekeeping()

    async def _watch_source(self) -> None:
        if self._load_allocations is not None:
            await self._load_allocations()
        await self._source.wait_synced()
        seen: str | None = None
        while True:
            await self._source.wait_for(functools.partial(_moved, since=seen))
            seen = self._source.resource_version
            self._events.put(PodsChanged())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            self._events.put(Housekeeping())

    def _decode(self, obj: dict[str, Any]) -> Pod | None:
        try:
            return decode_checked_pod(obj)
        except msgspec.ValidationError as e:
            meta = obj.get("metadata") or {}
            uid = str(meta.get("uid", ""))
            if uid not in self._undecodable:
                self._undecodable.add(uid)
                self._log.error(
                    "Cannot read pod",
                    pod_namespace=meta.get("namespace", ""),
                    pod_name=meta.get("name", ""),
                    error=str(e),
                )
                # visible to `kubectl describe pod`, not only in the node's journal
                ref = ObjectReference(
                    kind="Pod",
                    name=str(meta.get("name", "")),
                    namespace=str(meta.get("namespace", "")),
                    uid=uid,
                    api_version="v1",
                    resource_version=str(meta.get("resourceVersion", "")),
                )
                self._event_sink.record_for(
                    ref, "Warning", FAILED_VALIDATION, f"{UNREADABLE_POD}: {e}"[:1024]
                )
            return None

    def _decode_cached(
        self, obj: dict[str, Any], decoded: dict[str, tuple[str, Pod | None]]
    ) -> Pod | None:
        """``_decode`` once per resourceVersion (objects without one, as static pods from
        files, are decoded every time); ``decoded`` collects this pass's entries."""
        meta = obj.get("metadata") or {}
        uid, rv = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
        cached = self._decoded.get(uid)
        pod = cached[1] if rv and cached is not None and cached[0] == rv else self._decode(obj)
        if rv:
            decoded[uid] = (rv, pod)
        return pod

    def _reconcile_source(self) -> None:
        current: dict[str, Pod] = {}
        decoded: dict[str, tuple[str, Pod | None]] = {}
        mirrors = 0
        for obj in self._source.items():
            pod = self._decode_cached(obj, decoded)
            if pod is None or pod.spec.node_name != self._node:
                continue
            if pod.is_mirror:
                mirrors += 1
                continue
            current[pod.uid] = pod
        self._mirrors = mirrors
        self._decoded = decoded
        new: list[Pod] = []
        for uid, pod in current.items():
            if uid in self._rejected:
                continue
            if not self._workers.known(uid):
                new.append(pod)
            elif not _differ(self._known.get(uid), pod):
                # only the status moved: our own patches, or conditions another
                # component wrote (readiness gates), which the worker reads next time
                self._workers.refresh(pod)
                self._status.reconcile(pod)  # Ready set False by the node controller
                if needs_readiness_reconcile(pod):
                    self._workers.sync(uid)  # a gate moved: Ready now, not at resync
            else:
                self._workers.update_pod(pod)
        # the kubelet admits a batch oldest first (HandlePodAdditions), each against the
        # pods admitted before it
        for pod in sorted(new, key=lambda p: p.metadata.creation_timestamp or ""):
            if self._waits_for_predecessor(pod) or not self._admit(pod, current):
                continue
            self._workers.update_pod(pod)
        for uid, last in self._known.items():
            if uid not in current:
                self._workers.remove_pod(uid, last)
                self._rejected.discard(uid)
                if last.is_static:
                    self._leaving[uid] = last
        self._known = current

    def _waits_for_predecessor(self, pod: Pod) -> bool:
        """A static pod whose manifest changed starts once the pod it replaces (same name,
        old UID) has terminated — never both at once, as in the kubelet; housekeeping looks
        again."""
        if not pod.is_static:
            return False
        self._leaving = {u: p for u, p in self._leaving.items() if self._workers.known(u)}
        for uid, other in (*self._known.items(), *self._leaving.items()):
            same = other.is_static and (other.namespace, other.name) == (pod.namespace, pod.name)
            if uid != pod.uid and same and self._workers.known(uid):
                self._successor_waits = True
                return True
        return False

    def active_pods(self) -> list[Pod]:
        """The kubelet's ``GetActivePods``: what admission and resize admission count."""
        return self._active_pods(self._known, but="")

    def _active_pods(self, current: Mapping[str, Pod], but: str) -> list[Pod]:
        """The kubelet's ``GetActivePods`` (see ``activepods``) over the pods the sources
        have now, without the pod ``but``."""
        out = []
        for uid, pod in current.items():
            if uid == but:
                continue
            reported = self._status.last_status(uid)
            phase = reported.get("phase") if reported is not None else None
            if not is_inactive(pod, self._workers.termination(uid), phase):
                out.append(pod)
        return out

    def _fit(self, pod: Pod, current: Mapping[str, Pod]) -> AdmitResult:
        """The predicate admit handler over the active pods, as allocated."""
        allocatable = self._allocatable()
        if allocatable is None:
            return ADMITTED  # no Node yet (standalone): nothing to fit against
        return admit_pod(
            self._allocated([pod])[0],
            allocatable=allocatable,
            admitted=self._allocated(self._active_pods(current, but=pod.uid)),
            node=self._node_object(),
            comparison_operators=self._comparison_operators,
        )

    def _admit(self, pod: Pod, current: Mapping[str, Pod]) -> bool:
        if pod.deleted or pod.status.get("phase") in TERMINAL_PHASES:
            return True
        result: AdmitResult | None = None
        if self._shutting_down():
            result = AdmitResult(False, SHUTDOWN_REASON, SHUTDOWN_MESSAGE)
        else:
            for handler in self.admit_handlers:
                if (result := handler(pod)) is not None:
                    break
            else:  # after the eviction manager's, as the kubelet orders its handlers
                result = admit_sysctls(pod, self._sysctls)
        if result is None:
            result = self._fit(pod, current)
        if result.admit:
            self._on_admitted(pod)
            return True
        self._rejected.add(pod.uid)
        metrics.count_rejection(result.reason)
        self._log.warning(
            "Pod rejected",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            reason=result.reason,
            message=result.message,
        )
        self._event_sink.record_for(pod_reference(pod), "Warning", result.reason, result.message)
        status = rejected_status(
            pod, reason=result.reason, message=result.message, now=rfc3339(self._clock.now())
        )
        self._status.set_status(pod, status)
        return False

    def _housekeeping(self) -> None:
        if self._successor_waits:
            self._successor_waits = False
            self._reconcile_source()
        active = self.active_pods()
        metrics.pod_counts(
            desired=Counter(p.is_static for p in self._known.values()),
            active=Counter(p.is_static for p in active),
            mirrors=self._mirrors,
        )
        if not self._source.synced or not self._pleg.relisted_once or self._tg is None:
            return
        for uid, seen in self._pleg.pods().items():
            if self._workers.known(uid) or uid in self._known or uid in self._orphans:
                continue
            self._log.info(
                "Removing pod the API no longer has",
                pod_namespace=seen.namespace,
                pod_name=seen.name,
                pod_uid=uid,
            )
            task = self._tg.create_task(self._remove_orphan(uid), name=f"pods:orphan:{uid}")
            self._orphans[uid] = task
        if self._dir_cleanup is None or self._dir_cleanup.done():
            self._dir_cleanup = self._tg.create_task(
                self._clean_pod_dirs(), name="pods:orphaned-pod-dirs"
            )

    def _keeps_dir(self, uid: str) -> bool:
        return (
            self._workers.known(uid)
            or uid in self._known
            or uid in self._orphans
            or uid in self._pleg.pods()
        )

    async def _clean_pod_dirs(self) -> None:
        try:
            await self._podsync.clean_orphaned_pod_dirs(self._keeps_dir)
        except Exception as e:
            self._log.exception("Cannot clean up orphaned pod directories", error=str(e))

    async def _remove_orphan(self, uid: str) -> None:
        try:
            await self._podsync.remove_runtime_pod(uid)
        except Exception as e:
            runtime = runtime_errors(e)
            if runtime is None:
                self._log.exception("Cannot remove orphaned pod", pod_uid=uid, error=str(e))
            else:  # the runtime's answer (e.g. a task still exiting): one line, tried again
                self._log.error("Cannot remove orphaned pod", pod_uid=uid, error=runtime)
        finally:
            self._orphans.pop(uid, None)
