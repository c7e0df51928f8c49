"""Sidecar containers (init containers with ``restartPolicy: Always``): the plan that starts
them in order and keeps them running, the phase and conditions they count in, and the order in
which they stop (app containers first, then sidecars in reverse), as the kubelet does."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from nodeagent.kuberuntime.actions import KillContainer, PodActions, compute_pod_actions
from nodeagent.kuberuntime.env import EnvInputs
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.kuberuntime.runtime_state import (
    ContainerRecord,
    ContainerState,
    PodRuntimeState,
    SandboxRecord,
)
from nodeagent.kuberuntime.termination_order import TerminationOrdering, stop_prerequisites
from nodeagent.podspec import Pod
from nodeagent.status import generate_pod_status
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX, MemoryFiles, container, pod

RUNNING, EXITED, CREATED, UNKNOWN = (
    ContainerState.RUNNING,
    ContainerState.EXITED,
    ContainerState.CREATED,
    ContainerState.UNKNOWN,
)
_ids = itertools.count(1)
SB = SandboxRecord(id="sb0", ready=True, ip="10.0.0.2")


def ctr(name: str, state: ContainerState, exit_code: int = 0) -> ContainerRecord:
    return ContainerRecord(id=f"{name}-{next(_ids)}", name=name, state=state, exit_code=exit_code)


def runtime(*containers: ContainerRecord) -> PodRuntimeState:
    return PodRuntimeState(uid="u", sandboxes=(SB,), containers=containers)


def meshed(restart_policy: str = "Always") -> Pod:
    """proxy (sidecar), setup (plain init), agent (sidecar), then app."""
    return pod(
        init_containers=[
            container("proxy", restartPolicy="Always"),
            container("setup"),
            container("agent", restartPolicy="Always"),
        ],
        containers=[container("app")],
        restart_policy=restart_policy,
    )


def plan(p: Pod, *records: ContainerRecord) -> PodActions:
    actions = compute_pod_actions(p, runtime(*records))
    return PodActions(
        kill_pod=actions.kill_pod,
        init_containers_to_start=actions.init_containers_to_start,
        containers_to_start=actions.containers_to_start,
        containers_to_kill=tuple(
            KillContainer("", k.name, k.message) for k in actions.containers_to_kill
        ),
    )


def test_a_new_sandbox_starts_with_the_first_init_container() -> None:
    actions = compute_pod_actions(meshed(), PodRuntimeState(uid="u"))
    assert (actions.create_sandbox, actions.init_containers_to_start) == (True, ("proxy",))


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        pytest.param(
            (ctr("proxy", RUNNING),),
            PodActions(init_containers_to_start=("setup",)),
            id="sidecar started: next init",
        ),
        pytest.param(
            (ctr("setup", RUNNING), ctr("proxy", RUNNING)),
            PodActions(),
            id="plain init running: wait",
        ),
        pytest.param(
            (ctr("setup", EXITED), ctr("proxy", RUNNING)),
            PodActions(init_containers_to_start=("agent",)),
            id="plain init done: next",
        ),
        pytest.param(
            (ctr("agent", RUNNING), ctr("setup", EXITED), ctr("proxy", RUNNING)),
            PodActions(containers_to_start=("app",)),
            id="last sidecar started: app",
        ),
        pytest.param(
            (ctr("setup", EXITED), ctr("proxy", EXITED, 1)),
            PodActions(init_containers_to_start=("proxy", "agent")),
            id="a sidecar that exited is restarted with the next init",
        ),
        pytest.param(
            (ctr("app", RUNNING), ctr("agent", EXITED, 0), ctr("proxy", RUNNING)),
            PodActions(init_containers_to_start=("agent",)),
            id="after init: an exited sidecar restarts, even with code 0",
        ),
        pytest.param(
            (ctr("app", RUNNING), ctr("proxy", RUNNING)),
            PodActions(init_containers_to_start=("agent",)),
            id="after init: a removed sidecar is started again, plain inits are not",
        ),
        pytest.param(
            (ctr("app", RUNNING), ctr("agent", UNKNOWN), ctr("proxy", RUNNING)),
            PodActions(
                init_containers_to_start=("agent",),
                containers_to_kill=(
                    KillContainer(
                        "",
                        "agent",
                        'Init container is in "unknown" state, try killing it before restart',
                    ),
                ),
            ),
            id="a sidecar in unknown state is killed and restarted",
        ),
    ],
)
def test_sidecar_plan(records: tuple[ContainerRecord, ...], expected: PodActions) -> None:
    assert plan(meshed(), *records) == expected


def test_never_pod_kills_its_sidecars_once_the_app_has_finished() -> None:
    p = meshed("Never")
    done = (
        ctr("app", EXITED, 0),
        ctr("agent", RUNNING),
        ctr("setup", EXITED),
        ctr("proxy", RUNNING),
    )
    assert plan(p, *done) == PodActions(kill_pod=True)


def test_a_failed_plain_init_under_never_still_kills_the_pod() -> None:
    p = meshed("Never")
    assert plan(p, ctr("setup", EXITED, 1), ctr("proxy", RUNNING)) == PodActions(kill_pod=True)


def test_a_sidecar_with_a_startup_probe_holds_the_next_init_until_started() -> None:
    p = pod(
        init_containers=[
            container(
                "proxy", restartPolicy="Always", startupProbe={"exec": {"command": ["true"]}}
            ),
            container("setup"),
        ],
        containers=[container("app")],
    )
    proxy = ctr("proxy", RUNNING)
    state = runtime(proxy)
    assert compute_pod_actions(p, state, startup={}).init_containers_to_start == ()
    started = compute_pod_actions(p, state, startup={proxy.id: True})
    assert started.init_containers_to_start == ("setup",)
    failed = compute_pod_actions(p, state, startup={proxy.id: False})
    assert failed.init_containers_to_start == ("proxy",)
    assert failed.containers_to_kill[0].message == "Init container proxy failed startup probe"


def test_a_sidecar_failing_its_startup_probe_is_killed_with_the_probe_grace() -> None:
    # e2e "restartable init container should override timeoutGracePeriodSeconds when
    # StartupProbe field is set": the pod's long grace period would hold the restart back
    probe = {"exec": {"command": ["started"]}, "terminationGracePeriodSeconds": 5}
    p = pod(
        init_containers=[container("proxy", restartPolicy="Always", startupProbe=probe)],
        containers=[container("app")],
        grace=500,
    )
    proxy = ctr("proxy", RUNNING)
    actions = compute_pod_actions(p, runtime(proxy), startup={proxy.id: False})
    assert actions.containers_to_kill == (
        KillContainer(proxy.id, "proxy", "Init container proxy failed startup probe", 5),
    )
    assert actions.init_containers_to_start == ("proxy",)


def test_a_sidecar_failing_liveness_is_restarted_with_the_probe_grace_the_app_kept() -> None:
    probe = {"exec": {"command": ["alive"]}, "terminationGracePeriodSeconds": 3}
    p = pod(
        init_containers=[container("proxy", restartPolicy="Always", livenessProbe=probe)],
        containers=[container("app")],
        restart_policy="Never",  # a sidecar is restarted whatever the pod's policy
    )
    proxy, app = ctr("proxy", RUNNING), ctr("app", RUNNING)
    state = runtime(proxy, app)
    assert compute_pod_actions(p, state, {}) == PodActions(sandbox_id="sb0")
    actions = compute_pod_actions(p, state, {proxy.id: "liveness"})
    assert actions.containers_to_kill == (
        KillContainer(proxy.id, "proxy", "Init container proxy failed liveness probe", 3),
    )
    assert actions.init_containers_to_start == ("proxy",)
    assert actions.containers_to_start == ()
    assert not actions.kill_pod


def test_a_sidecar_an_in_place_resize_restarts_is_killed_and_started_again_the_app_kept() -> None:
    p = pod(
        init_containers=[container("proxy", restartPolicy="Always"), container("setup")],
        containers=[container("app")],
        restart_policy="Never",
    )
    proxy, setup, app = ctr("proxy", RUNNING), ctr("setup", EXITED), ctr("app", RUNNING)
    state = runtime(proxy, setup, app)
    message = "Container proxy resize requires restart"
    actions = compute_pod_actions(p, state, {}, resize_restarts={"proxy": message})
    assert actions.containers_to_kill == (KillContainer(proxy.id, "proxy", message),)
    assert actions.init_containers_to_start == ("proxy",)
    assert actions.containers_to_start == ()  # the app container keeps running
    assert not actions.kill_pod


def test_a_sidecar_whose_liveness_failed_is_killed_once_even_when_a_resize_restarts_it() -> None:
    probe = {"exec": {"command": ["alive"]}}
    p = pod(
        init_containers=[container("proxy", restartPolicy="Always", livenessProbe=probe)],
        containers=[container("app")],
    )
    proxy, app = ctr("proxy", RUNNING), ctr("app", RUNNING)
    actions = compute_pod_actions(
        p,
        runtime(proxy, app),
        {proxy.id: "liveness"},
        resize_restarts={"proxy": "Container proxy resize requires restart"},
    )
    assert [k.message for k in actions.containers_to_kill] == [
        "Init container proxy failed liveness probe"
    ]
    assert actions.init_containers_to_start == ("proxy",)


# --- status -------------------------------------------------------------------------


def status_of(p: Pod, *records: ContainerRecord, terminal: bool = False) -> dict[str, Any]:
    return generate_pod_status(
        p,
        runtime(*records),
        previous={},
        reasons={},
        runtime_name="containerd",
        host_ips=("192.0.2.10",),
        now="2026-01-01T00:00:00Z",
        terminal=terminal,
    )


def conditions(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_running_sidecars_are_ready_started_and_do_not_block_initialized() -> None:
    p = meshed()
    status = status_of(
        p, ctr("app", RUNNING), ctr("agent", RUNNING), ctr("setup", EXITED), ctr("proxy", RUNNING)
    )
    assert status["phase"] == "Running"
    proxy = status["initContainerStatuses"][0]
    assert (proxy["name"], proxy["ready"], proxy["started"]) == ("proxy", True, True)
    assert conditions(status)["Initialized"] == "True"
    assert conditions(status)["Ready"] == "True"


def test_a_starting_pod_with_a_sidecar_is_pending_and_not_initialized() -> None:
    status = status_of(meshed(), ctr("proxy", RUNNING))
    assert status["phase"] == "Pending"
    initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert initialized["message"] == "containers with incomplete status: [setup agent]"


def test_an_exited_sidecar_makes_the_pod_unready() -> None:
    p = meshed()
    status = status_of(
        p, ctr("app", RUNNING), ctr("agent", EXITED, 1), ctr("setup", EXITED), ctr("proxy", RUNNING)
    )
    assert status["phase"] == "Running"
    ready = next(c for c in status["conditions"] if c["type"] == "ContainersReady")
    assert ready["message"] == "containers with unready status: [agent]"


def test_a_never_pod_succeeds_with_its_app_whatever_its_killed_sidecars_say() -> None:
    p = meshed("Never")
    status = status_of(
        p,
        ctr("app", EXITED, 0),
        ctr("agent", EXITED, 137),
        ctr("setup", EXITED),
        ctr("proxy", EXITED, 143),
        terminal=True,
    )
    assert status["phase"] == "Succeeded"


# --- termination order ---------------------------------------------------------------


def test_sidecars_wait_for_the_apps_and_the_sidecars_declared_after_them() -> None:
    assert stop_prerequisites(meshed()) == {"agent": ("app",), "proxy": ("app", "agent")}


@pytest.mark.looptime
async def test_kill_pod_stops_the_app_then_the_sidecars_in_reverse_order() -> None:
    clock = LoopClock()
    fake = FakeRuntime(clock=clock)
    fake.add_image(BUSYBOX)
    manager = RuntimeManager(
        runtime=fake,
        images=fake,
        settings=PodRuntimeSettings(node_name="n"),
        clock=clock,
        files=MemoryFiles(),
    )
    p = pod(
        "web",
        uid="u-1",
        grace=20,
        init_containers=[
            container("proxy", restartPolicy="Always"),
            container("agent", restartPolicy="Always"),
        ],
        containers=[container("app", lifecycle={"preStop": {"sleep": {"seconds": 5}}})],
    )
    for _ in range(3):
        state = await manager.pod_state(p.uid)
        await manager.sync_pod(p, state, inputs=EnvInputs(), host_dns=ResolvConf())
    state = await manager.pod_state(p.uid)
    assert sorted(c.name for c in state.running()) == ["agent", "app", "proxy"]
    loop = asyncio.get_running_loop()
    stopped: list[tuple[str, float, int]] = []
    stop = fake.stop_container

    async def record(container_id: str, grace_period: int) -> None:
        name = next(c.name for c in state.containers if c.id == container_id)
        stopped.append((name, loop.time(), grace_period))
        await stop(container_id, grace_period)

    fake.stop_container = record  # type: ignore[method-assign]  # spy on the order
    start = loop.time()
    await manager.kill_pod(p, state, grace=20)
    assert [(n, round(t - start, 2), g) for n, t, g in stopped] == [
        ("app", 5.0, 15),
        ("agent", 5.0, 15),
        ("proxy", 5.0, 15),
    ]


@pytest.mark.looptime
async def test_a_sidecar_whose_turn_does_not_come_is_stopped_when_its_grace_runs_out() -> None:
    p = meshed()
    ordering = TerminationOrdering(p, ["app", "proxy"], monotonic=asyncio.get_running_loop().time)
    waited = await ordering.wait_for_turn("proxy", 3)
    assert waited == pytest.approx(3, abs=0.01)
    ordering.terminated("app")
    assert await ordering.wait_for_turn("proxy", 3) == 0
