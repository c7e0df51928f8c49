"""compute_pod_actions: the plan that turns a pod's runtime state into its spec (table tests)."""

from __future__ import annotations

import itertools

import pytest

from nodeagent.kuberuntime.actions import KillContainer, PodActions, compute_pod_actions
from nodeagent.kuberuntime.labels import container_hash
from nodeagent.kuberuntime.runtime_state import (
    ContainerRecord,
    ContainerState,
    PodRuntimeState,
    SandboxRecord,
)
from nodeagent.podspec import Pod
from nodeagent.testing.pods import container, pod

RUNNING, EXITED, CREATED, UNKNOWN = (
    ContainerState.RUNNING,
    ContainerState.EXITED,
    ContainerState.CREATED,
    ContainerState.UNKNOWN,
)
_ids = itertools.count(1)


def sb(
    *, ready: bool = True, ip: str = "10.0.0.2", attempt: int = 0, host: bool = False
) -> SandboxRecord:
    return SandboxRecord(id=f"sb{attempt}", ready=ready, attempt=attempt, ip=ip, host_network=host)


def ctr(name: str, state: ContainerState, exit_code: int = 0, hash: str = "") -> ContainerRecord:
    return ContainerRecord(
        id=f"{name}-{next(_ids)}", name=name, state=state, exit_code=exit_code, hash=hash
    )


def runtime(
    *sandboxes: SandboxRecord, containers: tuple[ContainerRecord, ...] = ()
) -> PodRuntimeState:
    return PodRuntimeState(uid="u", sandboxes=sandboxes, containers=containers)


def two(restart_policy: str = "Always") -> Pod:
    return pod(
        containers=[container("a", command=["true"]), container("b", command=["true"])],
        restart_policy=restart_policy,
    )


def with_init(restart_policy: str = "Always") -> Pod:
    return pod(
        init_containers=[container("i1", command=["true"]), container("i2", command=["true"])],
        containers=[container("a", command=["true"])],
        restart_policy=restart_policy,
    )


CASES = [
    pytest.param(
        two(),
        runtime(),
        PodActions(kill_pod=True, create_sandbox=True, containers_to_start=("a", "b")),
        id="no sandbox: create one and start every container",
    ),
    pytest.param(
        two(),
        runtime(sb(ready=False, attempt=0), containers=(ctr("a", EXITED, 1),)),
        PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_id="sb0",
            attempt=1,
            containers_to_start=("a", "b"),
        ),
        id="dead sandbox: kill the pod and create attempt 1",
    ),
    pytest.param(
        two(),
        runtime(sb(ip=""), containers=()),
        PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_id="sb0",
            attempt=1,
            containers_to_start=("a", "b"),
        ),
        id="sandbox without an IP is replaced",
    ),
    pytest.param(
        two(),
        runtime(sb(), containers=(ctr("a", RUNNING),)),
        PodActions(sandbox_id="sb0", containers_to_start=("b",)),
        id="start the missing container only",
    ),
    pytest.param(
        two("Always"),
        runtime(sb(), containers=(ctr("a", RUNNING), ctr("b", EXITED, 0))),
        PodActions(sandbox_id="sb0", containers_to_start=("b",)),
        id="Always restarts a container that succeeded",
    ),
    pytest.param(
        two("OnFailure"),
        runtime(sb(), containers=(ctr("a", RUNNING), ctr("b", EXITED, 0))),
        PodActions(sandbox_id="sb0"),
        id="OnFailure keeps a container that succeeded",
    ),
    pytest.param(
        two("OnFailure"),
        runtime(sb(), containers=(ctr("a", RUNNING), ctr("b", EXITED, 2))),
        PodActions(sandbox_id="sb0", containers_to_start=("b",)),
        id="OnFailure restarts a container that failed",
    ),
    pytest.param(
        two("Never"),
        runtime(sb(), containers=(ctr("a", RUNNING), ctr("b", EXITED, 2))),
        PodActions(sandbox_id="sb0"),
        id="Never restarts nothing while another container runs",
    ),
    pytest.param(
        two("Never"),
        runtime(sb(), containers=(ctr("a", EXITED, 0), ctr("b", EXITED, 1))),
        PodActions(kill_pod=True, sandbox_id="sb0"),
        id="Never with every container done: kill the pod",
    ),
    pytest.param(
        two("Never"),
        runtime(sb(ready=False), containers=(ctr("a", EXITED, 0), ctr("b", EXITED, 0))),
        PodActions(kill_pod=True, sandbox_id="sb0", attempt=1),
        id="Never never creates a second sandbox",
    ),
    pytest.param(
        two("OnFailure"),
        runtime(sb(ready=False), containers=(ctr("a", EXITED, 0), ctr("b", EXITED, 0))),
        PodActions(kill_pod=True, sandbox_id="sb0", attempt=1),
        id="OnFailure all succeeded with a dead sandbox: nothing more to run",
    ),
    pytest.param(
        two("OnFailure"),
        runtime(sb(ready=False), containers=(ctr("a", EXITED, 0), ctr("b", EXITED, 3))),
        PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_id="sb0",
            attempt=1,
            containers_to_start=("b",),
        ),
        id="OnFailure new sandbox starts only the failed container",
    ),
    pytest.param(
        two(),
        runtime(sb(), containers=(ctr("a", RUNNING), ctr("b", UNKNOWN))),
        PodActions(sandbox_id="sb0", containers_to_start=("b",), containers_to_kill=("b",)),
        id="container in unknown state is killed and started again",
    ),
    pytest.param(
        two(),
        runtime(sb(), containers=(ctr("a", RUNNING), ctr("b", CREATED))),
        PodActions(sandbox_id="sb0", containers_to_start=("b",)),
        id="created but never started container is started",
    ),
    pytest.param(
        with_init(),
        runtime(),
        PodActions(kill_pod=True, create_sandbox=True, init_containers_to_start=("i1",)),
        id="init containers: the first one runs first in a new sandbox",
    ),
    pytest.param(
        with_init(),
        runtime(sb(), containers=(ctr("i1", RUNNING),)),
        PodActions(sandbox_id="sb0"),
        id="init container running: wait for it",
    ),
    pytest.param(
        with_init(),
        runtime(sb(), containers=(ctr("i1", EXITED, 0),)),
        PodActions(sandbox_id="sb0", init_containers_to_start=("i2",)),
        id="first init container done: run the second",
    ),
    pytest.param(
        with_init(),
        runtime(sb(), containers=(ctr("i2", EXITED, 0), ctr("i1", EXITED, 0))),
        PodActions(sandbox_id="sb0", containers_to_start=("a",)),
        id="init containers done: start the regular containers",
    ),
    pytest.param(
        with_init("Always"),
        runtime(sb(), containers=(ctr("i1", EXITED, 1),)),
        PodActions(sandbox_id="sb0", init_containers_to_start=("i1",)),
        id="failed init container is retried under Always",
    ),
    pytest.param(
        with_init("Never"),
        runtime(sb(), containers=(ctr("i1", EXITED, 1),)),
        PodActions(kill_pod=True, sandbox_id="sb0"),
        id="failed init container under Never kills the pod",
    ),
    pytest.param(
        with_init(),
        runtime(sb(), containers=(ctr("a", RUNNING),)),
        PodActions(sandbox_id="sb0"),
        id="a running regular container means initialization is done",
    ),
]


def _normalise(actions: PodActions) -> PodActions:
    """Compare killed containers by name: ids are generated."""
    kills = tuple(k.name for k in actions.containers_to_kill)
    return PodActions(
        kill_pod=actions.kill_pod,
        create_sandbox=actions.create_sandbox,
        sandbox_id=actions.sandbox_id,
        attempt=actions.attempt,
        init_containers_to_start=actions.init_containers_to_start,
        containers_to_start=actions.containers_to_start,
        containers_to_kill=kills,  # type: ignore[arg-type]  # dict from the test's table
    )


@pytest.mark.parametrize(("spec", "state", "expected"), CASES)
def test_compute_pod_actions(spec: Pod, state: PodRuntimeState, expected: PodActions) -> None:
    assert _normalise(compute_pod_actions(spec, state)) == expected


def test_running_container_whose_spec_changed_is_restarted() -> None:
    spec = pod(containers=[container("a", image="localhost/busybox:v2")])
    old = ctr("a", RUNNING, hash=container_hash(spec.spec.containers[0]) + "0")
    actions = compute_pod_actions(spec, runtime(sb(), containers=(old,)))
    assert actions.containers_to_start == ("a",)
    assert actions.containers_to_kill == (
        KillContainer(old.id, "a", "Container a definition changed, will be restarted"),
    )


def test_running_container_with_unchanged_spec_is_kept() -> None:
    spec = pod(containers=[container("a")])
    same = ctr("a", RUNNING, hash=container_hash(spec.spec.containers[0]))
    assert compute_pod_actions(spec, runtime(sb(), containers=(same,))) == PodActions(
        sandbox_id="sb0"
    )


def test_deleted_pod_is_killed_and_nothing_starts() -> None:
    deleted = pod(containers=[container("a"), container("b")], deleted=True)
    actions = compute_pod_actions(deleted, runtime(sb(), containers=(ctr("a", EXITED, 1),)))
    assert actions == PodActions(kill_pod=True, sandbox_id="sb0")


def test_host_network_change_needs_a_new_sandbox() -> None:
    spec = pod(hostNetwork=True)
    actions = compute_pod_actions(spec, runtime(sb(host=False)))
    assert (actions.create_sandbox, actions.attempt) == (True, 1)
    same = compute_pod_actions(spec, runtime(sb(host=True, ip="")))
    assert same.create_sandbox is False


def test_a_container_in_unknown_state_is_killed_with_the_kubelets_message() -> None:
    lost = ctr("b", UNKNOWN)
    actions = compute_pod_actions(two(), runtime(sb(), containers=(ctr("a", RUNNING), lost)))
    assert actions.containers_to_kill == (
        KillContainer(
            lost.id, "b", 'Container is in "unknown" state, try killing it before restart'
        ),
    )


def test_an_init_container_in_unknown_state_is_killed_with_the_kubelets_message() -> None:
    lost = ctr("i1", UNKNOWN)
    actions = compute_pod_actions(with_init(), runtime(sb(), containers=(lost,)))
    assert actions.init_containers_to_start == ("i1",)
    assert actions.containers_to_kill == (
        KillContainer(
            lost.id, "i1", 'Init container is in "unknown" state, try killing it before restart'
        ),
    )
