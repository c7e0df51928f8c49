"""Killing a pod when the runtime fails a stop: the sandbox is stopped all the same (the
kubelet's ``killPodWithSyncResult``), and the failure is raised so the pod worker tries again.

Seen with 110 pods deleted at once in the VM (containerd 1.6 under TCG): StopContainer ran
past its 2 min deadline for 94 pods; the sandboxes, whose stop kills what is left, waited
for the next attempt, and the deletion took more than 10 minutes against the kubelet's 4.5.
"""

from __future__ import annotations

import pytest
from test_lifecycle_hooks import Recorder, make, sync

from nodeagent.kuberuntime.errors import CriDeadlineExceeded
from nodeagent.kuberuntime.results import SyncResult
from nodeagent.testing.pods import container, pod

DEADLINE = CriDeadlineExceeded(
    "StopContainer", rpc="StopContainer", code="DeadlineExceeded",
    details="context deadline exceeded",
)  # fmt: skip


@pytest.mark.looptime
async def test_a_stop_past_its_deadline_still_stops_the_sandbox_and_is_raised() -> None:
    runtime, manager, _ = make()
    p = pod("web", uid="u-1", containers=[container("app"), container("side")])
    await sync(manager, p)
    state = await manager.pod_state(p.uid)
    runtime.inject_error("StopContainer", DEADLINE)
    recorder = Recorder()

    with pytest.raises(ExceptionGroup) as info:
        await manager.kill_pod(p, state, grace=30, result=SyncResult(on_event=recorder))

    assert info.value.exceptions == (DEADLINE,)
    # both containers were asked to stop (one failed), and the sandbox was stopped after:
    # what the failed stop left running went with it
    assert sorted(c for reason, _, c in recorder.reasons() if reason == "Killing") == [
        "app",
        "side",
    ]
    after = await manager.pod_state(p.uid)
    assert [s.ready for s in after.sandboxes] == [False]
    assert {c.name: c.state.value for c in after.containers} == {
        "app": "exited",
        "side": "exited",
    }


@pytest.mark.looptime
async def test_a_pod_whose_stops_succeed_is_killed_without_error() -> None:
    _runtime, manager, _ = make()
    p = pod("web", uid="u-1", containers=[container("app")])
    await sync(manager, p)
    await manager.kill_pod(p, await manager.pod_state(p.uid), grace=30)
    after = await manager.pod_state(p.uid)
    assert [s.ready for s in after.sandboxes] == [False]
    assert [c.state.value for c in after.containers] == ["exited"]
