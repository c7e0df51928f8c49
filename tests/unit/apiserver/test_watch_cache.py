"""The watch-backed cache: list then watch, bookmarks, relist on 410, reconnect with backoff."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from nodeagent.apiserver import NODES, Forbidden, Gone, ServerError, WatchCache
from nodeagent.log.facade import record_fields
from nodeagent.testing.fake_apiserver import FakeApiServer

pytestmark = pytest.mark.looptime


@pytest.fixture
async def server() -> FakeApiServer:
    s = FakeApiServer()
    s.seed(NODES, {"metadata": {"name": "a", "labels": {"x": "1"}}})
    s.seed(NODES, {"metadata": {"name": "b"}})
    return s


@pytest.fixture
async def cache(server: FakeApiServer) -> AsyncIterator[WatchCache]:
    c = WatchCache(api=server, resource=NODES, field_selector="metadata.name=a", rand=lambda: 0.0)
    task = asyncio.create_task(c.run())
    await c.wait_synced()
    yield c
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def label(cache: WatchCache) -> str | None:
    node = cache.get("a")
    return None if node is None else node["metadata"].get("labels", {}).get("x")


async def test_lists_then_follows_changes_of_selected_objects(
    server: FakeApiServer, cache: WatchCache
) -> None:
    assert [n["metadata"]["name"] for n in cache.items()] == ["a"]

    server.modify(NODES, "a", lambda n: n["metadata"]["labels"].update(x="2"))
    await cache.wait_for(lambda c: label(c) == "2")
    server.remove(NODES, "a")
    await cache.wait_for(lambda c: c.get("a") is None)

    watches = server.calls_to("watch", "nodes")
    assert watches[0].params["resourceVersion"] == "2"  # from the list
    assert watches[0].params["fieldSelector"] == "metadata.name=a"
    assert len(server.calls_to("list", "nodes")) == 1


async def test_rewatches_from_the_last_bookmark_when_the_server_ends_a_watch(
    server: FakeApiServer, cache: WatchCache
) -> None:
    await asyncio.sleep(0)
    server.modify(NODES, "b", lambda n: None)  # not selected: only moves the resourceVersion
    server.bookmark()
    await asyncio.sleep(0.1)
    server.end_watches()
    await asyncio.sleep(0.1)

    watches = server.calls_to("watch", "nodes")
    assert [w.params["resourceVersion"] for w in watches] == ["2", "3"]
    assert len(server.calls_to("list", "nodes")) == 1  # no relist needed


async def test_relists_when_the_resource_version_is_too_old(
    server: FakeApiServer, cache: WatchCache, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server.react("watch", "nodes", Gone("too old resource version", reason="Expired"))
    server.end_watches()
    server.modify(NODES, "a", lambda n: n["metadata"]["labels"].update(x="3"))
    await cache.wait_for(lambda c: label(c) == "3")

    assert len(server.calls_to("list", "nodes")) == 2
    assert any(r.getMessage() == "Watch expired; relisting" for r in caplog.records)


async def test_compacted_history_forces_a_relist(server: FakeApiServer, cache: WatchCache) -> None:
    await asyncio.sleep(0)
    server.set_down(True)  # drop the watch
    await asyncio.sleep(0.1)
    server.modify(NODES, "a", lambda n: n["metadata"]["labels"].update(x="4"))
    server.compact()
    server.set_down(False)
    await cache.wait_for(lambda c: label(c) == "4")

    assert len(server.calls_to("list", "nodes")) == 2


async def test_failures_back_off_800ms_doubling_to_30s_and_reset_after_success() -> None:
    server = FakeApiServer()
    server.react("list", "nodes", ServerError("etcd is sad"), times=8)
    cache = WatchCache(api=server, resource=NODES, rand=lambda: 0.0)
    task = asyncio.create_task(cache.run())
    await cache.wait_synced()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    times = [c.at for c in server.calls_to("list", "nodes")]
    assert times == pytest.approx([0, 0.8, 2.4, 5.6, 12.0, 24.8, 50.4, 80.4, 110.4])


async def test_a_forbidden_list_names_the_fix_the_owner_gave(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = FakeApiServer()
    server.react("list", "nodes", Forbidden('nodes is forbidden: User "system:node:a"'), times=1)
    cache = WatchCache(api=server, resource=NODES, forbidden_hint="bind the node-proxier role")
    task = asyncio.create_task(cache.run())
    await cache.wait_synced()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    [warning] = [r for r in caplog.records if r.getMessage() == "List/watch failed; will retry"]
    assert record_fields(warning)["fix"] == "bind the node-proxier role"


async def _after_an_outage(
    server: FakeApiServer, cache: WatchCache, *, answered_at: float | None, label_to: str
) -> list[float]:
    """The apiserver away for 100 s from a synced cache's start, then back; another call gets
    an answer ``answered_at`` s after the start (None: none does); then the Node changes.
    Returns the cache's watch tries, in seconds from the start."""
    task = asyncio.create_task(cache.run())
    await cache.wait_synced()
    start = asyncio.get_running_loop().time()
    server.set_down(True)  # the watch drops; tries at +0.8, 2.4, 5.6, 12, 24.8, 50.4, 80.4, 110.4
    await asyncio.sleep(100)
    server.set_down(False)
    if answered_at is not None:
        await asyncio.sleep(answered_at - 100)  # back, but nobody has asked it yet
        await server.get(NODES, "a")  # another call (the Lease's retry) gets an answer
    server.modify(NODES, "a", lambda n: n["metadata"].update(labels={"x": label_to}))
    await cache.wait_for(lambda c: label(c) == label_to)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return [c.at - start for c in server.calls_to("watch", "nodes")]


async def test_an_answer_to_another_call_ends_the_backoff_after_an_outage() -> None:
    server = FakeApiServer()
    server.seed(NODES, {"metadata": {"name": "a"}})
    cache = WatchCache(api=server, resource=NODES, rand=lambda: 0.5)

    tries = await _after_an_outage(server, cache, answered_at=103, label_to="5")

    # the next try half a second after the answer (a random part of RECONNECT_SPREAD_S), not
    # at +110.4, and none between the apiserver's return and that answer
    assert tries[-2:] == pytest.approx([80.4, 103.5])


async def test_without_another_answer_the_backoff_is_slept_out() -> None:
    server = FakeApiServer()
    server.seed(NODES, {"metadata": {"name": "a"}})
    cache = WatchCache(api=server, resource=NODES, rand=lambda: 0.5)

    tries = await _after_an_outage(server, cache, answered_at=None, label_to="6")

    assert tries[-2:] == pytest.approx([80.4, 110.4])
