"""The supervisor: start, READY, ordered stop, crash exit, bounded stop."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Sequence
from typing import NoReturn

import pytest

from nodeagent.manager import Manager, NullManager
from nodeagent.supervisor import EXIT_CRASHED, EXIT_OK, EXIT_STOP_TIMEOUT, Agent
from nodeagent.testing.fake_notifier import RecordingNotifier


class Recorder:
    """A manager that records its start and its cancellation in a shared journal."""

    def __init__(self, name: str, journal: list[str], *, fail_after: float | None = None) -> None:
        self._name = name
        self._journal = journal
        self._fail_after = fail_after

    @property
    def name(self) -> str:
        return self._name

    async def run(self) -> None:
        self._journal.append(f"start {self._name}")
        try:
            if self._fail_after is not None:
                await asyncio.sleep(self._fail_after)
                raise RuntimeError("disk on fire")
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self._journal.append(f"stop {self._name}")
            raise


class Stubborn:
    """A manager that swallows cancellation (a bug we must not hang on) until released."""

    name = "stubborn"

    def __init__(self) -> None:
        self.released = False

    async def run(self) -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if self.released:
                    raise


class HardExit(Exception):
    pass


def make_agent(
    managers: Sequence[Manager],
    notifier: RecordingNotifier,
    *,
    install_signal_handlers: bool = False,
    stop_timeout: float = 5.0,
    hard_exit: Callable[[int], NoReturn] | None = None,
) -> Agent:
    return Agent(
        managers=managers,
        notifier=notifier,
        install_signal_handlers=install_signal_handlers,
        stop_timeout=stop_timeout,
        hard_exit=hard_exit,
    )


async def test_ready_is_sent_after_every_manager_started() -> None:
    journal: list[str] = []
    notifier = RecordingNotifier()
    agent = make_agent([Recorder("a", journal), Recorder("b", journal)], notifier)
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(0.01)
    assert journal == ["start a", "start b"]
    assert notifier.messages == ["STATUS=starting", "READY=1\nSTATUS=running 2 managers"]
    agent.request_stop("test")
    assert await task == EXIT_OK
    assert notifier.messages[-1] == "STOPPING=1\nSTATUS=stopping: test"


async def test_managers_stop_in_reverse_start_order() -> None:
    journal: list[str] = []
    agent = make_agent([Recorder(n, journal) for n in "abc"], RecordingNotifier())
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(0.01)
    agent.request_stop("test")
    assert await task == EXIT_OK
    assert journal == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]


@pytest.mark.looptime
async def test_a_crashing_manager_stops_the_others_and_exits_non_zero(
    caplog: pytest.LogCaptureFixture,
) -> None:
    journal: list[str] = []
    agent = make_agent(
        [Recorder("lease", journal), Recorder("status", journal, fail_after=5)],
        RecordingNotifier(),
    )
    loop = asyncio.get_running_loop()
    assert await agent.run() == EXIT_CRASHED
    assert loop.time() == pytest.approx(5)
    assert journal == ["start lease", "start status", "stop lease"]
    assert [c.name for c in agent.crashes] == ["status"]
    assert "disk on fire" in str(agent.crashes[0])


@pytest.mark.looptime
async def test_a_manager_that_ignores_cancellation_gets_a_hard_exit_at_the_deadline() -> None:
    codes: list[int] = []
    stubborn = Stubborn()

    def hard_exit(code: int) -> NoReturn:
        # The real one is os._exit; here we record it and let the test finish.
        codes.append(code)
        stubborn.released = True
        raise HardExit

    agent = make_agent(
        [NullManager(), stubborn], RecordingNotifier(), stop_timeout=5.0, hard_exit=hard_exit
    )
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(1)
    agent.request_stop("test")
    with pytest.raises(BaseExceptionGroup) as info:
        await task
    assert info.group_contains(HardExit)
    assert codes == [EXIT_STOP_TIMEOUT]
    assert loop.time() == pytest.approx(6)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_stops_the_agent_cleanly(sig: signal.Signals) -> None:
    journal: list[str] = []
    notifier = RecordingNotifier()
    agent = make_agent([Recorder("a", journal)], notifier, install_signal_handlers=True)
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(0.01)
    os.kill(os.getpid(), sig)
    assert await asyncio.wait_for(task, 5) == EXIT_OK
    assert journal == ["start a", "stop a"]
    assert notifier.messages[-1] == f"STOPPING=1\nSTATUS=stopping: signal {sig.name}"


def test_manager_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        make_agent([NullManager(), NullManager()], RecordingNotifier())
