"""FakeRuntime behaves like containerd where the agent can tell, with the same typed errors."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import (
    CriNotFound,
    CriUnavailable,
    CriUnimplemented,
    CriUnknown,
    CriVersionError,
)
from nodeagent.kuberuntime.negotiate import validate_v1
from nodeagent.testing.fake_runtime import FakeRuntime

BUSYBOX = "localhost:5000/busybox:1.36"


def container_config(
    name: str = "app", attempt: int = 0, image: str = BUSYBOX
) -> cri.ContainerConfig:
    return cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=name, attempt=attempt),
        image=cri.ImageSpec(image=image),
        command=["sleep", "3600"],
        labels={"io.kubernetes.container.name": name},
        log_path=f"{name}/{attempt}.log",
    )


async def started_pod(runtime: FakeRuntime, name: str = "web") -> tuple[str, str]:
    sandbox = cri.sandbox_config(
        name=name, namespace="default", uid=f"uid-{name}", log_directory=f"/var/log/pods/{name}"
    )
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    container_id = await runtime.create_container(sandbox_id, container_config(), sandbox)
    await runtime.start_container(container_id)
    return sandbox_id, container_id


@pytest.fixture
def runtime() -> FakeRuntime:
    fake = FakeRuntime()
    fake.add_image(BUSYBOX)
    return fake


async def test_a_started_pod_is_listed_ready_with_an_ip_and_a_running_container(
    runtime: FakeRuntime,
) -> None:
    sandbox_id, container_id = await started_pod(runtime)
    [sandbox] = await runtime.list_pod_sandbox()
    assert (sandbox.id, sandbox.state) == (sandbox_id, cri.SANDBOX_READY)
    assert sandbox.labels["io.kubernetes.pod.name"] == "web"
    status = (await runtime.pod_sandbox_status(sandbox_id)).status
    assert status.network.ip.startswith("10.88.0.")
    ctr = (await runtime.container_status(container_id)).status
    assert ctr.state == cri.CONTAINER_RUNNING
    assert ctr.log_path == "/var/log/pods/web/app/0.log"
    assert ctr.image_id.startswith("sha256:") and len(container_id) == 64


async def test_host_network_sandboxes_get_no_pod_ip(runtime: FakeRuntime) -> None:
    config = cri.sandbox_config(name="h", namespace="kube-system", uid="u")
    config.linux.security_context.namespace_options.network = 2  # NODE
    sandbox_id = await runtime.run_pod_sandbox(config)
    assert (await runtime.pod_sandbox_status(sandbox_id)).status.network.ip == ""


async def test_stopping_a_sandbox_kills_its_containers_and_removal_is_idempotent(
    runtime: FakeRuntime,
) -> None:
    sandbox_id, container_id = await started_pod(runtime)
    await runtime.stop_pod_sandbox(sandbox_id)
    ctr = (await runtime.container_status(container_id)).status
    assert (ctr.state, ctr.exit_code, ctr.reason) == (cri.CONTAINER_EXITED, 137, "Error")
    assert (await runtime.list_pod_sandbox())[0].state == cri.SANDBOX_NOTREADY
    await runtime.remove_pod_sandbox(sandbox_id)
    await runtime.remove_pod_sandbox(sandbox_id)
    assert await runtime.list_pod_sandbox() == []
    assert await runtime.list_containers() == []


async def test_stop_container_records_the_grace_period(runtime: FakeRuntime) -> None:
    _, container_id = await started_pod(runtime)
    await runtime.stop_container(container_id, grace_period=30)
    assert runtime.grace_periods == {container_id: 30}


@pytest.mark.parametrize(
    ("exit_code", "reason", "expected_reason"),
    [
        pytest.param(0, "", "Completed", id="clean exit is Completed"),
        pytest.param(1, "", "Error", id="non-zero exit is Error"),
        pytest.param(137, "OOMKilled", "OOMKilled", id="OOM kill keeps its reason"),
    ],
)
async def test_a_container_exiting_on_its_own_reports_code_and_reason(
    runtime: FakeRuntime, exit_code: int, reason: str, expected_reason: str
) -> None:
    _, container_id = await started_pod(runtime)
    runtime.exit_container(container_id, exit_code=exit_code, reason=reason)
    ctr = (await runtime.container_status(container_id)).status
    assert (ctr.state, ctr.exit_code, ctr.reason) == (
        cri.CONTAINER_EXITED,
        exit_code,
        expected_reason,
    )


async def test_a_second_container_with_the_same_name_and_attempt_is_refused(
    runtime: FakeRuntime,
) -> None:
    sandbox_id, first = await started_pod(runtime)
    sandbox = cri.sandbox_config(name="web", namespace="default", uid="uid-web")
    with pytest.raises(CriUnknown, match=f'reserved for "{first}"'):
        await runtime.create_container(sandbox_id, container_config(), sandbox)
    retry = await runtime.create_container(sandbox_id, container_config(attempt=1), sandbox)
    assert {c.id for c in await runtime.list_containers()} == {first, retry}


async def test_unknown_ids_raise_not_found_naming_the_rpc(runtime: FakeRuntime) -> None:
    with pytest.raises(CriNotFound) as info:
        await runtime.container_status("nope")
    assert info.value.rpc == "ContainerStatus"
    assert info.value.status_text.startswith("rpc error: code = NotFound desc = ")
    with pytest.raises(CriNotFound):
        await runtime.pod_sandbox_status("nope")
    with pytest.raises(CriNotFound):
        await runtime.start_container("nope")
    await runtime.remove_container("nope")  # removal of what is gone succeeds, as in containerd


async def test_listing_filters_by_label_state_and_sandbox(runtime: FakeRuntime) -> None:
    web_sandbox, web_ctr = await started_pod(runtime, "web")
    db_sandbox, db_ctr = await started_pod(runtime, "db")
    runtime.exit_container(db_ctr, exit_code=0)
    by_label = cri.PodSandboxFilter(label_selector={"io.kubernetes.pod.name": "db"})
    assert [s.id for s in await runtime.list_pod_sandbox(by_label)] == [db_sandbox]
    running = cri.ContainerFilter(state=cri.ContainerStateValue(state=cri.CONTAINER_RUNNING))
    assert [c.id for c in await runtime.list_containers(running)] == [web_ctr]
    in_db = cri.ContainerFilter(pod_sandbox_id=db_sandbox)
    assert [c.id for c in await runtime.list_containers(in_db)] == [db_ctr]
    assert web_sandbox != db_sandbox


async def test_containers_need_their_image_present(runtime: FakeRuntime) -> None:
    sandbox = cri.sandbox_config(name="p", namespace="d", uid="u")
    sandbox_id = await runtime.run_pod_sandbox(sandbox)
    with pytest.raises(CriNotFound, match=r'failed to get image "nginx:1\.27"'):
        await runtime.create_container(sandbox_id, container_config(image="nginx:1.27"), sandbox)


async def test_pulling_makes_an_image_present_under_its_normalised_name() -> None:
    runtime = FakeRuntime()
    runtime.publish("busybox", size=4096)
    with pytest.raises(CriNotFound, match="failed to pull and unpack image"):
        await runtime.pull_image("nginx")
    image_id = await runtime.pull_image("busybox")
    status = await runtime.image_status("docker.io/library/busybox:latest")
    assert status.image.id == image_id
    assert list(status.image.repo_tags) == ["docker.io/library/busybox:latest"]
    assert runtime.pulls == ["docker.io/library/busybox:latest"]
    fs = (await runtime.image_fs_info()).image_filesystems[0]
    assert fs.used_bytes.value == 4096
    await runtime.remove_image("busybox")
    await runtime.remove_image("busybox")
    assert not (await runtime.image_status("busybox")).HasField("image")


async def test_an_injected_error_fails_only_the_next_call(runtime: FakeRuntime) -> None:
    runtime.inject_error(
        "Status", CriUnavailable("containerd is down", rpc="Status", code="Unavailable")
    )
    with pytest.raises(CriUnavailable):
        await runtime.status()
    conditions = (await runtime.status()).status.conditions
    assert [(c.type, c.status) for c in conditions] == [
        ("RuntimeReady", True),
        ("NetworkReady", True),
    ]


async def test_lifecycle_events_reach_a_subscriber_in_order(runtime: FakeRuntime) -> None:
    seen: list[int] = []

    async def watch() -> None:
        async for event in runtime.get_container_events():
            seen.append(event.container_event_type)
            if len(seen) == 3:
                return

    async with asyncio.TaskGroup() as tg:
        watcher = tg.create_task(watch())
        await asyncio.sleep(0)  # let the watcher subscribe
        _, container_id = await started_pod(runtime)
        await runtime.remove_container(container_id)
    assert watcher.done()
    assert seen == [
        cri.CONTAINER_CREATED_EVENT,
        cri.CONTAINER_STARTED_EVENT,
        cri.CONTAINER_DELETED_EVENT,
    ]


async def test_version_validation_accepts_a_complete_v1_runtime(runtime: FakeRuntime) -> None:
    answer = await validate_v1(runtime, endpoint=runtime.endpoint)
    assert (answer.runtime_name, answer.runtime_api_version) == ("fake", "v1")


async def test_version_validation_refuses_a_runtime_without_v1(runtime: FakeRuntime) -> None:
    runtime.inject_error(
        "Version",
        CriUnimplemented(
            "x", code="Unimplemented", details="unknown service runtime.v1.RuntimeService"
        ),
    )
    with pytest.raises(CriVersionError) as info:
        await validate_v1(runtime, endpoint=runtime.endpoint)
    assert str(info.value).startswith(
        f'validate CRI v1 runtime API for endpoint "{runtime.endpoint}": rpc error: '
        "code = Unimplemented desc = unknown service runtime.v1.RuntimeService"
    )


async def test_version_validation_keeps_unavailable_retryable(runtime: FakeRuntime) -> None:
    runtime.inject_error("Version", CriUnavailable("x", code="Unavailable", details="no socket"))
    with pytest.raises(CriUnavailable, match="validate CRI v1 runtime API for endpoint"):
        await validate_v1(runtime, endpoint=runtime.endpoint)
