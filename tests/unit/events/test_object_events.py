"""Events about any object: posted in its namespace, named after it, correlated and
rate-limited per object, as client-go's recorder does for the kubelet."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from nodeagent.apiserver import EVENTS, Forbidden, ServerError
from nodeagent.events import EventRecorder, ObjectReference, node_reference, pod_reference
from nodeagent.podspec import decode_pod
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container, pod_object

pytestmark = pytest.mark.looptime

UID = "0c5a2a36-7d59-4cb4-9bfa-5e1cc3fd9a11"
APP = ObjectReference(
    kind="Pod",
    name="web",
    namespace="team-a",
    uid=UID,
    api_version="v1",
    resource_version="17",
    field_path="spec.containers{app}",
)


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
async def recorder(server: FakeApiServer) -> AsyncIterator[EventRecorder]:
    r = EventRecorder(api=server, clock=server.clock, node_name="n1", queue_size=100)
    task = asyncio.create_task(r.run())
    yield r
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_container_event_goes_in_the_pods_namespace_with_its_field_path(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    await asyncio.sleep(2.25)
    recorder.record_for(APP, "Normal", "Started", "Container started")
    await asyncio.sleep(0.1)

    (event,) = server.objects(EVENTS)
    assert event["metadata"]["namespace"] == "team-a"
    assert event["metadata"]["name"] == f"web.{int(1767225602.25 * 1e9):x}"
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web",
        "namespace": "team-a",
        "uid": UID,
        "resourceVersion": "17",
        "fieldPath": "spec.containers{app}",
    }
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal",
        "Started",
        "Container started",
    )
    assert event["source"] == {"component": "kubelet", "host": "n1"}
    assert (event["reportingComponent"], event["reportingInstance"]) == ("kubelet", "n1")
    assert (event["count"], event["firstTimestamp"]) == (1, "2026-01-01T00:00:02Z")


async def test_a_repeat_on_the_same_container_counts_on_the_first_event(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    for _ in range(3):
        recorder.record_for(APP, "Warning", "BackOff", "Back-off restarting failed container")
        await asyncio.sleep(30)

    (event,) = server.objects(EVENTS)
    assert (event["count"], event["firstTimestamp"], event["lastTimestamp"]) == (
        3,
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:01:00Z",
    )
    assert [c.namespace for c in server.calls_to("patch", "events")] == ["team-a", "team-a"]


async def test_the_same_message_about_two_containers_is_two_events(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    other = dataclasses.replace(APP, field_path="spec.containers{log}")
    recorder.record_for(APP, "Normal", "Pulled", 'Container image "x" already present on machine')
    recorder.record_for(other, "Normal", "Pulled", 'Container image "x" already present on machine')
    await asyncio.sleep(0.1)

    paths = sorted(e["involvedObject"]["fieldPath"] for e in server.objects(EVENTS))
    assert paths == ["spec.containers{app}", "spec.containers{log}"]
    assert len({e["metadata"]["name"] for e in server.objects(EVENTS)}) == 2


async def test_a_new_resource_version_of_the_pod_still_counts_on_the_first_event(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    newer = dataclasses.replace(APP, resource_version="18")
    recorder.record_for(APP, "Normal", "Killing", "Stopping container app")
    recorder.record_for(newer, "Normal", "Killing", "Stopping container app")
    await asyncio.sleep(0.1)

    (event,) = server.objects(EVENTS)
    assert event["count"] == 2


async def test_each_object_has_its_own_spam_budget(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    for i in range(30):
        recorder.record_for(APP, "Warning", "Failed", f"Error: attempt {i}")
    recorder.record("Normal", "NodeReady", "Node n1 status is now: NodeReady")
    await asyncio.sleep(1)

    kinds = [e["involvedObject"]["kind"] for e in server.objects(EVENTS)]
    assert (kinds.count("Pod"), kinds.count("Node")) == (25, 1)


async def test_node_events_keep_their_reference_and_namespace(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    recorder.record("Normal", "Starting", "Starting kubelet.")
    await asyncio.sleep(0.1)

    (event,) = server.objects(EVENTS)
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["name"].startswith("n1.")
    assert event["involvedObject"] == {"kind": "Node", "name": "n1", "uid": "n1"}
    assert node_reference("n1") == ObjectReference(kind="Node", name="n1", uid="n1")


async def test_a_refused_event_is_not_retried_but_a_server_error_is(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    server.react("create", "events", Forbidden("namespace team-a is being terminated"))
    recorder.record_for(APP, "Normal", "Killing", "Stopping container app")
    await asyncio.sleep(10)
    assert len(server.calls_to("create", "events")) == 1
    assert server.objects(EVENTS) == []

    server.react("create", "events", ServerError("etcd leader changed"))
    recorder.record_for(APP, "Normal", "Killing", "Stopping container app")
    await asyncio.sleep(10)
    assert [c.at for c in server.calls_to("create", "events")][1:] == [10, 11]
    assert len(server.objects(EVENTS)) == 1


def test_pod_references_name_the_container_as_the_kubelet_does() -> None:
    body = pod_object(
        "web",
        namespace="team-a",
        uid=UID,
        init_containers=[container("setup")],
        containers=[container("app")],
    )
    body["metadata"]["resourceVersion"] = "17"
    web = decode_pod(body)

    assert pod_reference(web, "app") == APP
    assert pod_reference(web, "setup").field_path == "spec.initContainers{setup}"
    assert pod_reference(web).to_json() == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web",
        "namespace": "team-a",
        "uid": UID,
        "resourceVersion": "17",
    }
    assert pod_reference(web, "gone").field_path == ""
