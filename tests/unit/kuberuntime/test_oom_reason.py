"""A SIGKILL exit the runtime learns was an OOM kill only after the exit: the pod's state
names the OOM kill (containerd's OOM event racing the exit; see ``oomreason.py``)."""

from __future__ import annotations

import asyncio

import pytest
from test_lifecycle_hooks import make, sync

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.oomreason import OOM_EVENT_SETTLE, oom_report_may_lag
from nodeagent.podspec import Pod
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import container, pod

NOW = 1_800_000_000 * 10**9


def exited(code: int, reason: str, seconds_ago: float) -> cri.ContainerStatus:
    return cri.ContainerStatus(
        id="c1",
        state=cri.CONTAINER_EXITED,
        exit_code=code,
        reason=reason,
        finished_at=NOW - int(seconds_ago * 1e9),
    )


@pytest.mark.parametrize(
    ("status", "lags"),
    [
        (exited(137, "Error", 0.2), True),
        (exited(137, "OOMKilled", 0.2), False),
        (exited(1, "Error", 0.2), False),
        (exited(137, "Error", 6), False),  # long ago: its OOM event has had its time
        (cri.ContainerStatus(id="c1", state=cri.CONTAINER_RUNNING), False),
    ],
)
def test_only_a_fresh_sigkill_exit_without_a_reason_may_still_be_an_oom_kill(
    status: cri.ContainerStatus, lags: bool
) -> None:
    assert oom_report_may_lag(status, NOW) is lags


async def running_hog() -> tuple[FakeRuntime, RuntimeManager, Pod, str]:
    """A pod whose one container runs; its container id."""
    runtime, manager, _ = make()
    p = pod("hog", uid="u-1", containers=[container("app")])
    await sync(manager, p)
    (app,) = (await manager.pod_state(p.uid)).containers
    return runtime, manager, p, app.id


@pytest.mark.looptime
async def test_an_oom_event_after_the_exit_reaches_the_pods_state() -> None:
    runtime, manager, p, app = await running_hog()
    runtime.exit_container(app, exit_code=137)
    loop = asyncio.get_running_loop()
    loop.call_later(OOM_EVENT_SETTLE / 2, runtime.report_oom, app)

    (read,) = (await manager.pod_state(p.uid)).containers

    assert (read.exit_code, read.reason) == (137, "OOMKilled")


@pytest.mark.looptime
async def test_a_sigkill_exit_that_stays_error_is_reported_as_error_after_one_more_read() -> None:
    runtime, manager, p, app = await running_hog()
    runtime.exit_container(app, exit_code=137)
    loop = asyncio.get_running_loop()
    started, reads = loop.time(), runtime.calls.count("ContainerStatus")

    (read,) = (await manager.pod_state(p.uid)).containers

    assert (read.exit_code, read.reason) == (137, "Error")
    assert loop.time() - started == pytest.approx(OOM_EVENT_SETTLE)
    assert runtime.calls.count("ContainerStatus") == reads + 2
    # the wait is measured from the exit: a later read takes the answer as it is
    again = loop.time()
    (read,) = (await manager.pod_state(p.uid)).containers
    assert (read.reason, loop.time()) == ("Error", again)


@pytest.mark.looptime
async def test_a_container_the_agent_stopped_is_read_once() -> None:
    runtime, manager, p, _ = await running_hog()
    await manager.kill_pod(p, await manager.pod_state(p.uid), grace=30)
    loop = asyncio.get_running_loop()
    started, reads = loop.time(), runtime.calls.count("ContainerStatus")

    (read,) = (await manager.pod_state(p.uid)).containers

    assert (read.exit_code, read.reason) == (137, "Error")
    assert loop.time() == started
    assert runtime.calls.count("ContainerStatus") == reads + 1
