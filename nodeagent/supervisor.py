"""The supervisor: runs the managers in one ``asyncio.TaskGroup`` and stops them in order.

It starts every manager under a supervisor, tells systemd READY=1 once they are started, pings
the watchdog from the event loop (a stuck loop stops the pings and systemd kills us), paces the
interpreter's cyclic garbage collection (``gcpacing``: a full collection every 2 minutes), and on
SIGTERM/SIGINT or a manager crash stops the managers in reverse start order within a bounded
time. A crash gives a non-zero exit so systemd restarts the daemon; a manager that does not stop
in time gets a hard exit, never a silent hang.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Sequence
from typing import NoReturn

from nodeagent import __version__, gcpacing
from nodeagent.errors import ManagerCrashed
from nodeagent.log import Logger, get_logger
from nodeagent.manager import Manager
from nodeagent.systemd.notify import Notifier, watchdog_loop

EXIT_OK = 0
EXIT_CRASHED = 1
EXIT_STOP_TIMEOUT = 2


def _hard_exit(code: int) -> NoReturn:
    os._exit(code)


class Agent:
    def __init__(
        self,
        *,
        managers: Sequence[Manager],
        notifier: Notifier,
        watchdog_interval: float | None = None,
        gc_period: float | None = None,
        stop_timeout: float = 5.0,
        install_signal_handlers: bool = True,
        hard_exit: Callable[[int], NoReturn] | None = None,
        log: Logger | None = None,
    ) -> None:
        names = [m.name for m in managers]
        if len(set(names)) != len(names):
            raise ValueError(f"manager names must be unique: {names}")
        self._managers = list(managers)
        self._notifier = notifier
        self._watchdog_interval = watchdog_interval
        self._gc_period = gc_period
        self._stop_timeout = stop_timeout
        self._install_signal_handlers = install_signal_handlers
        self._hard_exit = hard_exit or _hard_exit
        self._log = log or get_logger("agent")
        self._stop = asyncio.Event()
        self._stop_reason = ""
        self._crashes: list[ManagerCrashed] = []

    @property
    def manager_names(self) -> list[str]:
        return [m.name for m in self._managers]

    @property
    def crashes(self) -> list[ManagerCrashed]:
        return list(self._crashes)

    def request_stop(self, reason: str) -> None:
        if self._stop.is_set():
            self._log.info("Stop already in progress", reason=reason)
            return
        self._stop_reason = reason
        self._log.info("Stopping", reason=reason)
        self._stop.set()

    async def run(self) -> int:
        """Run until stopped; return the process exit code."""
        loop = asyncio.get_running_loop()
        if self._install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop, f"signal {sig.name}")
        try:
            return await self._run()
        finally:
            if self._install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)

    async def _run(self) -> int:
        self._log.info(
            "Starting nodeagent",
            version=__version__,
            managers=",".join(m.name for m in self._managers),
        )
        self._notifier.status("starting")
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(self._supervise(m), name=f"manager:{m.name}") for m in self._managers
            ]
            watchdog = None
            if self._watchdog_interval:
                watchdog = tg.create_task(
                    watchdog_loop(self._notifier, self._watchdog_interval), name="watchdog"
                )
            pacer = None
            if self._gc_period:
                pacer = tg.create_task(gcpacing.pace(period=self._gc_period), name="gc")
            await asyncio.sleep(0)  # let every manager reach its first await
            if not self._stop.is_set():
                self._notifier.ready(status=f"running {len(tasks)} managers")
                self._log.info("Started", managers=len(tasks))
            await self._stop.wait()
            self._notifier.stopping(status=f"stopping: {self._stop_reason}")
            await self._stop_in_order(tasks)
            for helper in (watchdog, pacer):
                if helper is not None:
                    helper.cancel()
        code = EXIT_CRASHED if self._crashes else EXIT_OK
        self._log.info("Stopped", exit_code=code)
        return code

    async def _supervise(self, manager: Manager) -> None:
        try:
            await manager.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            crash = ManagerCrashed(manager.name, exc)
            self._crashes.append(crash)
            self._log.exception("Manager crashed", manager=manager.name, error=str(exc))
            self.request_stop(f"manager {manager.name} crashed")
        else:
            self._log.info("Manager finished", manager=manager.name)

    async def _stop_in_order(self, tasks: list[asyncio.Task[None]]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._stop_timeout
        for manager, task in reversed(list(zip(self._managers, tasks, strict=True))):
            if task.done():
                continue
            task.cancel()
            remaining = max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait({task}, timeout=remaining)
            if not done:
                self._log.error(
                    "Manager did not stop in time; exiting hard",
                    manager=manager.name,
                    timeout_s=self._stop_timeout,
                )
                self._hard_exit(EXIT_STOP_TIMEOUT)
            self._log.v(2).info("Manager stopped", manager=manager.name)
