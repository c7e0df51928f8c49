"""The watchdog: WATCHDOG_USEC/WATCHDOG_PID handling and the ping cadence in loop time."""

from __future__ import annotations

import asyncio
import os

import pytest
from sd_listener import NotifyListener

from nodeagent.agent import build
from nodeagent.config import Config
from nodeagent.systemd.notify import Notifier, watchdog_interval, watchdog_loop

PID = 4242


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({"WATCHDOG_USEC": "2000000"}, 1.0, id="half of WATCHDOG_USEC"),
        pytest.param({"WATCHDOG_USEC": "400000"}, 0.2, id="sub-second period"),
        pytest.param({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(PID)}, 1.0, id="our pid"),
        pytest.param({}, None, id="not requested"),
        pytest.param({"WATCHDOG_USEC": ""}, None, id="empty"),
        pytest.param({"WATCHDOG_USEC": "soon"}, None, id="not a number"),
        pytest.param({"WATCHDOG_USEC": "0"}, None, id="zero"),
        pytest.param({"WATCHDOG_USEC": "-5"}, None, id="negative"),
        pytest.param(
            {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(PID + 1)}, None, id="another pid"
        ),
        pytest.param({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "x"}, None, id="bad pid"),
    ],
)
def test_watchdog_interval(environ: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval(environ, pid=PID) == expected


def test_watchdog_pid_defaults_to_our_own_pid() -> None:
    environ = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}

    assert watchdog_interval(environ) == 1.0


async def _collect(listener: NotifyListener, into: list[tuple[float, str]]) -> None:
    loop = asyncio.get_running_loop()
    listener.sock.setblocking(False)
    while True:
        data = await loop.sock_recv(listener.sock, 65536)
        into.append((loop.time(), data.decode()))


@pytest.mark.looptime
async def test_pings_at_half_the_watchdog_period_of_loop_time(
    notify_listener: NotifyListener,
) -> None:
    environ = {"NOTIFY_SOCKET": notify_listener.env_value, "WATCHDOG_USEC": "2000000"}
    interval = watchdog_interval(environ)
    assert interval is not None
    received: list[tuple[float, str]] = []

    collector = asyncio.create_task(_collect(notify_listener, received))
    pinger = asyncio.create_task(watchdog_loop(Notifier.from_environ(environ), interval))
    await asyncio.sleep(3.5)
    pinger.cancel()
    collector.cancel()
    await asyncio.gather(pinger, collector, return_exceptions=True)

    assert received == [(0.0, "WATCHDOG=1"), (1.0, "WATCHDOG=1"), (2.0, "WATCHDOG=1"),
                        (3.0, "WATCHDOG=1")]  # fmt: skip


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("watchdog_pid", "expected_pings"),
    [
        pytest.param(os.getpid(), [0.0, 1.0, 2.0, 3.0], id="WATCHDOG_PID is ours"),
        pytest.param(os.getpid() + 1, [], id="WATCHDOG_PID is another process"),
    ],
)
async def test_agent_pings_only_when_the_watchdog_is_meant_for_it(
    notify_listener: NotifyListener, watchdog_pid: int, expected_pings: list[float]
) -> None:
    environ = {
        "NOTIFY_SOCKET": notify_listener.env_value,
        "WATCHDOG_USEC": "2000000",
        "WATCHDOG_PID": str(watchdog_pid),
    }
    agent = build(Config(), environ=environ)
    received: list[tuple[float, str]] = []
    collector = asyncio.create_task(_collect(notify_listener, received))

    running = asyncio.create_task(agent.run())
    await asyncio.sleep(3.5)
    agent.request_stop("test over")
    code = await running
    await asyncio.sleep(0)
    collector.cancel()
    await asyncio.gather(collector, return_exceptions=True)

    assert code == 0
    messages = [m for _, m in received]
    # standalone + nodeshutdown
    assert "READY=1\nSTATUS=running 2 managers" in messages
    assert messages[-1] == "STOPPING=1\nSTATUS=stopping: test over"
    assert [t for t, m in received if m == "WATCHDOG=1"] == expected_pings
