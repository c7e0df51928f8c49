"""Pod status as the kubelet reports it: phase, conditions, container states and reasons."""

from __future__ import annotations

from typing import Any

from nodeagent.kuberuntime.runtime_state import (
    ContainerRecord,
    ContainerState,
    PodRuntimeState,
    SandboxRecord,
)
from nodeagent.podspec import Pod, decode_pod
from nodeagent.status import (
    WaitingReason,
    generate_pod_status,
    rejected_status,
    with_container_readiness,
)
from nodeagent.status.conditions import needs_readiness_reconcile
from nodeagent.status.manager import status_patch
from nodeagent.testing.pods import container, pod, pod_object

S = 1_000_000_000
T0 = 1_767_225_600 * S  # 2026-01-01T00:00:00Z
NOW = "2026-01-01T00:05:00Z"
SANDBOX = SandboxRecord(id="sb", ready=True, ip="10.88.0.7")
IMAGE = "localhost/busybox:latest"
IMAGE_REF = "localhost/busybox@sha256:1111"


def record(
    name: str,
    state: ContainerState,
    *,
    id: str = "c1",
    exit_code: int = 0,
    reason: str = "",
    restarts: int = 0,
    started: int = 10,
    finished: int = 20,
    created: int = 5,
) -> ContainerRecord:
    exited = state is ContainerState.EXITED
    return ContainerRecord(
        id=id,
        name=name,
        state=state,
        restart_count=restarts,
        created_at=T0 + created * S,
        started_at=T0 + started * S,
        finished_at=T0 + finished * S if exited else 0,
        exit_code=exit_code,
        reason=reason,
        image=IMAGE,
        image_ref=IMAGE_REF,
    )


def status(
    p: Pod,
    *records: ContainerRecord,
    sandboxes: tuple[SandboxRecord, ...] = (SANDBOX,),
    reasons: dict[str, WaitingReason] | None = None,
    previous: dict[str, Any] | None = None,
    terminal: bool = False,
) -> dict[str, Any]:
    runtime = PodRuntimeState(uid=p.uid, sandboxes=sandboxes, containers=records)
    return generate_pod_status(
        p,
        runtime,
        previous=previous or {},
        reasons=reasons or {},
        runtime_name="containerd",
        host_ips=("192.0.2.10",),
        now=NOW,
        terminal=terminal,
    )


def conditions(s: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c.get("reason", ""), c.get("message", "")) for c in s["conditions"]
    }


def test_new_pod_waits_with_container_creating() -> None:
    s = status(pod(containers=[container("app")]), sandboxes=())
    assert s["phase"] == "Pending"
    assert s["containerStatuses"] == [
        {
            "name": "app",
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "lastState": {},
            "ready": False,
            "restartCount": 0,
            "image": IMAGE,
            "imageID": "",
            "started": False,
        }
    ]
    assert conditions(s) == {
        "PodReadyToStartContainers": ("False", "", ""),
        "Initialized": ("True", "", ""),
        "Ready": ("False", "ContainersNotReady", "containers with unready status: [app]"),
        "ContainersReady": ("False", "ContainersNotReady", "containers with unready status: [app]"),
        "PodScheduled": ("True", "", ""),
    }
    assert "podIP" not in s
    assert (s["hostIP"], s["hostIPs"]) == ("192.0.2.10", [{"ip": "192.0.2.10"}])
    assert (s["startTime"], s["qosClass"]) == (NOW, "BestEffort")


def test_running_pod_is_ready_with_container_id_image_id_and_pod_ip() -> None:
    s = status(pod(), record("app", ContainerState.RUNNING, id="abc"))
    assert s["phase"] == "Running"
    assert s["containerStatuses"] == [
        {
            "name": "app",
            "state": {"running": {"startedAt": "2026-01-01T00:00:10Z"}},
            "lastState": {},
            "ready": True,
            "restartCount": 0,
            "image": IMAGE,
            "imageID": IMAGE_REF,
            "containerID": "containerd://abc",
            "started": True,
        }
    ]
    assert {k: v[0] for k, v in conditions(s).items()} == dict.fromkeys(
        ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"),
        "True",
    )
    assert (s["podIP"], s["podIPs"]) == ("10.88.0.7", [{"ip": "10.88.0.7"}])


def test_crash_loop_waits_with_backoff_reason_and_keeps_the_last_termination() -> None:
    message = "back-off 10s restarting failed container=app pod=web_default(u)"
    s = status(
        pod(),
        record("app", ContainerState.EXITED, id="new", exit_code=1, reason="Error", restarts=2),
        record("app", ContainerState.EXITED, id="old", exit_code=1, reason="Error", restarts=1),
        reasons={"app": WaitingReason("CrashLoopBackOff", message)},
    )
    [app] = s["containerStatuses"]
    assert app["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
    assert app["lastState"] == {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "startedAt": "2026-01-01T00:00:10Z",
            "finishedAt": "2026-01-01T00:00:20Z",
            "containerID": "containerd://new",
        }
    }
    assert (app["restartCount"], app["ready"], app["containerID"]) == (2, False, "containerd://new")
    assert s["phase"] == "Running"  # restarting under restartPolicy Always
    assert conditions(s)["Ready"] == (
        "False",
        "ContainersNotReady",
        "containers with unready status: [app]",
    )


def test_exited_container_without_a_recorded_reason_shows_terminated() -> None:
    s = status(pod(), record("app", ContainerState.EXITED, exit_code=137, reason="OOMKilled"))
    [app] = s["containerStatuses"]
    assert app["state"]["terminated"]["reason"] == "OOMKilled"
    assert app["state"]["terminated"]["exitCode"] == 137


def test_never_and_exit_zero_is_succeeded_completed() -> None:
    s = status(
        pod(restart_policy="Never"),
        record("app", ContainerState.EXITED, exit_code=0, reason="Completed"),
    )
    assert s["phase"] == "Succeeded"
    assert s["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert conditions(s) == {
        "PodReadyToStartContainers": ("True", "", ""),
        "Initialized": ("True", "PodCompleted", ""),
        "Ready": ("False", "PodCompleted", ""),
        "ContainersReady": ("False", "PodCompleted", ""),
        "PodScheduled": ("True", "", ""),
    }


def test_never_and_exit_one_is_failed() -> None:
    s = status(
        pod(restart_policy="Never"),
        record("app", ContainerState.EXITED, exit_code=1, reason="Error"),
    )
    assert s["phase"] == "Failed"
    assert conditions(s)["Ready"] == ("False", "PodFailed", "")


def test_image_pull_failures_wait_with_their_reason() -> None:
    message = 'Back-off pulling image "nope:1"'
    s = status(
        pod(containers=[container("app", image="nope:1")]),
        reasons={"app": WaitingReason("ImagePullBackOff", message)},
    )
    [app] = s["containerStatuses"]
    assert app["state"] == {"waiting": {"reason": "ImagePullBackOff", "message": message}}
    assert (app["image"], s["phase"]) == ("nope:1", "Pending")


def test_init_containers_hold_the_regular_ones_in_pod_initializing() -> None:
    p = pod(init_containers=[container("init")], containers=[container("app")])
    s = status(p, record("init", ContainerState.RUNNING))
    assert s["initContainerStatuses"][0]["state"] == {
        "running": {"startedAt": "2026-01-01T00:00:10Z"}
    }
    assert s["initContainerStatuses"][0]["ready"] is False
    assert s["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert s["phase"] == "Pending"
    assert conditions(s)["Initialized"] == (
        "False",
        "ContainersNotInitialized",
        "containers with incomplete status: [init]",
    )


def test_completed_init_container_is_ready_and_pod_initialized() -> None:
    p = pod(init_containers=[container("init")], containers=[container("app")])
    s = status(
        p,
        record("app", ContainerState.RUNNING, id="a", created=30),
        record("init", ContainerState.EXITED, id="i", exit_code=0, reason="Completed"),
    )
    assert s["initContainerStatuses"][0]["ready"] is True
    assert conditions(s)["Initialized"] == ("True", "", "")
    assert s["phase"] == "Running"


def test_failed_init_container_under_never_fails_the_pod() -> None:
    p = pod(
        init_containers=[container("init")], containers=[container("app")], restart_policy="Never"
    )
    s = status(p, record("init", ContainerState.EXITED, exit_code=2, reason="Error"))
    assert s["phase"] == "Failed"


def test_config_error_waits_with_create_container_config_error() -> None:
    why = WaitingReason("CreateContainerConfigError", 'configmap "cfg" not found')
    s = status(pod(), reasons={"app": why})
    assert s["containerStatuses"][0]["state"] == {
        "waiting": {
            "reason": "CreateContainerConfigError",
            "message": 'configmap "cfg" not found',
        }
    }


def test_transition_times_and_start_time_stay_while_status_is_unchanged() -> None:
    p = pod()
    first = status(p, record("app", ContainerState.RUNNING))
    later = generate_pod_status(
        p,
        PodRuntimeState(
            uid=p.uid, sandboxes=(SANDBOX,), containers=(record("app", ContainerState.RUNNING),)
        ),
        previous=first,
        reasons={},
        runtime_name="containerd",
        host_ips=("192.0.2.10",),
        now="2026-01-01T01:00:00Z",
    )
    assert later == first
    by_type = {c["type"]: c for c in later["conditions"]}
    assert by_type["Ready"]["lastTransitionTime"] == NOW
    assert by_type["PodScheduled"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_terminal_phase_is_never_left() -> None:
    s = status(
        pod(),
        record("app", ContainerState.RUNNING),
        previous={"phase": "Succeeded", "reason": "R", "message": "M"},
    )
    assert (s["phase"], s["reason"], s["message"]) == ("Succeeded", "R", "M")


def test_killed_pod_is_failed_when_terminal() -> None:
    s = status(
        pod(deleted=True),
        record("app", ContainerState.EXITED, exit_code=137, reason="Error"),
        sandboxes=(SandboxRecord(id="sb", ready=False),),
        previous={"podIP": "10.88.0.7", "podIPs": [{"ip": "10.88.0.7"}]},
        terminal=True,
    )
    assert s["phase"] == "Failed"
    assert s["podIP"] == "10.88.0.7"  # kept after the sandbox stopped


def test_other_components_conditions_are_kept_first() -> None:
    p = pod()
    p.status["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    )
    s = status(p, record("app", ContainerState.RUNNING))
    assert [c["type"] for c in s["conditions"]] == [
        "DisruptionTarget",
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]


def test_rejected_pod_status() -> None:
    s = rejected_status(
        pod(),
        reason="OutOfcpu",
        message="Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000",
        now=NOW,
    )
    assert s == {
        "phase": "Failed",
        "reason": "OutOfcpu",
        "message": "Pod was rejected: Node didn't have enough resource: cpu, requested: 3000, "
        "used: 0, capacity: 2000",
        "startTime": NOW,
        "qosClass": "BestEffort",
    }


GATES = [{"conditionType": "example.com/lb"}, {"conditionType": "example.com/dns"}]


def gated(*others: dict[str, str]) -> Pod:
    p = pod(readinessGates=GATES)
    p.status["conditions"].extend(others)
    return p


def test_ready_waits_for_every_readiness_gate_with_the_kubelets_messages() -> None:
    s = status(
        gated({"type": "example.com/lb", "status": "False"}), record("app", ContainerState.RUNNING)
    )
    assert conditions(s)["ContainersReady"] == ("True", "", "")
    assert conditions(s)["Ready"] == (
        "False",
        "ReadinessGatesNotReady",
        'the status of pod readiness gate "example.com/lb" is not "True", but False, '
        'corresponding condition of pod readiness gate "example.com/dns" does not exist.',
    )


def test_ready_once_every_gate_condition_is_true() -> None:
    p = gated(
        {"type": "example.com/lb", "status": "True"},
        {"type": "example.com/dns", "status": "True"},
    )
    s = status(p, record("app", ContainerState.RUNNING))
    assert conditions(s)["Ready"] == ("True", "", "")
    # the gate conditions are the pod's, kept ahead of the kubelet's own
    assert [c["type"] for c in s["conditions"]][:2] == ["example.com/lb", "example.com/dns"]


def test_unready_containers_decide_ready_before_the_gates() -> None:
    p = gated({"type": "example.com/lb", "status": "Unknown"})
    s = status(p)  # no container yet
    assert conditions(s)["Ready"] == (
        "False",
        "ContainersNotReady",
        "containers with unready status: [app]",
    )


def test_a_gate_status_other_than_false_is_named_as_it_is() -> None:
    p = pod(readinessGates=[{"conditionType": "x"}])
    p.status["conditions"].append({"type": "x", "status": "Unknown"})
    s = status(p, record("app", ContainerState.RUNNING))
    assert (
        conditions(s)["Ready"][2]
        == 'the status of pod readiness gate "x" is not "True", but Unknown'
    )


def _with(p: Pod, s: dict[str, Any]) -> Pod:
    """``p`` as the API serves it once ``s`` is its status."""
    body = pod_object(uid=p.uid, readinessGates=list(p.spec.readiness_gates))
    body["status"] = s
    return decode_pod(body)


def test_a_moved_gate_asks_for_a_sync_and_our_own_echo_does_not() -> None:
    p = gated({"type": "example.com/lb", "status": "True"})
    s = status(p, record("app", ContainerState.RUNNING))
    echoed = _with(p, s)
    assert not needs_readiness_reconcile(echoed)  # our own patch coming back
    s["conditions"].append({"type": "example.com/dns", "status": "True"})
    assert needs_readiness_reconcile(_with(p, s))  # a controller set the second gate
    assert not needs_readiness_reconcile(_with(pod(), status(pod())))  # no gates: never


def test_evict_fails_the_pod_and_its_readiness() -> None:
    s = generate_pod_status(
        pod(activeDeadlineSeconds=5),
        PodRuntimeState(
            uid="u", sandboxes=(SANDBOX,), containers=(record("app", ContainerState.RUNNING),)
        ),
        previous={"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
        reasons={},
        runtime_name="containerd",
        host_ips=("192.0.2.10",),
        now=NOW,
        evict=("DeadlineExceeded", "Pod was active on the node longer than the specified deadline"),
    )
    assert (s["phase"], s["reason"], s["message"]) == (
        "Failed",
        "DeadlineExceeded",
        "Pod was active on the node longer than the specified deadline",
    )
    assert conditions(s)["Ready"][:2] == ("False", "PodFailed")
    assert conditions(s)["ContainersReady"][:2] == ("False", "PodFailed")
    assert s["startTime"] == "2026-01-01T00:00:00Z"


def test_a_failed_pod_whose_killed_containers_exit_zero_stays_failed() -> None:
    s = status(
        pod(),
        record("app", ContainerState.EXITED, exit_code=0),
        previous={"phase": "Failed", "reason": "DeadlineExceeded", "message": "M"},
        terminal=True,
    )
    assert (s["phase"], s["reason"], s["message"]) == ("Failed", "DeadlineExceeded", "M")


def test_the_status_patch_carries_only_the_agents_conditions_and_replaces_ip_lists() -> None:
    s = status(
        gated({"type": "example.com/lb", "status": "True"}), record("app", ContainerState.RUNNING)
    )
    s["conditions"].insert(0, {"type": "DisruptionTarget", "status": "True"})
    patch = status_patch(s)
    assert [c["type"] for c in patch["conditions"]] == [
        "DisruptionTarget",
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
        "PodResizeInProgress",
        "PodResizePending",
    ]
    # resize conditions the agent no longer reports are deleted, not left behind
    assert patch["conditions"][-2:] == [
        {"type": "PodResizeInProgress", "$patch": "delete"},
        {"type": "PodResizePending", "$patch": "delete"},
    ]
    assert patch["podIPs"] == [{"ip": "10.88.0.7"}, {"$patch": "replace"}]
    assert patch["hostIPs"] == [{"ip": "192.0.2.10"}, {"$patch": "replace"}]
    assert [c["type"] for c in s["conditions"]][1] == "example.com/lb"  # the input is untouched


def test_a_condition_without_reason_or_message_deletes_the_old_ones() -> None:
    s = status(pod(), record("app", ContainerState.RUNNING))
    s["conditions"].append({"type": "example.com/lb", "status": "True"})

    by_type = {c["type"]: c for c in status_patch(s)["conditions"]}

    assert by_type["Ready"]["status"] == "True"
    assert (by_type["Ready"]["reason"], by_type["Ready"]["message"]) == (None, None)
    unready = status(pod(), record("app", ContainerState.EXITED, exit_code=1))
    ready = {c["type"]: c for c in status_patch(unready)["conditions"]}["Ready"]
    assert ready["reason"] == "ContainersNotReady"  # a reason it has is sent as it is
    assert "example.com/lb" not in by_type  # nor is another's condition touched


LATER = "2026-01-01T00:06:00Z"


def test_a_readiness_result_moves_the_ready_flag_and_both_conditions() -> None:
    p = pod(deleted=True)  # terminating: the worker is busy killing, readiness still counts
    before = status(p, record("app", ContainerState.RUNNING))
    assert conditions(before)["Ready"] == ("True", "", "")

    after = with_container_readiness(p, before, {"c1": False}, now=LATER)

    assert after is not None
    assert after["containerStatuses"][0]["ready"] is False
    assert after["containerStatuses"][0]["state"] == before["containerStatuses"][0]["state"]
    unready = ("False", "ContainersNotReady", "containers with unready status: [app]")
    assert conditions(after)["Ready"] == unready
    assert conditions(after)["ContainersReady"] == unready
    times = {c["type"]: c["lastTransitionTime"] for c in after["conditions"]}
    assert times["Ready"] == times["ContainersReady"] == LATER
    assert [c["type"] for c in after["conditions"]] == [c["type"] for c in before["conditions"]]
    assert {k: v for k, v in after.items() if k not in ("conditions", "containerStatuses")} == {
        k: v for k, v in before.items() if k not in ("conditions", "containerStatuses")
    }
    assert before["containerStatuses"][0]["ready"] is True  # the input is left alone

    again = with_container_readiness(p, after, {"c1": True}, now=LATER)
    assert again is not None and conditions(again)["Ready"] == ("True", "", "")


def test_a_readiness_result_that_changes_nothing_or_is_someone_elses_gives_none() -> None:
    p = pod()
    running = status(p, record("app", ContainerState.RUNNING))
    exited = status(p, record("app", ContainerState.EXITED, exit_code=1))

    assert with_container_readiness(p, running, {"c1": True}, now=LATER) is None
    assert with_container_readiness(p, running, {"old-container": False}, now=LATER) is None
    assert with_container_readiness(p, exited, {"c1": True}, now=LATER) is None


def test_a_sidecars_readiness_result_moves_its_init_status_and_the_pod() -> None:
    sidecar = container("proxy", command=["sleep", "3600"], restartPolicy="Always")
    p = pod(init_containers=[sidecar])
    before = status(
        p,
        record("proxy", ContainerState.RUNNING, id="s1"),
        record("app", ContainerState.RUNNING, id="c1"),
    )
    assert conditions(before)["Ready"] == ("True", "", "")

    after = with_container_readiness(p, before, {"s1": False}, now=LATER)

    assert after is not None
    assert after["initContainerStatuses"][0]["ready"] is False
    assert after["containerStatuses"][0]["ready"] is True
    assert conditions(after)["Ready"] == (
        "False",
        "ContainersNotReady",
        "containers with unready status: [proxy]",
    )
