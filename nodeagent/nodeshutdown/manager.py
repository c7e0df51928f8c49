"""The node shutdown manager: logind's delay inhibitor lock and priority-ordered pod kills.

As the kubelet's ``nodeshutdown_manager_linux.go``: at start, logind's ``InhibitDelayMaxUSec``
is compared with the sum of the groups' budgets; when it is shorter the drop-in
``/etc/systemd/logind.conf.d/99-kubelet.conf`` is written, logind gets SIGHUP through systemd's
``KillUnit`` and the value is re-read with a backoff (100 ms doubling, 5 attempts). Then a
``delay`` lock on ``shutdown`` is taken and kept (its file descriptor) until logind says
``PrepareForShutdown(true)``: the ``NodeShutdown`` Event, Ready=False "node is shutting down"
(``errors()`` feeds the node status), admission refuses new pods, and the pods are killed
group by group, lowest priority first, each group within its budget; the state file and the
gauges get the start and end times; the lock is released and the host shuts down.
``PrepareForShutdown(false)`` (a cancelled shutdown) returns the node to Ready and takes a
new lock. When the bus goes away the whole start is redone after 1 s. Without a system bus
(no systemd) the error is logged and the agent runs on without graceful shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from nodeagent.clock import Clock
from nodeagent.events import DiscardEvents, EventSink
from nodeagent.gotext import duration_seconds, rfc3339
from nodeagent.log import Logger, get_logger
from nodeagent.logind import BusGone, Logind, LogindError
from nodeagent.nodeshutdown import metrics
from nodeagent.nodeshutdown.policy import (
    DROPIN_DIR,
    DROPIN_NAME,
    EVENT_CANCELLED,
    EVENT_REASON,
    EVENT_SHUTDOWN,
    INHIBIT_MODE,
    INHIBIT_WHAT,
    INHIBIT_WHO,
    INHIBIT_WHY,
    NO_CONFIG,
    SHUTTING_DOWN,
    ShutdownGroup,
    disrupted_status,
    dropin_text,
    effective_grace,
    group_pods,
    total_seconds,
    update_failed_message,
)
from nodeagent.nodeshutdown.state import read_state, write_state
from nodeagent.podspec import Pod

RECONNECT_PERIOD: Final = 1.0  # dbusReconnectPeriod
RETRY_AFTER_FAILED_START: Final = 10.0
UPDATE_BACKOFF: Final = (0.1, 0.2, 0.4, 0.8, 1.6)  # 100 ms doubling, 5 steps
STATUS_FLUSH_MAX: Final = 5.0


class KillPod(Protocol):
    async def __call__(
        self, pod: Pod, grace: int, mutate: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None: ...


def write_dropin(directory: Path, seconds: float) -> Path:
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    path = directory / DROPIN_NAME
    path.write_text(dropin_text(seconds))
    path.chmod(0o644)
    return path


class NodeShutdownManager:
    def __init__(
        self,
        *,
        logind: Logind,
        groups: Sequence[ShutdownGroup],
        clock: Clock,
        state_dir: Path,
        active_pods: Callable[[], Sequence[Pod]],
        kill_pod: KillPod,
        status_pending: Callable[[], bool] = lambda: False,
        on_change: Callable[[], None] = lambda: None,
        events: EventSink | None = None,
        dropin_dir: Path = Path(DROPIN_DIR),
        reconnect_period: float = RECONNECT_PERIOD,
        retry_after_failed_start: float = RETRY_AFTER_FAILED_START,
        update_backoff: Sequence[float] = UPDATE_BACKOFF,
        log: Logger | None = None,
    ) -> None:
        self._logind = logind
        self._groups = tuple(groups)
        self._clock = clock
        self._state_dir = state_dir
        self._active_pods = active_pods
        self._kill_pod = kill_pod
        self._status_pending = status_pending
        self._on_change = on_change
        self._events: EventSink = events or DiscardEvents()
        self._dropin_dir = dropin_dir
        self._reconnect = reconnect_period
        self._retry_failed = retry_after_failed_start
        self._update_backoff = tuple(update_backoff)
        self._log = log or get_logger("nodeshutdown")
        self._shutting_down = False
        self._lock_fd: int | None = None
        self._last_error = ""
        self.inhibit_delay_max: float | None = None

    @property
    def name(self) -> str:
        return "nodeshutdown"

    def shutdown_in_progress(self) -> bool:
        return self._shutting_down

    def errors(self) -> tuple[str, ...]:
        """What Ready says while the node shuts down (the node status's other errors)."""
        return (SHUTTING_DOWN,) if self._shutting_down else ()

    @property
    def holds_lock(self) -> bool:
        return self._lock_fd is not None

    async def run(self) -> None:
        if not self._groups or total_seconds(self._groups) <= 0:
            self._log.info(NO_CONFIG)
            await asyncio.Event().wait()
        await self._restore_metrics()
        self._log.info(
            "Creating node shutdown manager",
            shutdown_grace_period_requested=duration_seconds(total_seconds(self._groups)),
            groups=",".join(f"{g.priority}:{g.seconds}s" for g in self._groups),
        )
        try:
            while True:
                try:
                    await self._start()
                    wait = self._reconnect
                except BusGone as e:
                    self._log.warning(
                        "Lost the system bus; restarting the node shutdown manager",
                        error=str(e),
                        retry_in_s=self._reconnect,
                    )
                    wait = self._reconnect
                except LogindError as e:
                    self._log_start_error(str(e))
                    wait = self._retry_failed
                finally:
                    self._release_lock()
                    self._logind.close()
                await asyncio.sleep(wait)
        finally:
            self._release_lock()
            self._logind.close()

    def _log_start_error(self, error: str) -> None:
        if error != self._last_error:
            self._log.error(
                "Failed to start node shutdown manager; graceful node shutdown is not in effect",
                error=error,
                retry_in_s=self._retry_failed,
            )
            self._last_error = error
        else:
            self._log.v(2).info("Node shutdown manager still cannot start", error=error)

    async def _restore_metrics(self) -> None:
        try:
            start, end = await asyncio.to_thread(read_state, self._state_dir)
        except (OSError, ValueError) as e:
            self._log.error("Cannot read the graceful node shutdown state file", error=str(e))
            return
        if start is not None:
            metrics.START_TIME.set(start.timestamp())
        if end is not None:
            metrics.END_TIME.set(end.timestamp())

    async def _start(self) -> None:
        await self._logind.connect()
        current = await self._logind.inhibit_delay_max()
        wanted = float(total_seconds(self._groups))
        if wanted > current:
            path = await asyncio.to_thread(write_dropin, self._dropin_dir, wanted)
            self._log.info(
                "Raising logind InhibitDelayMaxSec",
                current=duration_seconds(current),
                wanted=duration_seconds(wanted),
                dropin=str(path),
            )
            await self._logind.reload_logind()
            current = await self._wait_updated(wanted, current)
        self.inhibit_delay_max = current
        await self._take_lock()
        self._last_error = ""
        self._log.info(
            "Node shutdown manager started: holding a delay inhibitor lock",
            inhibit_delay_max=duration_seconds(current),
        )
        while True:
            shutting_down = await self._logind.next_event()
            if shutting_down:
                await self._shutdown()
            else:
                await self._cancelled()

    async def _wait_updated(self, wanted: float, current: float) -> float:
        for delay in self._update_backoff:
            await asyncio.sleep(delay)
            current = await self._logind.inhibit_delay_max()
            if current >= wanted:
                return current
        raise LogindError(update_failed_message(len(self._update_backoff), wanted, current))

    async def _take_lock(self) -> None:
        self._release_lock()
        self._lock_fd = await self._logind.inhibit(
            what=INHIBIT_WHAT, who=INHIBIT_WHO, why=INHIBIT_WHY, mode=INHIBIT_MODE
        )

    def _release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            self._log.info("Released the delay inhibitor lock")

    def _set_shutting_down(self, value: bool) -> None:
        self._shutting_down = value
        self._on_change()

    async def _cancelled(self) -> None:
        self._log.info("Shutdown manager detected shutdown cancellation")
        self._events.record("Normal", EVENT_REASON, EVENT_CANCELLED)
        self._set_shutting_down(False)
        await self._take_lock()

    async def _shutdown(self) -> None:
        self._log.info("Shutdown manager detected new shutdown event, isNodeShuttingDownNow")
        self._events.record("Normal", EVENT_REASON, EVENT_SHUTDOWN)
        self._set_shutting_down(True)
        try:
            await self._process_shutdown()
        finally:
            self._release_lock()

    async def _save(self, start: Any, end: Any) -> None:
        try:
            await asyncio.to_thread(write_state, self._state_dir, start, end)
        except OSError as e:
            self._log.error("Cannot write the graceful node shutdown state file", error=str(e))

    async def _process_shutdown(self) -> None:
        loop = asyncio.get_running_loop()
        started = self._clock.now()
        began = loop.time()
        metrics.START_TIME.set(started.timestamp())
        metrics.END_TIME.set(0)
        await self._save(started, None)
        now = rfc3339(started)
        groups = group_pods(self._groups, list(self._active_pods()))
        for group, pods in zip(self._groups, groups, strict=True):
            if not pods:
                continue
            await self._kill_group(group, pods, now=now)
        remaining = total_seconds(self._groups) - (loop.time() - began)
        await self._flush_statuses(min(STATUS_FLUSH_MAX, max(1.0, remaining)))
        ended = self._clock.now()
        metrics.END_TIME.set(ended.timestamp())
        await self._save(started, ended)
        self._log.info(
            "Shutdown manager completed processing shutdown event, node will shutdown shortly",
            took_s=round(loop.time() - began, 3),
        )

    async def _kill_group(self, group: ShutdownGroup, pods: Sequence[Pod], *, now: str) -> None:
        self._log.info(
            "Shutdown manager killing pods of group",
            priority=group.priority,
            grace_period=group.seconds,
            pods=len(pods),
        )
        tasks = []
        for pod in pods:
            grace = effective_grace(pod, group)
            self._log.info(
                "Shutdown manager killing pod with gracePeriod",
                pod_namespace=pod.namespace,
                pod_name=pod.name,
                pod_uid=pod.uid,
                grace_period=grace,
            )
            mutate = functools.partial(
                disrupted_status,
                now=now,
                succeeded=pod.status.get("phase") == "Succeeded",
                generation=pod.metadata.generation,
            )
            tasks.append(asyncio.ensure_future(self._kill_pod(pod, grace, mutate)))
        done, pending = await asyncio.wait(tasks, timeout=group.seconds)
        for task in done:
            if (error := task.exception()) is not None:
                self._log.error("Shutdown manager failed killing pod", error=str(error))
        if pending:
            self._log.error(
                "Shutdown manager pod killing time out",
                grace_period=group.seconds,
                priority=group.priority,
                pods_left=len(pending),
            )
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)

    async def _flush_statuses(self, within: float) -> None:
        """Give the status manager a moment to send the pods' final statuses before the lock
        goes (systemd stops the agent right after)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        # the status manager has no "all sent" event: poll it
        while self._status_pending() and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
