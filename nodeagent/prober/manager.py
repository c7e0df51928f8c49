"""The prober manager (the kubelet's ``pkg/kubelet/prober``): one asyncio task per (pod,
container, probe type), the three results caches, and what the pod sync reads from them.

A worker probes every ``periodSeconds`` (the first run after a random part of a period while
the agent itself started less than a period ago, as the kubelet spreads the probes of the pods
it finds at start). Each run (``_do_probe``) reads the pod's last generated status:

- no container ID yet: wait; a new container ID: the old result is dropped and the new
  container starts from the initial result (liveness Success, readiness Failure, startup
  none), probing resumes;
- the container is not running: the result is Failure; the worker ends when the container
  will not be restarted (``restartPolicy: Never``) or the pod is terminal;
- ``initialDelaySeconds`` after the container's start, and the startup probe before the
  others: until the container has started only the startup probe runs, after it only the others;
- ``successThreshold`` / ``failureThreshold`` consecutive results change the cached result;
  a liveness or startup failure puts the worker on hold until the container is replaced.

A changed result calls ``on_update(pod_uid)``: the pod is synced, its status regenerated with
:meth:`ProberManager.apply` (``started``, ``ready``), and :meth:`failed_probes` tells the
runtime manager which containers to kill. Probe failures are ``Unhealthy`` Warning Events with
the kubelet's messages; each run counts in ``prober_probe_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from nodeagent.clock import Clock
from nodeagent.events import DiscardEvents, ObjectEventSink, pod_reference
from nodeagent.gotext import parse_rfc3339
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Container, Pod, Probe
from nodeagent.prober.metrics import PROBE_DURATION, PROBE_TOTAL, RESULTS
from nodeagent.prober.outcome import Outcome, ProbeOutcome
from nodeagent.prober.prober import ProbeIO, ProbeType, run_probe, status_pod_ip
from nodeagent.prober.results import Result, ResultsCache

TICK_SLACK: Final = 0.001
UNHEALTHY: Final = "Unhealthy"
PROBE_WARNING: Final = "ProbeWarning"
TERMINAL_PHASES: Final = ("Succeeded", "Failed")
INITIAL: Final = {
    ProbeType.LIVENESS: Result.SUCCESS,
    ProbeType.READINESS: Result.FAILURE,
    ProbeType.STARTUP: Result.UNKNOWN,
}
Status = Mapping[str, Any]


class PodProbes(Protocol):
    """What the pod sync needs of the prober (``NoProbes`` when there is none)."""

    def add_pod(self, pod: Pod) -> None: ...

    def stop_liveness_and_startup(self, pod: Pod) -> None: ...

    def remove_pod(self, uid: str) -> None: ...

    def apply(self, pod: Pod, statuses: Sequence[MutableMapping[str, Any]]) -> None: ...

    def failed_probes(self, uid: str) -> dict[str, str]: ...

    def startup_results(self, uid: str) -> dict[str, bool] | None: ...

    def readiness_results(self, uid: str) -> dict[str, bool]: ...


class NoProbes:
    def add_pod(self, pod: Pod) -> None:
        pass

    def stop_liveness_and_startup(self, pod: Pod) -> None:
        pass

    def remove_pod(self, uid: str) -> None:
        pass

    def apply(self, pod: Pod, statuses: Sequence[MutableMapping[str, Any]]) -> None:
        pass

    def failed_probes(self, uid: str) -> dict[str, str]:
        return {}

    def startup_results(self, uid: str) -> dict[str, bool] | None:
        return None

    def readiness_results(self, uid: str) -> dict[str, bool]:
        return {}


def raw_container_id(status: Status) -> str:
    """``containerd://abc`` -> ``abc``."""
    text = str(status.get("containerID") or "")
    return text.split("://", 1)[1] if "://" in text else text


@dataclass(eq=False)
class _Worker:
    pod: Pod
    container: Container
    probe_type: ProbeType
    spec: Probe
    sidecar: bool = False
    trigger: asyncio.Event = field(default_factory=asyncio.Event)
    container_id: str = ""
    last_result: Result | None = None
    result_run: int = 0
    on_hold: bool = False
    stopped: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def key(self) -> tuple[str, str, ProbeType]:
        return (self.pod.uid, self.container.name, self.probe_type)


class ProberManager:
    def __init__(
        self,
        *,
        io: ProbeIO,
        pod_status: Callable[[str], Status | None],
        clock: Clock,
        on_update: Callable[[str], None] = lambda _uid: None,
        events: ObjectEventSink | None = None,
        rng: random.Random | None = None,
        log: Logger | None = None,
    ) -> None:
        self._io = io
        self._pod_status = pod_status
        self._clock = clock
        self._events: ObjectEventSink = events or DiscardEvents()
        self._rng = rng or random.Random()
        self._log = log or get_logger("prober")
        self.liveness = ResultsCache(on_update)
        self.readiness = ResultsCache(on_update)
        self.startup = ResultsCache(on_update)
        self._workers: dict[tuple[str, str, ProbeType], _Worker] = {}
        self._spawn: asyncio.Queue[_Worker] = asyncio.Queue()
        self._started_at: float | None = None

    @property
    def name(self) -> str:
        return "prober"

    def _cache(self, probe_type: ProbeType) -> ResultsCache:
        if probe_type is ProbeType.LIVENESS:
            return self.liveness
        if probe_type is ProbeType.READINESS:
            return self.readiness
        return self.startup

    def workers(self) -> list[tuple[str, str, str]]:
        """(pod UID, container, probe type) of every worker, for tests and status."""
        return [(uid, name, t.value) for uid, name, t in self._workers]

    # --- pods ------------------------------------------------------------------------------

    def add_pod(self, pod: Pod) -> None:
        """Start a worker for each probe of the pod's containers (idempotent; a known pod's
        workers get the newest pod object, to see its deletion). Sidecars (init containers
        with ``restartPolicy: Always``) are probed like regular containers."""
        sidecars = [c for c in pod.spec.init_containers if c.restart_policy == "Always"]
        for container in (*sidecars, *pod.spec.containers):
            for probe_type in ProbeType:
                spec = probe_type.spec(container)
                if spec is None:
                    continue
                worker = self._workers.get((pod.uid, container.name, probe_type))
                if worker is not None:
                    worker.pod = pod
                    continue
                sidecar = container.restart_policy == "Always"
                worker = _Worker(pod, container, probe_type, spec, sidecar=sidecar)
                self._workers[worker.key] = worker
                self._spawn.put_nowait(worker)

    def stop_liveness_and_startup(self, pod: Pod) -> None:
        """A terminating pod is probed for readiness only."""
        for worker in list(self._workers.values()):
            if worker.pod.uid == pod.uid and worker.probe_type is not ProbeType.READINESS:
                self._stop(worker)

    def remove_pod(self, uid: str) -> None:
        for worker in list(self._workers.values()):
            if worker.pod.uid == uid:
                self._stop(worker)

    def _stop(self, worker: _Worker) -> None:
        worker.stopped = True
        if worker.task is not None:
            worker.task.cancel()
        else:
            self._forget(worker)

    # --- what the sync reads -----------------------------------------------------------

    def _is_started(self, uid: str, status: Status) -> bool:
        if "running" not in (status.get("state") or {}):
            return False
        found = self.startup.get(raw_container_id(status))
        if found is not None:
            return found is Result.SUCCESS
        return (uid, str(status.get("name")), ProbeType.STARTUP) not in self._workers

    def apply(self, pod: Pod, statuses: Sequence[MutableMapping[str, Any]]) -> None:
        """``UpdatePodStatus``: set ``started`` and ``ready`` of the regular (or sidecar)
        containers' statuses. Ready needs a running, started container whose readiness probe
        (if it has one) last succeeded; a container still waiting for its first readiness
        result has its probe run now."""
        for status in statuses:
            started = self._is_started(pod.uid, status)
            status["started"] = started
            if not started:
                status["ready"] = False
                continue
            if self.readiness.get(raw_container_id(status)) is Result.SUCCESS:
                status["ready"] = True
                continue
            worker = self._workers.get((pod.uid, str(status.get("name")), ProbeType.READINESS))
            status["ready"] = worker is None
            if worker is not None:
                worker.trigger.set()

    def failed_probes(self, uid: str) -> dict[str, str]:
        """Container ID -> ``liveness`` or ``startup`` for each container of the pod whose
        liveness or startup probe has failed: the runtime manager kills (and restarts) it."""
        failed: dict[str, str] = {}
        for worker in self._workers.values():
            if worker.pod.uid != uid or not worker.container_id:
                continue
            if worker.probe_type is ProbeType.READINESS:
                continue
            if self._cache(worker.probe_type).get(worker.container_id) is Result.FAILURE:
                failed.setdefault(worker.container_id, worker.probe_type.value.lower())
        return failed

    def startup_results(self, uid: str) -> dict[str, bool]:
        """Container ID -> whether its startup probe succeeded, for each container of the pod
        whose startup probe has a result (a sidecar with none yet holds the next init
        container back)."""
        return self._results(uid, ProbeType.STARTUP)

    def readiness_results(self, uid: str) -> dict[str, bool]:
        """Container ID -> whether its readiness probe passed, for each container of the pod
        whose readiness probe has a result: what ``SetContainerReadiness`` writes on the
        pod's status when a result changes, also while the pod terminates."""
        return self._results(uid, ProbeType.READINESS)

    def _results(self, uid: str, probe_type: ProbeType) -> dict[str, bool]:
        cache = self._cache(probe_type)
        results: dict[str, bool] = {}
        for worker in self._workers.values():
            if worker.pod.uid != uid or worker.probe_type is not probe_type:
                continue
            found = cache.get(worker.container_id) if worker.container_id else None
            if found is Result.SUCCESS or found is Result.FAILURE:
                results[worker.container_id] = found is Result.SUCCESS
        return results

    # --- running -------------------------------------------------------------------------

    async def run(self) -> None:
        self._started_at = asyncio.get_running_loop().time()
        async with asyncio.TaskGroup() as tg:
            while True:
                worker = await self._spawn.get()
                if worker.stopped:
                    continue
                worker.task = tg.create_task(
                    self._run_worker(worker),
                    name=f"probe:{worker.pod.uid}:{worker.container.name}:"
                    f"{worker.probe_type.value.lower()}",
                )

    async def _run_worker(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        period = float(max(1, worker.spec.period_seconds))
        try:
            if self._started_at is not None and loop.time() - self._started_at < period:
                await asyncio.sleep(self._rng.random() * period)
            next_tick = loop.time() + period
            while True:
                worker.trigger.clear()  # a run asked for before this one is this one
                if worker.stopped or not await self._safe_probe(worker):
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, next_tick - loop.time())):
                        await worker.trigger.wait()
                # a tick within the clock's resolution is due: a timer may fire a hair early
                now = loop.time() + TICK_SLACK
                if now >= next_tick:
                    next_tick += period * (math.floor((now - next_tick) / period) + 1)
        finally:
            self._forget(worker)

    def _forget(self, worker: _Worker) -> None:
        if worker.container_id:
            self._cache(worker.probe_type).remove(worker.container_id)
        if self._workers.get(worker.key) is worker:
            del self._workers[worker.key]
        labels = (worker.probe_type.value, worker.container.name)
        pod = (worker.pod.name, worker.pod.namespace)
        for result in RESULTS:
            with contextlib.suppress(KeyError):
                PROBE_TOTAL.remove(labels[0], result, labels[1], *pod, worker.pod.uid)
        with contextlib.suppress(KeyError):
            PROBE_DURATION.remove(*labels, *pod)

    async def _safe_probe(self, worker: _Worker) -> bool:
        try:
            return await self._do_probe(worker)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._log.exception(
                "Probe worker failed; continuing",
                pod_namespace=worker.pod.namespace,
                pod_name=worker.pod.name,
                container_name=worker.container.name,
                probe_type=worker.probe_type.value,
                error=str(e),
            )
            return True

    async def _do_probe(self, worker: _Worker) -> bool:
        """One round of ``doProbe``; False ends the worker."""
        pod, uid = worker.pod, worker.pod.uid
        status = self._pod_status(uid)
        if status is None:
            return True
        if status.get("phase") in TERMINAL_PHASES:
            return False
        container_status = next(
            (
                s
                for s in status.get(
                    "initContainerStatuses" if worker.sidecar else "containerStatuses"
                )
                or []
                if s.get("name") == worker.container.name
            ),
            None,
        )
        if container_status is None or not container_status.get("containerID"):
            return True
        cache = self._cache(worker.probe_type)
        container_id = raw_container_id(container_status)
        if worker.container_id != container_id:
            if worker.container_id:
                cache.remove(worker.container_id)
            worker.container_id = container_id
            worker.last_result, worker.result_run, worker.on_hold = None, 0, False
            cache.set(container_id, INITIAL[worker.probe_type], uid)
        if worker.on_hold:
            return True
        state = container_status.get("state") or {}
        running = state.get("running")
        if running is None:
            cache.set(container_id, Result.FAILURE, uid)
            # a sidecar is restarted whatever the pod's restartPolicy
            restarted = worker.sidecar or pod.spec.restart_policy != "Never"
            return "terminated" not in state or restarted
        if pod.deleted and worker.probe_type is not ProbeType.READINESS:
            cache.set(container_id, Result.SUCCESS, uid)  # a quiet shutdown
            return False
        started_at = parse_rfc3339(running.get("startedAt"))
        if started_at is not None:
            since = (self._clock.now() - started_at).total_seconds()
            if int(since) < worker.spec.initial_delay_seconds:
                return True
        if container_status.get("started"):
            if worker.probe_type is ProbeType.STARTUP:
                return True
        elif worker.probe_type is not ProbeType.STARTUP:
            return True

        loop = asyncio.get_running_loop()
        begin = loop.time()
        outcome = await run_probe(
            self._io,
            worker.spec,
            container=worker.container,
            container_id=container_id,
            pod_ip=status_pod_ip(status),
        )
        result = self._judge(worker, outcome)
        if result is None:
            return True  # a probe that could not run is thrown away, uncounted
        self._count(worker, result, loop.time() - begin)
        if result is worker.last_result:
            worker.result_run += 1
        else:
            worker.last_result, worker.result_run = result, 1
        spec = worker.spec
        if (result is Result.FAILURE and worker.result_run < spec.failure_threshold) or (
            result is Result.SUCCESS and worker.result_run < spec.success_threshold
        ):
            return True
        cache.set(container_id, result, uid)
        if result is Result.FAILURE and worker.probe_type is not ProbeType.READINESS:
            worker.on_hold, worker.result_run = True, 0
        return True

    def _judge(self, worker: _Worker, outcome: ProbeOutcome) -> Result | None:
        """The result of one run, with its Event (``prober.probe``); None: thrown away."""
        kind = worker.probe_type.value
        log = self._log.bind(
            pod_namespace=worker.pod.namespace,
            pod_name=worker.pod.name,
            container_name=worker.container.name,
            probe_type=kind,
        )
        if outcome.error is not None:
            log.v(1).info("Probe errored", error=outcome.error)
            self._event(
                worker,
                UNHEALTHY,
                f"{kind} probe errored and resulted in unknown state: {outcome.error}",
            )
            return None
        if outcome.outcome is Outcome.SUCCESS:
            log.v(3).info("Probe succeeded")
            return Result.SUCCESS
        if outcome.outcome is Outcome.WARNING:
            self._event(worker, PROBE_WARNING, f"{kind} probe warning: {outcome.output}")
            return Result.SUCCESS
        if outcome.outcome is Outcome.FAILURE:
            log.v(1).info("Probe failed", output=outcome.output)
            self._event(worker, UNHEALTHY, f"{kind} probe failed: {outcome.output}")
        return Result.FAILURE

    def _event(self, worker: _Worker, reason: str, message: str) -> None:
        ref = pod_reference(worker.pod, worker.container.name)
        self._events.record_for(ref, "Warning", reason, message)

    def _count(self, worker: _Worker, result: Result, seconds: float) -> None:
        name = {Result.SUCCESS: "successful", Result.FAILURE: "failed"}.get(result, "unknown")
        pod = worker.pod
        kind, container = worker.probe_type.value, worker.container.name
        PROBE_TOTAL.labels(kind, name, container, pod.name, pod.namespace, pod.uid).inc()
        if result is Result.SUCCESS:
            PROBE_DURATION.labels(kind, container, pod.name, pod.namespace).observe(seconds)
