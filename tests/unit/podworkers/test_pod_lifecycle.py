"""Pods from the API to the runtime and back, over the fakes, in virtual time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pod_stack import HOST_IP, NODE, Stack, make_runtime, running_stack, until

from nodeagent.apiserver import NODES, PODS, PatchType
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_NAME, POD_NAMESPACE, POD_UID
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import container, pod_object

pytestmark = pytest.mark.looptime

S = 1e9


def seed(server: FakeApiServer, name: str = "web", **kw: Any) -> dict[str, Any]:
    body = pod_object(name, node=NODE, **kw)
    del body["metadata"]["uid"]  # the server assigns one
    return server.seed(PODS, body)


def container_status(pod: dict[str, Any] | None, name: str = "app") -> dict[str, Any]:
    assert pod is not None
    return next(c for c in pod["status"].get("containerStatuses", []) if c["name"] == name)


def phase(pod: dict[str, Any] | None) -> str:
    return str((pod or {}).get("status", {}).get("phase", ""))


async def test_pod_runs_and_reports_running_with_ip_and_container_id(stack: Stack) -> None:
    obj = seed(stack.server)
    uid = obj["metadata"]["uid"]
    pod = await until(lambda: phase(stack.pod("web")) == "Running" and stack.pod("web"))

    [sandbox] = await stack.runtime.list_pod_sandbox()
    assert dict(sandbox.labels) == {
        "app": "web",
        POD_NAME: "web",
        POD_NAMESPACE: "default",
        POD_UID: uid,
    }
    [ctr] = await stack.containers("app")
    status = pod["status"]
    assert status["podIP"] == "10.88.0.2"
    assert status["hostIP"] == HOST_IP
    app = container_status(pod)
    assert app["containerID"] == f"containerd://{ctr.id}"
    assert (app["ready"], app["started"], app["restartCount"]) == (True, True, 0)
    assert app["state"]["running"]["startedAt"] == "2026-01-01T00:00:00Z"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "PodScheduled": "True",
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
    }
    log_dir = f"/var/log/pods/default_web_{uid}"
    assert ctr.log_path == f"{log_dir}/app/0.log"
    assert f"{log_dir}/app" in stack.files.dirs
    link = f"/var/log/containers/web_default_app-{ctr.id}.log"
    assert stack.files.links[link] == f"{log_dir}/app/0.log"


async def test_status_is_patched_only_when_it_changes(stack: Stack) -> None:
    seed(stack.server)
    await until(lambda: phase(stack.pod("web")) == "Running")
    await asyncio.sleep(1)
    patches = len(stack.server.calls_to("patch", "pods"))
    await asyncio.sleep(180)  # three resyncs and 180 relists
    assert len(stack.server.calls_to("patch", "pods")) == patches


async def crash_loop(stack: Stack, restarts: int, exit_code: int = 1) -> list[tuple[int, int]]:
    """Let the container crash as soon as it runs, ``restarts + 1`` times; returns the
    (started, finished) times in ns of each instance."""
    times = []
    for attempt in range(restarts + 1):
        [ctr] = await until(lambda: stack.running("app"), within=400)
        assert ctr.metadata.attempt == attempt
        stack.runtime.exit_container(ctr.id, exit_code=exit_code)
        done = (await stack.runtime.container_status(ctr.id)).status
        times.append((done.started_at, done.finished_at))
    return times


async def test_crash_loop_restarts_after_10_20_40_80_160_seconds(stack: Stack) -> None:
    seed(stack.server, containers=[container("app", command=["false"])])
    times = await crash_loop(stack, restarts=6)

    gaps = [(times[i + 1][0] - times[i][1]) / S for i in range(len(times) - 1)]
    assert gaps[0] <= 1.0  # the first restart is immediate (next relist)
    assert gaps[1:] == pytest.approx([10, 20, 40, 80, 160], abs=1e-6)

    def crash_looping() -> dict[str, Any] | None:
        pod = stack.pod("web")
        app = container_status(pod)
        return pod if app["restartCount"] == 6 and "waiting" in app["state"] else None

    pod = await until(crash_looping)
    app = container_status(pod)
    uid = pod["metadata"]["uid"]
    assert app["state"]["waiting"] == {
        "reason": "CrashLoopBackOff",
        "message": f"back-off 5m0s restarting failed container=app pod=web_default({uid})",
    }
    assert app["lastState"]["terminated"]["exitCode"] == 1
    assert app["lastState"]["terminated"]["reason"] == "Error"
    assert app["restartCount"] == 6
    assert phase(pod) == "Running"
    assert len(await stack.containers("app")) == 2  # the running one and the last dead one


async def test_crash_loop_back_off_caps_at_five_minutes(stack: Stack) -> None:
    seed(stack.server, containers=[container("app", command=["false"])])
    times = await crash_loop(stack, restarts=8)
    gaps = [(times[i + 1][0] - times[i][1]) / S for i in range(1, len(times) - 1)]
    assert gaps == pytest.approx([10, 20, 40, 80, 160, 300, 300], abs=1e-6)


async def test_on_failure_does_not_restart_a_container_that_succeeded(stack: Stack) -> None:
    seed(stack.server, restart_policy="OnFailure")
    [ctr] = await until(lambda: stack.running("app"))
    stack.runtime.exit_container(ctr.id, exit_code=0)
    pod = await until(lambda: phase(stack.pod("web")) == "Succeeded" and stack.pod("web"))
    assert container_status(pod)["state"]["terminated"]["reason"] == "Completed"
    await asyncio.sleep(60)
    assert len(await stack.containers("app")) == 1


async def test_never_and_exit_zero_ends_succeeded_completed(stack: Stack) -> None:
    seed(stack.server, restart_policy="Never", containers=[container("app", command=["true"])])
    [ctr] = await until(lambda: stack.running("app"))
    stack.runtime.exit_container(ctr.id, exit_code=0)

    pod = await until(lambda: phase(stack.pod("web")) == "Succeeded" and stack.pod("web"))
    terminated = container_status(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")
    await asyncio.sleep(30)
    assert len(await stack.containers("app")) == 1  # never restarted
    [sandbox] = await stack.runtime.list_pod_sandbox()
    assert sandbox.state == cri.SANDBOX_NOTREADY  # the pod was killed once terminal


async def test_never_and_exit_one_ends_failed(stack: Stack) -> None:
    seed(stack.server, restart_policy="Never")
    [ctr] = await until(lambda: stack.running("app"))
    stack.runtime.exit_container(ctr.id, exit_code=1)
    pod = await until(lambda: phase(stack.pod("web")) == "Failed" and stack.pod("web"))
    assert container_status(pod)["state"]["terminated"]["reason"] == "Error"


async def test_deletion_stops_containers_with_the_grace_period_then_deletes_the_pod(
    stack: Stack,
) -> None:
    seed(stack.server, grace=30)
    [ctr] = await until(lambda: stack.running("app"))

    def delete(obj: dict[str, Any]) -> None:  # what kubectl delete --grace-period=17 does
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
        obj["metadata"]["deletionGracePeriodSeconds"] = 17

    stack.server.modify(PODS, "web", delete, "default")
    await until(lambda: stack.pod("web") is None)

    assert stack.runtime.grace_periods == {ctr.id: 17}
    deletes = stack.server.calls_to("delete", "pods")
    assert [(c.namespace, c.name) for c in deletes] == [("default", "web")]
    last_patch = stack.server.calls_to("patch", "pods")[-1].body
    assert last_patch["status"]["phase"] == "Failed"  # terminal before the final delete
    await until(lambda: not stack.runtime.sandbox_ids and not stack.runtime.container_ids)
    assert stack.files.links == {}


async def test_force_deleted_pod_is_killed_and_removed(stack: Stack) -> None:
    seed(stack.server)
    await until(lambda: stack.running("app"))
    stack.server.remove(PODS, "web", "default")
    await until(lambda: not stack.runtime.sandbox_ids and not stack.runtime.container_ids)


async def test_restarted_agent_adopts_what_runs_without_duplicates(
    server: FakeApiServer, runtime: FakeRuntime
) -> None:
    seed(server)
    async with running_stack(server, runtime) as first:
        await until(lambda: phase(first.pod("web")) == "Running")
    calls_before = list(runtime.calls)

    async with running_stack(server, runtime) as second:
        await asyncio.sleep(30)
        assert phase(second.pod("web")) == "Running"
    new_calls = runtime.calls[len(calls_before) :]
    assert "RunPodSandbox" not in new_calls
    assert "CreateContainer" not in new_calls
    assert len(runtime.sandbox_ids) == len(runtime.container_ids) == 1


async def test_runtime_pod_without_api_object_is_removed(
    server: FakeApiServer, runtime: FakeRuntime
) -> None:
    seed(server, "gone")
    async with running_stack(server, runtime) as first:
        await until(lambda: first.running("app"))
    server.remove(PODS, "gone", "default")  # deleted while the agent was down
    async with running_stack(server, runtime):
        await until(lambda: not runtime.sandbox_ids and not runtime.container_ids, within=10)


async def test_init_containers_run_one_at_a_time_before_the_app(stack: Stack) -> None:
    seed(
        stack.server,
        init_containers=[container("one", command=["true"]), container("two", command=["true"])],
    )
    [one] = await until(lambda: stack.running("one"))
    assert await stack.containers("two") == [] and await stack.containers("app") == []
    pod = await until(lambda: container_status(stack.pod("web"), "app") and stack.pod("web"))
    assert container_status(pod)["state"]["waiting"]["reason"] == "PodInitializing"
    stack.runtime.exit_container(one.id, exit_code=0)
    [two] = await until(lambda: stack.running("two"))
    assert await stack.containers("app") == []
    stack.runtime.exit_container(two.id, exit_code=0)
    await until(lambda: stack.running("app"))
    pod = await until(lambda: phase(stack.pod("web")) == "Running" and stack.pod("web"))
    assert [c["ready"] for c in pod["status"]["initContainerStatuses"]] == [True, True]


async def test_image_pull_failure_reports_err_image_pull_then_back_off(stack: Stack) -> None:
    seed(stack.server, containers=[container("app", image="localhost/nope:1")])

    def waiting() -> dict[str, Any] | None:
        pod = stack.pod("web")
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("waiting")

    first = await until(lambda: (w := waiting()) and w.get("reason") == "ErrImagePull" and w)
    assert "not found" in first["message"]
    backoff = await until(lambda: (w := waiting()) and w.get("reason") == "ImagePullBackOff" and w)
    # The kubelet's waiting message carries the pull error; the BackOff event does not.
    assert backoff["message"] == (
        f'Back-off pulling image "localhost/nope:1": ErrImagePull: {first["message"]}'
    )
    stack.runtime.publish("localhost/nope:1")  # the image appears in the registry
    await until(lambda: stack.running("app"), within=60)
    await until(lambda: phase(stack.pod("web")) == "Running")


async def test_missing_config_map_is_a_config_error_and_other_pods_still_run(
    stack: Stack,
) -> None:
    ref = {"configMapKeyRef": {"name": "settings", "key": "mode"}}
    seed(stack.server, "bad", containers=[container("app", env=[{"name": "M", "valueFrom": ref}])])
    seed(stack.server, "good")
    await until(lambda: phase(stack.pod("good")) == "Running")
    pod = await until(
        lambda: (
            container_status(stack.pod("bad"))["state"]["waiting"].get("message")
            and stack.pod("bad")
        )
    )
    assert container_status(pod)["state"]["waiting"] == {
        "reason": "CreateContainerConfigError",
        "message": 'configmap "settings" not found',
    }
    assert phase(pod) == "Pending"


async def test_pod_that_does_not_fit_is_rejected_with_out_of_cpu(
    server: FakeApiServer, runtime: FakeRuntime
) -> None:
    server.seed(
        NODES,
        {
            "metadata": {"name": NODE},
            "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "110"}},
        },
    )
    seed(server, "big", containers=[container("app", requests={"cpu": "2"})])
    async with running_stack(server, runtime) as stack:
        pod = await until(lambda: phase(stack.pod("big")) == "Failed" and stack.pod("big"))
    assert pod["status"]["reason"] == "OutOfcpu"
    assert pod["status"]["message"] == (
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 0, "
        "capacity: 1000"
    )
    assert runtime.sandbox_ids == []


async def test_runtime_unavailable_during_sync_is_retried(stack: Stack) -> None:
    from nodeagent.kuberuntime.errors import CriUnavailable

    stack.runtime.inject_error("RunPodSandbox", CriUnavailable("down", code="Unavailable"))
    seed(stack.server)
    await until(lambda: phase(stack.pod("web")) == "Running", within=20)
    assert stack.runtime.calls.count("RunPodSandbox") == 2


async def test_second_node_pods_are_ignored(stack: Stack) -> None:
    body = pod_object("elsewhere", node="node-b")
    del body["metadata"]["uid"]
    stack.server.seed(PODS, body)
    await asyncio.sleep(5)
    assert stack.runtime.sandbox_ids == []


def test_fixture_runtime_has_the_image(server: FakeApiServer) -> None:
    assert make_runtime(server).find_image("localhost/busybox:latest") is not None


async def test_each_pod_is_decoded_once_per_resource_version_not_on_every_change(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodeagent.pods import syncloop

    decoded: list[str] = []
    real = syncloop.decode_checked_pod

    def counting(obj: dict[str, Any]) -> Any:
        decoded.append(obj["metadata"]["name"])
        return real(obj)

    monkeypatch.setattr(syncloop, "decode_checked_pod", counting)
    names = [f"p{i}" for i in range(5)]
    for name in names:
        seed(stack.server, name)
    await until(lambda: all(phase(stack.pod(n)) == "Running" for n in names))
    await asyncio.sleep(5)  # settled: no status left to send
    decoded.clear()

    for i in range(3):  # three changes to one pod, each seen by the sync loop on its own
        await stack.server.patch(
            PODS, "p0", {"metadata": {"labels": {"n": str(i)}}}, patch_type=PatchType.MERGE,
            namespace="default",
        )  # fmt: skip
        await asyncio.sleep(1)

    # Each pass over the five pods decoded only the one that changed.
    assert decoded == ["p0", "p0", "p0"]
