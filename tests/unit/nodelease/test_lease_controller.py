"""The node Lease heartbeat against the fake apiserver, in virtual time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest

from nodeagent.apiserver import LEASES, NODES, Conflict, Timeout
from nodeagent.nodelease import LEASE_NAMESPACE, NodeLeaseController
from nodeagent.testing.fake_apiserver import Delay, FakeApiServer

pytestmark = pytest.mark.looptime

NODE = "node-a"


def lease_of(server: FakeApiServer) -> dict[str, object] | None:
    return server.stored(LEASES, NODE, LEASE_NAMESPACE)


@pytest.fixture
def server() -> FakeApiServer:
    s = FakeApiServer()
    s.seed(NODES, {"metadata": {"name": NODE}})
    return s


def controller(server: FakeApiServer, **kw: object) -> NodeLeaseController:
    kw.setdefault("rand", lambda: 0.5)
    return NodeLeaseController(api=server, clock=server.clock, node_name=NODE, **kw)  # type: ignore[arg-type]


@pytest.fixture
async def running() -> AsyncIterator[Callable[[NodeLeaseController], None]]:
    tasks: list[asyncio.Task[None]] = []
    yield lambda c: tasks.append(asyncio.create_task(c.run()))
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_first_sync_creates_the_lease_owned_by_the_node(server: FakeApiServer) -> None:
    await asyncio.sleep(3.5)
    await controller(server).sync()

    lease = lease_of(server)
    assert lease is not None
    node_uid = server.stored(NODES, NODE)["metadata"]["uid"]  # type: ignore[index]
    assert lease["spec"] == {  # type: ignore[index]
        "holderIdentity": NODE,
        "leaseDurationSeconds": 40,
        "renewTime": "2026-01-01T00:00:03.500000Z",
    }
    assert lease["metadata"]["ownerReferences"] == [  # type: ignore[index]
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid}
    ]


async def test_renews_every_ten_seconds_plus_jitter_by_put_without_get(
    server: FakeApiServer, running: Callable[[NodeLeaseController], None], looptime: float
) -> None:
    running(controller(server, rand=lambda: 0.5))  # 10s + 0.5 * 4% = 10.2s
    await asyncio.sleep(31)

    assert [c.at for c in server.calls_to("create", "leases")] == [0]
    assert [c.at for c in server.calls_to("update", "leases")] == pytest.approx([10.2, 20.4, 30.6])
    assert [c.at for c in server.calls_to("get", "leases")] == [0]  # only the first ensure
    assert lease_of(server)["spec"]["renewTime"] == "2026-01-01T00:00:30.600000Z"  # type: ignore[index]


async def test_no_lease_exists_before_the_node_and_ensure_backs_off_200ms_doubling(
    running: Callable[[NodeLeaseController], None],
) -> None:
    server = FakeApiServer()
    running(controller(server))
    await asyncio.sleep(5.0)
    assert lease_of(server) is None
    server.seed(NODES, {"metadata": {"name": NODE}})
    await asyncio.sleep(5.0)

    # GET lease (404) -> GET node (404) -> sleep 0.2, 0.4, 0.8, 1.6, 3.2: node appears at 5.0
    assert [c.at for c in server.calls_to("get", "leases")] == pytest.approx(
        [0, 0.2, 0.6, 1.4, 3.0, 6.2]
    )
    assert [c.at for c in server.calls_to("create", "leases")] == pytest.approx([6.2])
    assert lease_of(server) is not None


async def test_backoff_is_capped_at_seven_seconds_and_logged_once_per_step(
    server: FakeApiServer,
    running: Callable[[NodeLeaseController], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.set_down(True)
    caplog.set_level(logging.INFO, logger="nodeagent.nodelease")
    running(controller(server))
    await asyncio.sleep(30)

    gets = [c.at for c in server.calls_to("get", "leases")]
    assert gets == pytest.approx([0, 0.2, 0.6, 1.4, 3.0, 6.2, 12.6, 19.6, 26.6])
    steps = [
        r for r in caplog.records if r.getMessage() == "Failed to ensure lease exists, will retry"
    ]
    assert len(steps) == len(gets)


async def test_timeout_then_conflict_then_ok_renews_in_one_sync(
    server: FakeApiServer, looptime: float
) -> None:
    c = controller(server)
    await c.sync()  # creates
    server.react("update", "leases", Delay(10, Timeout("deadline")), Conflict("modified"))
    await c.sync()

    updates = server.calls_to("update", "leases")
    assert [u.at for u in updates] == [0, 10, 10]
    assert [g.at for g in server.calls_to("get", "leases")] == [0, 10]  # the 409 refetched
    assert lease_of(server)["spec"]["renewTime"] == "2026-01-01T00:00:10.000000Z"  # type: ignore[index]
    assert looptime == 10


async def test_conflict_refetches_and_keeps_other_writers_fields(server: FakeApiServer) -> None:
    c = controller(server)
    await c.sync()

    def other_writer(lease: dict[str, object]) -> None:
        lease["spec"]["leaseDurationSeconds"] = 15  # type: ignore[index]
        lease["metadata"]["labels"] = {"someone": "else"}  # type: ignore[index]

    server.modify(LEASES, NODE, other_writer, LEASE_NAMESPACE)  # our cached copy is now stale
    await c.sync()

    lease = lease_of(server)
    assert lease["metadata"]["labels"] == {"someone": "else"}  # type: ignore[index]
    assert lease["spec"]["leaseDurationSeconds"] == 40  # re-asserted  # type: ignore[index]
    assert len(server.calls_to("update", "leases")) == 2  # stale PUT (409), then fresh PUT


async def test_deleted_lease_is_recreated_in_the_same_sync(server: FakeApiServer) -> None:
    c = controller(server)
    await c.sync()
    first_uid = lease_of(server)["metadata"]["uid"]  # type: ignore[index]
    server.remove(LEASES, NODE, LEASE_NAMESPACE)

    await c.sync()

    lease = lease_of(server)
    assert lease is not None and lease["metadata"]["uid"] != first_uid  # type: ignore[index]
    assert len(server.calls_to("update", "leases")) == 5  # five 404s, then ensure
    assert len(server.calls_to("create", "leases")) == 2


async def test_repeated_transport_failures_reset_the_connection(server: FakeApiServer) -> None:
    resets: list[float] = []

    async def reset() -> None:
        resets.append(asyncio.get_running_loop().time())

    c = controller(server, on_repeated_failure=reset)
    await c.sync()
    server.set_down(True)
    task = asyncio.create_task(c.sync())
    await asyncio.sleep(1)
    server.set_down(False)
    await task

    assert len(resets) == 4  # tries 2..5 of the optimistic update
    assert lease_of(server)["spec"]["renewTime"] == "2026-01-01T00:00:01.400000Z"  # type: ignore[index]


async def test_heartbeats_resume_within_seven_seconds_after_a_two_minute_outage(
    server: FakeApiServer, running: Callable[[NodeLeaseController], None]
) -> None:
    renewals: list[float] = []
    running(
        controller(server, on_renewed=lambda _: renewals.append(asyncio.get_running_loop().time()))
    )
    await asyncio.sleep(5)
    server.set_down(True)
    await asyncio.sleep(120)
    server.set_down(False)
    back = asyncio.get_running_loop().time()
    await asyncio.sleep(15)

    after = [t for t in renewals if t >= back]
    assert after and after[0] - back <= 7.0
    assert all(t < 5 for t in renewals if t < back)
