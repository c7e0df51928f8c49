"""The gRPC CRI client against a real grpc.aio server on a unix socket."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from scripted_cri import ScriptedCri

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent import kuberuntime
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import (
    CriDeadlineExceeded,
    CriError,
    CriNotFound,
    CriUnavailable,
    CriUnknown,
    CriVersionError,
)


async def test_connect_validates_v1_and_reports_the_runtime(cri_server: ScriptedCri) -> None:
    async with await kuberuntime.connect(cri_server.endpoint) as client:
        assert client.version_info is not None
        assert client.version_info.runtime_name == "containerd"
        assert client.version_info.runtime_version == "v2.1.4"
        assert client.endpoint == cri_server.endpoint
    assert [r.version for r in cri_server.requests["Version"]] == ["v1"]


async def test_a_bare_socket_path_is_accepted_as_endpoint(cri_server: ScriptedCri) -> None:
    async with await kuberuntime.connect(str(cri_server.socket_path)) as client:
        assert client.endpoint == f"unix://{cri_server.socket_path}"
        assert client.version_info is not None


async def test_a_runtime_without_runtime_v1_is_refused_clearly(bare_server: ScriptedCri) -> None:
    with pytest.raises(CriVersionError) as info:
        await kuberuntime.connect(bare_server.endpoint)
    message = str(info.value)
    assert message.startswith(
        f'validate CRI v1 runtime API for endpoint "{bare_server.endpoint}": '
        "rpc error: code = Unimplemented desc = "
    )
    assert "does not serve CRI runtime.v1" in message
    assert info.value.code == "Unimplemented"


@pytest.mark.parametrize(
    ("answer", "missing"),
    [
        pytest.param(
            api.VersionResponse(version="0.1.0", runtime_name="x", runtime_version="1"),
            "runtime_api_version",
            id="no runtime API version",
        ),
        pytest.param(
            api.VersionResponse(),
            "version, runtime_name, runtime_version, runtime_api_version",
            id="empty answer",
        ),
    ],
)
async def test_an_incomplete_version_answer_is_refused(
    cri_server: ScriptedCri, answer: api.VersionResponse, missing: str
) -> None:
    cri_server.handlers["Version"] = lambda _req, _ctx: answer
    with pytest.raises(CriVersionError) as info:
        await kuberuntime.connect(cri_server.endpoint)
    assert str(info.value) == (
        f'validate CRI v1 runtime API for endpoint "{cri_server.endpoint}": '
        f"Version response lacks {missing}"
    )


async def test_a_missing_socket_is_unavailable_naming_the_endpoint(short_tmp: Path) -> None:
    endpoint = f"unix://{short_tmp}/absent.sock"
    started = time.monotonic()
    with pytest.raises(CriUnavailable) as info:
        await kuberuntime.connect(endpoint)
    assert time.monotonic() - started < 5  # fails fast, does not wait for the 2m deadline
    assert str(info.value).startswith(
        f'validate CRI v1 runtime API for endpoint "{endpoint}": rpc error: code = Unavailable'
    )
    assert info.value.rpc == "Version"


async def test_a_call_past_its_deadline_is_a_typed_error_naming_the_rpc(
    cri_server: ScriptedCri,
) -> None:
    never = asyncio.Event()

    async def hang(_req: Any, _ctx: Any) -> api.ContainerStatusResponse:
        await never.wait()
        raise AssertionError("unreachable")

    cri_server.handlers["ContainerStatus"] = hang
    async with await kuberuntime.connect(
        cri_server.endpoint, runtime_request_timeout=0.05
    ) as client:
        with pytest.raises(CriDeadlineExceeded) as info:
            await client.container_status("abc")
    assert info.value.rpc == "ContainerStatus"
    # worded as the kubelet's grpc-go client words it: its Events say
    # "Error: context deadline exceeded" (seen with 110 pods starting under TCG)
    assert str(info.value) == (
        f'CRI ContainerStatus on endpoint "{cri_server.endpoint}": '
        "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
    )
    assert info.value.details == "context deadline exceeded"


async def test_each_rpc_gets_the_kubelets_deadline(cri_server: ScriptedCri) -> None:
    cri_server.handlers.update(
        {
            "RunPodSandbox": lambda _r, _c: api.RunPodSandboxResponse(pod_sandbox_id="sb1"),
            "StopContainer": lambda _r, _c: api.StopContainerResponse(),
            "ExecSync": lambda _r, _c: api.ExecSyncResponse(exit_code=3, stdout=b"hi"),
            "PullImage": lambda _r, _c: api.PullImageResponse(image_ref="sha256:1"),
            "ListPodSandbox": lambda _r, _c: api.ListPodSandboxResponse(),
        }
    )
    async with await kuberuntime.connect(cri_server.endpoint) as client:
        assert await client.run_pod_sandbox(cri.sandbox_config(name="p", namespace="d", uid="u"))
        await client.stop_container("c1", grace_period=30)
        result = await client.exec_sync("c1", ["cat", "/x"], timeout_seconds=5)
        assert (result.exit_code, result.stdout) == (3, b"hi")
        assert await client.pull_image("localhost:5000/busybox:1.36") == "sha256:1"
        assert await client.list_pod_sandbox() == []
    expected = {
        "Version": 120,
        "ListPodSandbox": 120,
        "RunPodSandbox": 240,
        "StopContainer": 150,
        "ExecSync": 125,
    }
    for rpc, seconds in expected.items():
        remaining = cri_server.deadlines[rpc]
        assert remaining is not None
        assert seconds - 5 < remaining <= seconds + 2, rpc  # the grpc-timeout header rounds up
    assert cri_server.deadlines["PullImage"] is None
    stop = cri_server.requests["StopContainer"][0]
    assert (stop.container_id, stop.timeout) == ("c1", 30)
    pull = cri_server.requests["PullImage"][0]
    assert pull.image.image == "localhost:5000/busybox:1.36"


@pytest.mark.parametrize(
    ("status", "error_type", "code"),
    [
        pytest.param(grpc.StatusCode.NOT_FOUND, CriNotFound, "NotFound", id="not found"),
        pytest.param(grpc.StatusCode.UNKNOWN, CriUnknown, "Unknown", id="unknown"),
        pytest.param(grpc.StatusCode.UNAVAILABLE, CriUnavailable, "Unavailable", id="unavailable"),
        pytest.param(
            grpc.StatusCode.FAILED_PRECONDITION, CriError, "FailedPrecondition", id="other codes"
        ),
    ],
)
async def test_status_codes_become_typed_errors(
    cri_server: ScriptedCri, status: grpc.StatusCode, error_type: type[CriError], code: str
) -> None:
    async def fail(_req: Any, ctx: grpc.aio.ServicerContext) -> None:
        await ctx.abort(status, 'container "abc" not there')

    cri_server.handlers["ContainerStatus"] = fail
    async with await kuberuntime.connect(cri_server.endpoint) as client:
        with pytest.raises(CriError) as info:
            await client.container_status("abc")
    assert type(info.value) is error_type
    assert (info.value.code, info.value.details) == (code, 'container "abc" not there')
    assert info.value.status_text == f'rpc error: code = {code} desc = container "abc" not there'
    assert str(info.value) == (
        f'CRI ContainerStatus on endpoint "{cri_server.endpoint}": {info.value.status_text}'
    )


async def test_a_large_answer_up_to_16_mib_is_accepted(cri_server: ScriptedCri) -> None:
    big = "x" * (6 * 1024 * 1024)  # above gRPC's 4 MiB default, below the kubelet's 16 MiB
    cri_server.handlers["ListContainers"] = lambda _r, _c: api.ListContainersResponse(
        containers=[api.Container(id="c1", annotations={"blob": big})]
    )
    async with await kuberuntime.connect(cri_server.endpoint) as client:
        containers = await client.list_containers()
    assert len(containers[0].annotations["blob"]) == len(big)


async def test_container_events_stream_until_the_runtime_ends_it(
    cri_server: ScriptedCri,
) -> None:
    async def events(_req: Any, ctx: grpc.aio.ServicerContext) -> Any:
        yield api.ContainerEventResponse(
            container_id="c1", container_event_type=api.CONTAINER_CREATED_EVENT
        )
        yield api.ContainerEventResponse(
            container_id="c1", container_event_type=api.CONTAINER_STARTED_EVENT
        )
        await ctx.abort(grpc.StatusCode.UNAVAILABLE, "containerd is shutting down")

    cri_server.handlers["GetContainerEvents"] = events
    seen: list[tuple[str, int]] = []
    async with await kuberuntime.connect(cri_server.endpoint) as client:
        with pytest.raises(CriUnavailable) as info:
            async for event in client.get_container_events():
                seen.append((event.container_id, event.container_event_type))
    assert seen == [("c1", api.CONTAINER_CREATED_EVENT), ("c1", api.CONTAINER_STARTED_EVENT)]
    assert info.value.rpc == "GetContainerEvents"


async def test_images_are_listed_and_checked_over_image_service(cri_server: ScriptedCri) -> None:
    image = api.Image(id="sha256:aa", repo_tags=["localhost:5000/busybox:1.36"], size=4096)
    cri_server.handlers["ListImages"] = lambda _r, _c: api.ListImagesResponse(images=[image])
    cri_server.handlers["ImageStatus"] = lambda req, _c: (
        api.ImageStatusResponse(image=image)
        if req.image.image == "localhost:5000/busybox:1.36"
        else api.ImageStatusResponse()
    )
    async with await kuberuntime.connect(cri_server.endpoint) as client:
        assert [i.id for i in await client.list_images()] == ["sha256:aa"]
        present = await client.image_status("localhost:5000/busybox:1.36")
        absent = await client.image_status("localhost:5000/nginx:1")
    assert present.image.size == 4096
    assert not absent.HasField("image")


async def test_an_image_status_without_id_or_size_is_refused(cri_server: ScriptedCri) -> None:
    cri_server.handlers["ImageStatus"] = lambda _r, _c: api.ImageStatusResponse(
        image=api.Image(id="sha256:aa")
    )
    async with await kuberuntime.connect(cri_server.endpoint) as client:
        with pytest.raises(CriError, match='Id or size of image "busybox" is not set'):
            await client.image_status("busybox")


def test_only_unix_endpoints_are_accepted() -> None:
    with pytest.raises(CriError, match='protocol "tcp" not supported'):
        kuberuntime.CriClient.open("tcp://127.0.0.1:1234")
