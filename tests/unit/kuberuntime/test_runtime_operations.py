"""The kubelet's runtime operation metrics, counted by the CRI client against a real grpc.aio
server: one operation (and its duration) per call under the kubelet's ``operation_type``
(pkg/kubelet/kuberuntime/instrumented_services.go, v1.36.3), and an error for each call the
kubelet's client would have returned an error for."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import prometheus_client
import pytest
from scripted_cri import ScriptedCri

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriError, CriNotFound, CriUnavailable
from nodeagent.kuberuntime.metrics import RuntimeOperation
from nodeagent.kuberuntime.operations import OPERATION_TYPES
from nodeagent.kuberuntime.remote import CriClient

SERVICES = ("RuntimeService", "ImageService")
Call = Callable[[CriClient], Awaitable[object]]

# Each CriClient call, and the operation_type the kubelet's instrumented service counts it as.
CALLS: list[tuple[str, Call, str]] = [
    ("version", lambda c: c.version(), "version"),
    ("status", lambda c: c.status(), "status"),
    ("runtime_config", lambda c: c.runtime_config(), "runtime_config"),
    (
        "update_runtime_config",
        lambda c: c.update_runtime_config("10.244.0.0/24"),
        "update_runtime_config",
    ),
    (
        "run_pod_sandbox",
        lambda c: c.run_pod_sandbox(cri.sandbox_config(name="p", namespace="d", uid="u")),
        "run_podsandbox",
    ),
    ("stop_pod_sandbox", lambda c: c.stop_pod_sandbox("s1"), "stop_podsandbox"),
    ("remove_pod_sandbox", lambda c: c.remove_pod_sandbox("s1"), "remove_podsandbox"),
    ("pod_sandbox_status", lambda c: c.pod_sandbox_status("s1"), "podsandbox_status"),
    ("list_pod_sandbox", lambda c: c.list_pod_sandbox(), "list_podsandbox"),
    (
        "create_container",
        lambda c: c.create_container("s1", api.ContainerConfig(), api.PodSandboxConfig()),
        "create_container",
    ),
    ("start_container", lambda c: c.start_container("c1"), "start_container"),
    ("stop_container", lambda c: c.stop_container("c1", 0), "stop_container"),
    ("remove_container", lambda c: c.remove_container("c1"), "remove_container"),
    (
        "update_container_resources",
        lambda c: c.update_container_resources("c1", api.LinuxContainerResources()),
        "update_container",
    ),
    ("list_containers", lambda c: c.list_containers(), "list_containers"),
    ("container_status", lambda c: c.container_status("c1"), "container_status"),
    ("reopen_container_log", lambda c: c.reopen_container_log("c1"), "reopen_container_log"),
    ("list_container_stats", lambda c: c.list_container_stats(), "list_container_stats"),
    ("list_pod_sandbox_stats", lambda c: c.list_pod_sandbox_stats(), "list_podsandbox_stats"),
    ("exec_sync", lambda c: c.exec_sync("c1", ["true"], 0), "exec_sync"),
    (
        "exec",
        lambda c: c.exec("c1", ["sh"], tty=False, stdin=False, stdout=True, stderr=True),
        "exec",
    ),
    (
        "attach",
        lambda c: c.attach("c1", tty=False, stdin=False, stdout=True, stderr=True),
        "attach",
    ),
    ("port_forward", lambda c: c.port_forward("s1", [80]), "port_forward"),
    ("list_images", lambda c: c.list_images(), "list_images"),
    ("image_status", lambda c: c.image_status("busybox"), "image_status"),
    ("pull_image", lambda c: c.pull_image("busybox"), "pull_image"),
    ("remove_image", lambda c: c.remove_image("busybox"), "remove_image"),
    ("image_fs_info", lambda c: c.image_fs_info(), "image_fs_info"),
]
STREAMS = {"get_container_events"}  # tested below, one by one
NOT_CALLS = {"close", "__aenter__", "__aexit__"}


def counted(operation_type: str) -> tuple[float, float, float]:
    """(operations, durations observed, errors) so far for ``operation_type``."""
    labels = {"operation_type": operation_type}

    def get(name: str) -> float:
        return prometheus_client.REGISTRY.get_sample_value(name, labels) or 0.0

    return (
        get("kubelet_runtime_operations_total"),
        get("kubelet_runtime_operations_duration_seconds_count"),
        get("kubelet_runtime_operations_errors_total"),
    )


def since(before: tuple[float, float, float], operation_type: str) -> tuple[float, ...]:
    return tuple(a - b for a, b in zip(counted(operation_type), before, strict=True))


async def _no_events(_req: Any, _ctx: Any) -> AsyncIterator[Any]:
    return
    yield


@pytest.fixture
def answering(cri_server: ScriptedCri) -> ScriptedCri:
    """The scripted runtime answering every unary RPC with its empty response."""
    for service in SERVICES:
        for method in api.DESCRIPTOR.services_by_name[service].methods:
            response = getattr(api, method.output_type.name)
            cri_server.handlers[method.name] = (
                _no_events if method.server_streaming else (lambda _r, _c, t=response: t())
            )
    return cri_server


def test_every_runtime_v1_rpc_has_an_operation_type() -> None:
    rpcs = {
        method.name
        for service in SERVICES
        for method in api.DESCRIPTOR.services_by_name[service].methods
    }
    assert set(OPERATION_TYPES) == rpcs


def test_a_streaming_list_counts_as_the_list_it_replaces() -> None:
    # CRIListStreaming: the kubelet's client calls Stream* inside its List* methods.
    replaces = {
        "StreamPodSandboxes": "ListPodSandbox",
        "StreamContainers": "ListContainers",
        "StreamContainerStats": "ListContainerStats",
        "StreamPodSandboxStats": "ListPodSandboxStats",
        "StreamPodSandboxMetrics": "ListPodSandboxMetrics",
        "StreamImages": "ListImages",
    }
    assert {r for r in OPERATION_TYPES if r.startswith("Stream")} == set(replaces)
    for stream, listing in replaces.items():
        assert OPERATION_TYPES[stream] == OPERATION_TYPES[listing]


def test_every_call_of_the_client_is_checked_here() -> None:
    methods = {
        name
        for name, member in inspect.getmembers(CriClient)
        if (inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member))
        and not name.startswith("_")
    }
    assert methods - {"close"} == {name for name, _, _ in CALLS} | STREAMS


@pytest.mark.parametrize(
    ("call", "operation_type"), [pytest.param(c, o, id=n) for n, c, o in CALLS]
)
async def test_a_call_counts_one_operation_of_the_kubelets_type(
    answering: ScriptedCri, call: Call, operation_type: str
) -> None:
    before = counted(operation_type)
    async with CriClient.open(answering.endpoint) as client:
        await call(client)
    assert since(before, operation_type) == (1, 1, 0)


async def test_a_not_found_counts_an_error_as_the_kubelet_counts_any(
    cri_server: ScriptedCri,
) -> None:
    async def gone(_req: Any, ctx: grpc.aio.ServicerContext) -> None:
        await ctx.abort(grpc.StatusCode.NOT_FOUND, 'container "c1" not found')

    cri_server.handlers["ContainerStatus"] = gone
    before = counted("container_status")
    async with CriClient.open(cri_server.endpoint) as client:
        with pytest.raises(CriNotFound):
            await client.container_status("c1")
    assert since(before, "container_status") == (1, 1, 1)


async def test_a_command_exiting_non_zero_counts_an_exec_sync_error(
    cri_server: ScriptedCri,
) -> None:
    cri_server.handlers["ExecSync"] = lambda _r, _c: api.ExecSyncResponse(exit_code=1)
    before = counted("exec_sync")
    async with CriClient.open(cri_server.endpoint) as client:
        result = await client.exec_sync("c1", ["false"], 5)
    assert result.exit_code == 1  # still the answer for the caller (a failed probe)
    assert since(before, "exec_sync") == (1, 1, 1)


async def test_an_image_status_without_size_counts_an_error(cri_server: ScriptedCri) -> None:
    cri_server.handlers["ImageStatus"] = lambda _r, _c: api.ImageStatusResponse(
        image=api.Image(id="sha256:aa")
    )
    before = counted("image_status")
    async with CriClient.open(cri_server.endpoint) as client:
        with pytest.raises(CriError, match="is not set"):
            await client.image_status("busybox")
    assert since(before, "image_status") == (1, 1, 1)


async def test_a_cancelled_call_counts_an_error(cri_server: ScriptedCri) -> None:
    arrived, never = asyncio.Event(), asyncio.Event()

    async def hang(_req: Any, _ctx: Any) -> api.ListContainersResponse:
        arrived.set()
        await never.wait()
        raise AssertionError("unreachable")

    cri_server.handlers["ListContainers"] = hang
    before = counted("list_containers")
    async with CriClient.open(cri_server.endpoint) as client:
        task = asyncio.create_task(client.list_containers())
        await arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert since(before, "list_containers") == (1, 1, 1)


def _event(kind: int) -> api.ContainerEventResponse:
    return api.ContainerEventResponse(container_id="c1", container_event_type=kind)


async def test_the_event_stream_ended_by_the_runtime_is_one_operation_and_error(
    cri_server: ScriptedCri,
) -> None:
    async def events(_req: Any, ctx: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        yield _event(api.CONTAINER_CREATED_EVENT)
        await ctx.abort(grpc.StatusCode.UNAVAILABLE, "containerd is shutting down")

    cri_server.handlers["GetContainerEvents"] = events
    before = counted("get_container_events")
    async with CriClient.open(cri_server.endpoint) as client:
        with pytest.raises(CriUnavailable):
            async for _ in client.get_container_events():
                assert since(before, "get_container_events") == (0, 0, 0)  # counted at its end
    assert since(before, "get_container_events") == (1, 1, 1)


async def test_an_event_stream_at_its_end_of_file_counts_an_error(
    cri_server: ScriptedCri,
) -> None:
    cri_server.handlers["GetContainerEvents"] = _no_events
    before = counted("get_container_events")
    async with CriClient.open(cri_server.endpoint) as client:
        assert [e async for e in client.get_container_events()] == []
    assert since(before, "get_container_events") == (1, 1, 1)


async def test_an_event_stream_the_consumer_leaves_counts_an_error(
    cri_server: ScriptedCri,
) -> None:
    async def endless(_req: Any, _ctx: Any) -> AsyncIterator[Any]:
        while True:
            yield _event(api.CONTAINER_STARTED_EVENT)
            await asyncio.sleep(0.01)

    cri_server.handlers["GetContainerEvents"] = endless
    before = counted("get_container_events")
    async with CriClient.open(cri_server.endpoint) as client:
        stream = client.get_container_events()
        assert (await anext(stream)).container_id == "c1"
        await stream.aclose()  # the kubelet's context cancelled: Canceled, an error
    assert since(before, "get_container_events") == (1, 1, 1)


async def test_closing_the_client_is_not_an_operation(answering: ScriptedCri) -> None:
    # The kubelet counts a "close" operation but never closes its CRI client.
    async with CriClient.open(answering.endpoint) as client:
        await client.version()
    assert counted("close") == (0, 0, 0)


def test_an_operation_observes_its_duration_on_the_kubelets_buckets() -> None:
    def bucket(le: str) -> float:
        labels = {"operation_type": "status", "le": le}
        name = "kubelet_runtime_operations_duration_seconds_bucket"
        return prometheus_client.REGISTRY.get_sample_value(name, labels) or 0.0

    ticks = iter([100.0, 100.3])
    before = (bucket("0.1953125"), bucket("0.48828125"))
    with RuntimeOperation("status", clock=lambda: next(ticks)):
        pass
    assert (bucket("0.1953125"), bucket("0.48828125")) == (before[0], before[1] + 1)


def test_the_help_texts_are_the_kubelets() -> None:
    text = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    for name, help_text in {
        "kubelet_runtime_operations_total": (
            "Cumulative number of runtime operations by operation type."
        ),
        "kubelet_runtime_operations_duration_seconds": (
            "Duration in seconds of runtime operations. Broken down by operation type."
        ),
        "kubelet_runtime_operations_errors_total": (
            "Cumulative number of runtime operation errors by operation type."
        ),
    }.items():
        assert f"# HELP {name} {help_text}\n" in text
