"""The node shutdown manager against a fake logind: the drop-in, the lock, the events, the
order of the groups, cancellation, a lost bus and a host without one."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from nodeagent.nodeshutdown import metrics
from nodeagent.nodeshutdown.manager import NodeShutdownManager
from nodeagent.nodeshutdown.policy import ShutdownGroup
from nodeagent.podspec import Pod, decode_checked_pod
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_logind import FakeLogind
from nodeagent.testing.pods import pod_object

pytestmark = pytest.mark.looptime

GROUPS = (ShutdownGroup(0, 10), ShutdownGroup(1000, 20), ShutdownGroup(2_000_000_000, 5))


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record(self, type: str, reason: str, message: str) -> None:
        self.recorded.append((type, reason, message))


def pod(name: str, priority: int, grace: int = 30) -> Pod:
    return decode_checked_pod(pod_object(name, priority=priority, grace=grace))


class Kills:
    """Kill function recording (name, grace, start, end) in loop time; each pod takes
    ``takes[name]`` seconds (default: its grace)."""

    def __init__(self, takes: dict[str, float] | None = None) -> None:
        self.takes = takes or {}
        self.log: list[tuple[str, int, float, float]] = []
        self.statuses: dict[str, dict[str, Any]] = {}

    async def __call__(
        self, pod: Pod, grace: int, mutate: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.statuses[pod.name] = mutate({"phase": "Running", "conditions": []})
        await asyncio.sleep(self.takes.get(pod.name, grace))
        self.log.append((pod.name, grace, start, loop.time()))


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    logind: FakeLogind,
    *,
    pods: list[Pod] | None = None,
    kills: Kills | None = None,
    groups: tuple[ShutdownGroup, ...] = GROUPS,
    events: Events | None = None,
    changes: list[bool] | None = None,
) -> AsyncIterator[NodeShutdownManager]:
    holder: list[NodeShutdownManager] = []

    def on_change() -> None:
        if changes is not None:
            changes.append(holder[0].shutdown_in_progress())

    manager = NodeShutdownManager(
        logind=logind,
        groups=groups,
        clock=LoopClock(),
        state_dir=tmp_path / "root",
        active_pods=lambda: list(pods or []),
        kill_pod=kills or Kills(),
        on_change=on_change,
        events=events,
        dropin_dir=tmp_path / "logind.conf.d",
    )
    holder.append(manager)
    task = asyncio.create_task(manager.run())
    try:
        yield manager
        assert not task.done(), task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        logind.cleanup()


async def until(check: Callable[[], Any], within: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.05)


async def test_short_logind_limit_writes_the_dropin_reloads_and_takes_a_delay_lock(
    tmp_path: Path,
) -> None:
    logind = FakeLogind(inhibit_delay_max_s=5.0, after_reload_s=35.0)
    async with running(tmp_path, logind) as manager:
        await until(lambda: manager.holds_lock)
        dropin = tmp_path / "logind.conf.d" / "99-kubelet.conf"
        assert dropin.read_text() == ("# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=35\n")
        assert oct(dropin.stat().st_mode & 0o777) == "0o644"
        assert logind.calls[:4] == [
            "connect",
            "get InhibitDelayMaxUSec",
            "KillUnit systemd-logind.service SIGHUP",
            "get InhibitDelayMaxUSec",
        ]
        assert logind.calls[-1] == (
            "Inhibit shutdown 'kubelet' 'Kubelet needs time to handle node shutdown' delay"
        )
        assert len(logind.held_locks()) == 1
        assert manager.inhibit_delay_max == 35.0


async def test_long_enough_limit_writes_no_dropin(tmp_path: Path) -> None:
    logind = FakeLogind(inhibit_delay_max_s=60.0)
    async with running(tmp_path, logind) as manager:
        await until(lambda: manager.holds_lock)
        assert not (tmp_path / "logind.conf.d").exists()
        assert "KillUnit systemd-logind.service SIGHUP" not in logind.calls


async def test_limit_that_does_not_move_fails_with_the_kubelets_text_after_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logind = FakeLogind(inhibit_delay_max_s=5.0)
    async with running(tmp_path, logind) as manager:
        await until(lambda: logind.calls.count("get InhibitDelayMaxUSec") >= 6)
        assert not manager.holds_lock
        assert logind.calls.count("get InhibitDelayMaxUSec") == 6  # 1 + 5 retries
        assert not logind.held_locks()


async def test_shutdown_kills_groups_lowest_priority_first_within_budgets(
    tmp_path: Path,
) -> None:
    logind = FakeLogind(inhibit_delay_max_s=60.0)
    events, changes = Events(), []
    kills = Kills(takes={"low": 2.0, "mid": 7.0, "crit": 1.0})
    pods = [pod("crit", 2_000_000_001, grace=30), pod("mid", 1500, grace=8), pod("low", -3)]
    async with running(
        tmp_path, logind, pods=pods, kills=kills, events=events, changes=changes
    ) as manager:
        await until(lambda: manager.holds_lock)
        [lock] = logind.held_locks()
        logind.prepare_for_shutdown(True)
        await until(manager.shutdown_in_progress)
        assert manager.errors() == ("node is shutting down",)
        await until(lambda: not logind.lock_held(lock))

        assert [(name, grace) for name, grace, *_ in kills.log] == [
            ("low", 10),
            ("mid", 8),
            ("crit", 5),
        ]
        ends = {name: end for name, _, _, end in kills.log}
        starts = {name: start for name, _, start, _ in kills.log}
        assert starts["mid"] >= ends["low"]
        assert starts["crit"] >= ends["mid"]
        assert events.recorded == [
            ("Normal", "NodeShutdown", "Shutdown manager detected shutdown event")
        ]
        assert changes == [True]
        assert kills.statuses["low"]["reason"] == "Terminated"
        state = json.loads((tmp_path / "root" / "graceful_node_shutdown_state").read_text())
        assert state == {"startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:10Z"}
        assert metrics.START_TIME._value.get() > 0
        assert metrics.END_TIME._value.get() - metrics.START_TIME._value.get() == 10
        assert manager.shutdown_in_progress()  # until the host goes down or it is cancelled


async def test_group_over_budget_moves_on_after_its_budget(tmp_path: Path) -> None:
    logind = FakeLogind(inhibit_delay_max_s=60.0)
    kills = Kills(takes={"stuck": 100.0})
    pods = [pod("stuck", 0), pod("crit", 2_000_000_000, grace=1)]
    async with running(tmp_path, logind, pods=pods, kills=kills) as manager:
        await until(lambda: manager.holds_lock)
        [lock] = logind.held_locks()
        loop = asyncio.get_running_loop()
        began = loop.time()
        logind.prepare_for_shutdown(True)
        await until(lambda: not logind.lock_held(lock))
        assert [name for name, *_ in kills.log] == ["crit"]
        assert loop.time() - began == pytest.approx(11, abs=1.5)


async def test_cancelled_shutdown_returns_ready_and_takes_a_new_lock(tmp_path: Path) -> None:
    logind = FakeLogind(inhibit_delay_max_s=60.0)
    events, changes = Events(), []
    async with running(tmp_path, logind, events=events, changes=changes) as manager:
        await until(lambda: manager.holds_lock)
        logind.prepare_for_shutdown(True)
        await until(lambda: not logind.held_locks())
        logind.prepare_for_shutdown(False)
        await until(lambda: len(logind.held_locks()) == 1 and not manager.shutdown_in_progress())
        assert manager.errors() == ()
        assert changes == [True, False]
        assert events.recorded[-1] == (
            "Normal",
            "NodeShutdown",
            "Shutdown manager detected shutdown cancellation",
        )
        assert len(logind.locks) == 2


async def test_lost_bus_restarts_after_one_second_with_a_new_lock(tmp_path: Path) -> None:
    logind = FakeLogind(inhibit_delay_max_s=60.0)
    async with running(tmp_path, logind) as manager:
        await until(lambda: manager.holds_lock)
        first = logind.locks[0]
        loop = asyncio.get_running_loop()
        dropped = loop.time()
        logind.drop_bus()
        await until(lambda: len(logind.locks) == 2)
        assert loop.time() - dropped == pytest.approx(1.0, abs=0.2)
        assert not logind.lock_held(first)
        assert logind.held_locks() == [logind.locks[1]]


async def test_without_a_bus_the_agent_logs_and_keeps_running(tmp_path: Path) -> None:
    logind = FakeLogind(connect_error="cannot connect to the system bus: No such file")
    async with running(tmp_path, logind) as manager:
        await asyncio.sleep(25)
        assert not manager.holds_lock
        assert logind.calls.count("connect") == 3  # retried every 10 s


async def test_no_configuration_never_touches_logind(tmp_path: Path) -> None:
    logind = FakeLogind()
    async with running(tmp_path, logind, groups=()):
        await asyncio.sleep(5)
        assert logind.calls == []
