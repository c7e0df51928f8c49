"""When a pod's runtime state is settled: the state read after a kill, which the manager
hands out again until it acts on the pod (test_pod_resync_cost.py counts the reads)."""

from __future__ import annotations

import pytest

from nodeagent.kuberuntime.runtime_state import (
    ContainerRecord,
    ContainerState,
    PodRuntimeState,
    SandboxRecord,
)

EXITED = ContainerRecord(id="c1", name="app", state=ContainerState.EXITED)
STOPPED = SandboxRecord(id="s1", ready=False)


@pytest.mark.parametrize(
    ("sandboxes", "containers", "settled"),
    [
        ((STOPPED,), (EXITED,), True),  # killed
        ((STOPPED,), (), True),  # a sandbox whose containers were removed
        ((), (EXITED,), True),  # a container whose sandbox is gone
        ((), (), False),  # nothing: never kept
        ((SandboxRecord(id="s1", ready=True),), (EXITED,), False),  # a completed pod, not torn down
        (
            (STOPPED,),
            (EXITED, ContainerRecord(id="c2", name="b", state=ContainerState.RUNNING)),
            False,
        ),
        ((STOPPED,), (ContainerRecord(id="c2", name="b", state=ContainerState.CREATED),), False),
        ((STOPPED,), (ContainerRecord(id="c2", name="b", state=ContainerState.UNKNOWN),), False),
    ],
)
def test_settled(
    sandboxes: tuple[SandboxRecord, ...], containers: tuple[ContainerRecord, ...], settled: bool
) -> None:
    state = PodRuntimeState(uid="u", sandboxes=sandboxes, containers=containers)
    assert state.settled is settled
