"""Ephemeral containers (``kubectl debug``): the plan that starts each one once and never again,
the CRI namespace option that puts one in its target's PID namespace, and their statuses."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.events import container_field_path
from nodeagent.kuberuntime.actions import PodActions, compute_pod_actions
from nodeagent.kuberuntime.container import build_container_config
from nodeagent.kuberuntime.env import EnvInputs
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.kuberuntime.results import ContainerFailure
from nodeagent.kuberuntime.runtime_state import (
    ContainerRecord,
    ContainerState,
    PodRuntimeState,
    SandboxRecord,
)
from nodeagent.podspec import EphemeralContainer, Pod, ephemeral_forbidden_field, referenced_objects
from nodeagent.status import generate_pod_status
from nodeagent.testing.pods import container, pod

RUNNING, EXITED, CREATED, UNKNOWN = (
    ContainerState.RUNNING,
    ContainerState.EXITED,
    ContainerState.CREATED,
    ContainerState.UNKNOWN,
)
SB = SandboxRecord(id="sb0", ready=True, ip="10.0.0.2")
_ids = itertools.count(1)
S = 1_000_000_000
T0 = 1_767_225_600 * S  # 2026-01-01T00:00:00Z


def ctr(name: str, state: ContainerState, exit_code: int = 0) -> ContainerRecord:
    return ContainerRecord(
        id=f"{name}-{next(_ids)}",
        name=name,
        state=state,
        exit_code=exit_code,
        created_at=T0 + next(_ids) * S,
        started_at=T0 + 10 * S,
        finished_at=T0 + 20 * S if state is EXITED else 0,
        image="localhost/busybox:latest",
        image_ref="localhost/busybox@sha256:1111",
    )


def debug(name: str = "dbg", **extra: Any) -> dict[str, Any]:
    return container(name, command=["sh", "-c", "ps"], **extra)


def debugged(*ephemeral: dict[str, Any], restart_policy: str = "Always", **kw: Any) -> Pod:
    return pod(
        containers=[container("app", command=["sleep", "3600"])],
        ephemeralContainers=list(ephemeral),
        restart_policy=restart_policy,
        **kw,
    )


def state(*records: ContainerRecord, sandboxes: tuple[SandboxRecord, ...] = (SB,)) -> Any:
    return PodRuntimeState(uid="u", sandboxes=sandboxes, containers=records)


# --- the plan ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "records", "expected"),
    [
        pytest.param(
            debugged(debug()),
            (ctr("app", RUNNING),),
            PodActions(sandbox_id="sb0", ephemeral_containers_to_start=("dbg",)),
            id="added to a running pod: started",
        ),
        pytest.param(
            debugged(debug()),
            (ctr("dbg", RUNNING), ctr("app", RUNNING)),
            PodActions(sandbox_id="sb0"),
            id="running: left alone",
        ),
        pytest.param(
            debugged(debug()),
            (ctr("dbg", EXITED, 1), ctr("app", RUNNING)),
            PodActions(sandbox_id="sb0"),
            id="failed under restartPolicy Always: never restarted",
        ),
        pytest.param(
            debugged(debug()),
            (ctr("dbg", EXITED, 0), ctr("app", RUNNING)),
            PodActions(sandbox_id="sb0"),
            id="succeeded: never restarted",
        ),
        pytest.param(
            debugged(debug()),
            (ctr("dbg", CREATED), ctr("app", RUNNING)),
            PodActions(sandbox_id="sb0"),
            id="created but never started: not created again",
        ),
        pytest.param(
            debugged(debug()),
            (ctr("dbg", UNKNOWN), ctr("app", RUNNING)),
            PodActions(sandbox_id="sb0"),
            id="unknown: not started again",
        ),
        pytest.param(
            debugged(debug("one"), debug("two")),
            (ctr("one", EXITED), ctr("app", RUNNING)),
            PodActions(sandbox_id="sb0", ephemeral_containers_to_start=("two",)),
            id="a second one added: only it starts",
        ),
        pytest.param(
            pod(
                init_containers=[container("setup", command=["sleep", "60"])],
                containers=[container("app")],
                ephemeralContainers=[debug()],
            ),
            (ctr("setup", RUNNING),),
            PodActions(sandbox_id="sb0", ephemeral_containers_to_start=("dbg",)),
            id="while an init container runs: started anyway",
        ),
        pytest.param(
            debugged(debug(), deleted=True),
            (ctr("app", RUNNING),),
            PodActions(kill_pod=True, sandbox_id="sb0"),
            id="terminating pod: not started",
        ),
        pytest.param(
            debugged(debug(), restart_policy="Never"),
            (ctr("app", EXITED, 0),),
            PodActions(kill_pod=True, sandbox_id="sb0"),
            id="every app container done under Never: the pod stops, no debug container",
        ),
    ],
)
def test_plan(p: Pod, records: tuple[ContainerRecord, ...], expected: PodActions) -> None:
    assert compute_pod_actions(p, state(*records)) == expected


def test_a_pod_without_a_ready_sandbox_gets_one_before_any_ephemeral_container() -> None:
    p = debugged(debug())
    dead = SandboxRecord(id="sb0", ready=False, ip="10.0.0.2")
    actions = compute_pod_actions(p, state(ctr("app", EXITED, 1), sandboxes=(dead,)))
    assert (actions.create_sandbox, actions.containers_to_start) == (True, ("app",))
    assert actions.ephemeral_containers_to_start == ()


def test_ephemeral_containers_do_not_keep_a_finished_pod_alive() -> None:
    """Only the regular containers count: a running debug container does not keep a pod
    whose app has finished under restartPolicy Never."""
    p = debugged(debug(), restart_policy="Never")
    actions = compute_pod_actions(p, state(ctr("dbg", RUNNING), ctr("app", EXITED, 0)))
    assert actions.kill_pod


# --- the container config -----------------------------------------------------------------------


def config_for(p: Pod, target_id: str = "") -> Any:
    return build_container_config(
        p,
        p.spec.ephemeral_containers[0],
        image_ref="sha256:1",
        restart_count=0,
        settings=PodRuntimeSettings(node_name="n"),
        inputs=EnvInputs(),
        target_id=target_id,
    )


def test_a_target_puts_the_container_in_the_targets_pid_namespace() -> None:
    p = debugged(debug(targetContainerName="app"))
    options = config_for(p, "c0ffee").linux.security_context.namespace_options
    assert (options.pid, options.target_id) == (api.TARGET, "c0ffee")
    assert (options.network, options.ipc) == (api.POD, api.POD)


def test_without_a_target_the_container_has_its_own_pid_namespace() -> None:
    options = config_for(debugged(debug())).linux.security_context.namespace_options
    assert (options.pid, options.target_id) == (api.CONTAINER, "")


@pytest.mark.parametrize(
    ("spec", "pid"),
    [({"shareProcessNamespace": True}, api.POD), ({"hostPID": True}, api.NODE)],
)
def test_a_shared_pid_namespace_wins_over_the_target(spec: dict[str, Any], pid: int) -> None:
    p = debugged(debug(targetContainerName="app"), **spec)
    options = config_for(p, "c0ffee").linux.security_context.namespace_options
    assert (options.pid, options.target_id) == (pid, "")


def test_an_ephemeral_container_carries_the_kubelets_identity_labels() -> None:
    p = debugged(debug(stdin=True, tty=True))
    config = config_for(p)
    assert dict(config.labels) == {
        "io.kubernetes.pod.name": "web",
        "io.kubernetes.pod.namespace": "default",
        "io.kubernetes.pod.uid": p.uid,
        "io.kubernetes.container.name": "dbg",
    }
    assert config.annotations["io.kubernetes.container.restartCount"] == "0"
    assert (config.stdin, config.tty, config.log_path) == (True, True, "dbg/0.log")


def test_the_environment_of_an_ephemeral_container_is_fetched_too() -> None:
    p = debugged(debug(envFrom=[{"configMapRef": {"name": "dbg-config"}}]))
    assert referenced_objects(p) == ({"dbg-config"}, set())


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"ports": [{"containerPort": 80}]}, "ports"),
        ({"readinessProbe": {"exec": {"command": ["true"]}}}, "readinessProbe"),
        ({"lifecycle": {"postStart": {"exec": {"command": ["true"]}}}}, "lifecycle"),
        ({"resources": {"limits": {"cpu": "1"}}}, "resources"),
        ({}, None),
    ],
)
def test_fields_the_apiserver_refuses_are_named(extra: dict[str, Any], field: str | None) -> None:
    ephemeral = debugged(debug(**extra)).spec.ephemeral_containers[0]
    assert isinstance(ephemeral, EphemeralContainer)
    assert ephemeral_forbidden_field(ephemeral) == field


def test_events_name_the_ephemeral_container_by_its_field_path() -> None:
    assert container_field_path(debugged(debug()), "dbg") == "spec.ephemeralContainers{dbg}"


# --- the status ---------------------------------------------------------------------------------


def status_of(
    p: Pod,
    *records: ContainerRecord,
    reasons: dict[str, ContainerFailure] | None = None,
) -> dict[str, Any]:
    return generate_pod_status(
        p,
        state(*records),
        previous={},
        reasons=reasons or {},
        runtime_name="containerd",
        host_ips=("192.0.2.10",),
        now="2026-01-01T00:05:00Z",
    )


def test_no_ephemeral_containers_no_ephemeral_statuses() -> None:
    assert "ephemeralContainerStatuses" not in status_of(debugged(), ctr("app", RUNNING))


def test_a_new_ephemeral_container_waits_with_container_creating() -> None:
    s = status_of(debugged(debug()), ctr("app", RUNNING))
    assert s["ephemeralContainerStatuses"] == [
        {
            "name": "dbg",
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "lastState": {},
            "ready": False,
            "restartCount": 0,
            "image": "localhost/busybox:latest",
            "imageID": "",
        }
    ]


def test_a_running_ephemeral_container_is_reported_never_ready_and_not_counted() -> None:
    dbg = ctr("dbg", RUNNING)
    s = status_of(debugged(debug()), dbg, ctr("app", RUNNING))
    assert s["ephemeralContainerStatuses"] == [
        {
            "name": "dbg",
            "state": {"running": {"startedAt": "2026-01-01T00:00:10Z"}},
            "lastState": {},
            "ready": False,
            "restartCount": 0,
            "image": "localhost/busybox:latest",
            "imageID": "localhost/busybox@sha256:1111",
            "containerID": f"containerd://{dbg.id}",
        }
    ]
    assert [c["name"] for c in s["containerStatuses"]] == ["app"]
    assert {c["type"]: c["status"] for c in s["conditions"]}["Ready"] == "True"


def test_an_exited_ephemeral_container_stays_terminated_and_does_not_end_the_pod() -> None:
    s = status_of(debugged(debug()), ctr("dbg", EXITED, 3), ctr("app", RUNNING))
    [dbg] = s["ephemeralContainerStatuses"]
    assert dbg["state"]["terminated"]["exitCode"] == 3
    assert s["phase"] == "Running"


def test_a_failed_start_shows_its_reason_until_the_container_exists() -> None:
    why = {"dbg": ContainerFailure("CreateContainerConfigError", "unable to find target x")}
    s = status_of(debugged(debug()), ctr("app", RUNNING), reasons=why)
    assert s["ephemeralContainerStatuses"][0]["state"] == {
        "waiting": {"reason": "CreateContainerConfigError", "message": "unable to find target x"}
    }
    s = status_of(debugged(debug()), ctr("dbg", EXITED, 1), ctr("app", RUNNING), reasons=why)
    assert "terminated" in s["ephemeralContainerStatuses"][0]["state"]


def test_ephemeral_statuses_are_sorted_by_name() -> None:
    s = status_of(debugged(debug("zz"), debug("aa")), ctr("app", RUNNING))
    assert [c["name"] for c in s["ephemeralContainerStatuses"]] == ["aa", "zz"]
