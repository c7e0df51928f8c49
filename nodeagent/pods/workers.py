"""Per-pod workers: every pod's syncs run one at a time, in its own task, in order.

A worker moves through the kubelet's three stages:

- **syncing**: ``sync_pod`` brings the runtime to the spec and reports status; it runs on every
  update and PLEG event, when a back-off it reported expires, when the pod's active deadline
  falls (a timer of its own worker), and every ``resync_interval``.
  A pod whose phase turns terminal (Succeeded, Failed) stops syncing;
- **terminating**: ``sync_terminating_pod`` kills the containers with the grace period (the
  deletion's, else the spec's) — once the pod is deleted, removed from the API, or terminal;
- **terminated**: ``sync_terminated_pod`` sends the final status (and, for a deleted pod,
  the API deletion). The worker then waits until the API object is gone, runs
  ``cleanup_pod`` (removes what is left in the runtime) and exits.

Updates never block: they replace the worker's pod and wake it; a worker busy syncing picks
the newest pod up when it is done. Workers are tasks of the TaskGroup that :meth:`run` owns.
A failing sync is logged and retried after ``error_backoff`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from dataclasses import dataclass, field
from typing import Final, Protocol

from nodeagent.kuberuntime import runtime_errors
from nodeagent.log import Logger, get_logger
from nodeagent.pods import metrics
from nodeagent.pods.activepods import Termination
from nodeagent.podspec import Pod, termination_grace_period

RESYNC_INTERVAL: Final = 60.0  # syncFrequency
ERROR_BACKOFF: Final = 10.0  # backOffPeriod
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


class Stage(enum.Enum):
    SYNCING = "syncing"
    TERMINATING = "terminating"
    TERMINATED = "terminated"


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    """``retry_in``: sync again after that many seconds instead of the resync interval;
    ``wake_in``: and at the latest after that many (the pod's active deadline falls)."""

    terminal: bool = False
    retry_in: float | None = None
    wake_in: float | None = None


class PodSyncer(Protocol):
    async def sync_pod(self, pod: Pod) -> SyncOutcome: ...

    async def sync_terminating_pod(self, pod: Pod, grace: int) -> None: ...

    async def sync_terminated_pod(self, pod: Pod) -> None: ...

    async def cleanup_pod(self, pod: Pod) -> None: ...


@dataclass(eq=False)
class _Worker:
    pod: Pod
    stage: Stage = Stage.SYNCING
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    removed: bool = False
    final_sent: bool = False
    final_deleted: bool = False
    grace_override: int | None = None
    terminated: asyncio.Event = field(default_factory=asyncio.Event)
    arrived_terminal: bool = False


class PodWorkers:
    def __init__(
        self,
        *,
        syncer: PodSyncer,
        resync_interval: float = RESYNC_INTERVAL,
        error_backoff: float = ERROR_BACKOFF,
        log: Logger | None = None,
    ) -> None:
        self._syncer = syncer
        self._resync = resync_interval
        self._error_backoff = error_backoff
        self._log = log or get_logger("podworkers")
        self._workers: dict[str, _Worker] = {}
        self._spawn: asyncio.Queue[_Worker] = asyncio.Queue()

    @property
    def name(self) -> str:
        return "podworkers"

    # --- queries -------------------------------------------------------------------------

    def known(self, uid: str) -> bool:
        return uid in self._workers

    def stage(self, uid: str) -> Stage | None:
        worker = self._workers.get(uid)
        return worker.stage if worker else None

    def active_pods(self) -> list[Pod]:
        """Pods that run or may run: admitted, not terminating (what admission counts)."""
        return [w.pod for w in self._workers.values() if w.stage is Stage.SYNCING]

    def termination(self, uid: str) -> Termination | None:
        """How far stopping the pod is (None: no worker): the kubelet's
        ``IsPodTerminationRequested`` / ``IsPodKnownTerminated``, with a deletion or removal
        counted the moment it arrives, not when the worker gets to it."""
        worker = self._workers.get(uid)
        if worker is None:
            return None
        if worker.stage is Stage.TERMINATED or worker.arrived_terminal:
            return Termination.DONE
        pod = worker.pod
        if (
            worker.stage is Stage.TERMINATING
            or worker.removed
            or pod.deleted
            or pod.status.get("phase") in TERMINAL_PHASES
        ):
            return Termination.REQUESTED
        return Termination.NOT_REQUESTED

    def idle(self) -> bool:
        return not any(w.wake.is_set() for w in self._workers.values())

    # --- updates -------------------------------------------------------------------------

    def update_pod(self, pod: Pod) -> None:
        worker = self._workers.get(pod.uid)
        if worker is None:
            metrics.CONTAINERS_PER_POD.observe(len(pod.spec.containers))
            worker = _Worker(pod=pod)
            if pod.status.get("phase") in TERMINAL_PHASES:
                worker.stage = Stage.TERMINATING  # finished before a restart: never rerun
                worker.arrived_terminal = True
            self._workers[pod.uid] = worker
            self._spawn.put_nowait(worker)
        worker.pod = pod
        worker.wake.set()

    def remove_pod(self, uid: str, last: Pod | None = None) -> None:
        """The API object is gone (deleted, force-deleted): terminate, clean up, forget."""
        worker = self._workers.get(uid)
        if worker is None:
            return
        if last is not None:
            worker.pod = last
        worker.removed = True
        worker.wake.set()

    async def kill(self, uid: str, grace: int) -> None:
        """Terminate the pod now with ``grace`` seconds (node shutdown) and return once its
        containers are stopped and its terminal status is computed. An unknown pod, or one
        that already terminated, returns at once."""
        worker = self._workers.get(uid)
        if worker is None or worker.stage is Stage.TERMINATED:
            return
        if worker.stage is Stage.SYNCING:
            worker.grace_override = grace
            worker.stage = Stage.TERMINATING
        worker.wake.set()
        await worker.terminated.wait()

    def terminate(self, uid: str, grace: int) -> bool:
        """Stop a running pod with at most ``grace`` seconds (the eviction manager's kill; a
        shorter grace in its spec is kept); False when the pod is unknown or already
        terminating."""
        worker = self._workers.get(uid)
        if worker is None or worker.stage is not Stage.SYNCING:
            return False
        worker.stage = Stage.TERMINATING
        worker.grace_override = grace
        worker.wake.set()
        return True

    def refresh(self, pod: Pod) -> None:
        """Give the worker the pod's newest API object (only its status moved: conditions
        other components wrote) without waking it; its next sync reads them."""
        worker = self._workers.get(pod.uid)
        if worker is not None and not worker.removed:
            worker.pod = pod

    def sync(self, uid: str) -> None:
        """Sync now (a PLEG event)."""
        worker = self._workers.get(uid)
        if worker is not None:
            worker.wake.set()

    # --- running -------------------------------------------------------------------------

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            while True:
                worker = await self._spawn.get()
                tg.create_task(self._work(worker), name=f"pod:{worker.pod.uid}")

    async def _wait(self, worker: _Worker, deadline: float | None) -> None:
        if not worker.wake.is_set():
            loop = asyncio.get_running_loop()
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await worker.wake.wait()
        worker.wake.clear()

    async def _work(self, worker: _Worker) -> None:
        uid = worker.pod.uid
        loop = asyncio.get_running_loop()
        deadline: float | None = loop.time()
        try:
            while True:
                await self._wait(worker, deadline)
                delay = await self._step(worker)
                if delay is False:
                    return
                deadline = None if delay is None else loop.time() + delay
        finally:
            worker.terminated.set()
            if self._workers.get(uid) is worker:
                del self._workers[uid]

    async def _step(self, worker: _Worker) -> float | bool | None:
        """One round of work; returns seconds until the next round (None: until woken),
        or False when the worker is done."""
        pod = worker.pod
        if worker.stage is Stage.SYNCING and (pod.deleted or worker.removed):
            worker.stage = Stage.TERMINATING
        if worker.stage is Stage.SYNCING:
            try:
                outcome = await self._syncer.sync_pod(pod)
            except Exception as e:
                return self._failed("sync", pod, e)
            if not outcome.terminal:
                delay = self._resync if outcome.retry_in is None else outcome.retry_in
                return delay if outcome.wake_in is None else min(delay, outcome.wake_in)
            worker.stage = Stage.TERMINATING
        if worker.stage is Stage.TERMINATING:
            try:
                # Node shutdown and eviction cut the pod's own grace, never extend it.
                grace = termination_grace_period(pod)
                if worker.grace_override is not None:
                    grace = min(grace, worker.grace_override)
                await self._syncer.sync_terminating_pod(pod, grace)
            except Exception as e:
                return self._failed("terminate", pod, e)
            worker.stage = Stage.TERMINATED
            worker.terminated.set()
        if not worker.final_sent or (pod.deleted and not worker.final_deleted):
            try:
                await self._syncer.sync_terminated_pod(pod)
            except Exception as e:
                return self._failed("finish", pod, e)
            worker.final_sent, worker.final_deleted = True, pod.deleted
        if not worker.removed:
            return None
        try:
            await self._syncer.cleanup_pod(pod)
        except Exception as e:
            return self._failed("clean up", pod, e)
        return False

    def _failed(self, what: str, pod: Pod, error: Exception) -> float:
        fields = {
            "pod_namespace": pod.namespace,
            "pod_name": pod.name,
            "pod_uid": pod.uid,
            "retry_in_s": self._error_backoff,
        }
        message = f"Error syncing pod ({what}); will retry"
        runtime = runtime_errors(error)
        if runtime is None:
            self._log.exception(message, **fields)
        else:  # the runtime's answer (a deadline, a task still exiting): one line
            self._log.error(message, error=runtime, **fields)
        return self._error_backoff
