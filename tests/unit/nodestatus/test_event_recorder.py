"""Node events: posted in the background, correlated, rate-limited, never blocking the caller."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from nodeagent.apiserver import EVENTS, ServerError
from nodeagent.events import EventRecorder
from nodeagent.testing.fake_apiserver import Delay, FakeApiServer

pytestmark = pytest.mark.looptime


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
async def recorder(server: FakeApiServer) -> AsyncIterator[EventRecorder]:
    r = EventRecorder(api=server, clock=server.clock, node_name="n1", queue_size=50)
    task = asyncio.create_task(r.run())
    yield r
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_events_are_posted_for_the_node_as_the_kubelet_does(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    await asyncio.sleep(1.5)
    recorder.record("Normal", "NodeReady", "Node n1 status is now: NodeReady")
    await asyncio.sleep(0.1)

    (event,) = server.objects(EVENTS)
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["name"] == f"n1.{int(1767225601.5 * 1e9):x}"
    assert event["involvedObject"] == {"kind": "Node", "name": "n1", "uid": "n1"}
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal",
        "NodeReady",
        "Node n1 status is now: NodeReady",
    )
    assert event["source"] == {"component": "kubelet", "host": "n1"}
    assert (event["count"], event["firstTimestamp"]) == (1, "2026-01-01T00:00:01Z")


async def test_a_repeated_event_increments_the_count_of_the_first(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    for _ in range(3):
        recorder.record("Warning", "Rebooted", "Node n1 has been rebooted, boot id: b")
        await asyncio.sleep(60)

    (event,) = server.objects(EVENTS)
    assert event["count"] == 3
    assert event["lastTimestamp"] == "2026-01-01T00:02:00Z"


async def test_record_never_blocks_even_when_the_apiserver_hangs(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    server.react("create", "events", Delay(3600), times=None)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(200):  # more than the queue holds: the overflow is dropped
        recorder.record("Normal", "Starting", f"attempt {i}")

    assert loop.time() == start


async def test_a_burst_of_25_then_one_every_five_minutes(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    for i in range(30):
        recorder.record("Normal", "X", f"message {i}")
    await asyncio.sleep(1)
    assert len(server.objects(EVENTS)) == 25
    await asyncio.sleep(300)
    recorder.record("Normal", "X", "after the pause")
    await asyncio.sleep(1)
    assert len(server.objects(EVENTS)) == 26


async def test_failed_posts_are_retried_then_dropped(
    server: FakeApiServer, recorder: EventRecorder
) -> None:
    server.react("create", "events", ServerError("x"), times=2)
    recorder.record("Normal", "Starting", "Starting nodeagent.")
    await asyncio.sleep(5)

    assert [c.at for c in server.calls_to("create", "events")] == [0, 1, 3]
    assert len(server.objects(EVENTS)) == 1
