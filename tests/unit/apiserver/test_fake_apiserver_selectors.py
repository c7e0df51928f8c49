"""The fake apiserver's label and field selectors, and what a watch with selectors sees when an
object starts or stops matching (as the apiserver's watch cache sends it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodeagent.apiserver import Resource
from nodeagent.apiserver.interface import WatchEvent
from nodeagent.testing.fake_apiserver import FakeApiServer

SERVICES = Resource("", "v1", "services", "Service", namespaced=False)


def svc(name: str, cluster_ip: str = "10.96.0.1", **labels: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "d", "labels": labels}
    return {"metadata": meta, "spec": {"clusterIP": cluster_ip}}


@pytest.fixture
def server() -> FakeApiServer:
    s = FakeApiServer()
    s.seed(SERVICES, svc("plain"))
    s.seed(SERVICES, svc("tagged", a="1"))
    s.seed(SERVICES, svc("other", a="2"))
    s.seed(SERVICES, svc("headless", "None"))
    return s


@pytest.mark.parametrize(
    ("labels", "fields", "want"),
    [
        (None, None, ["headless", "other", "plain", "tagged"]),
        ("a", None, ["other", "tagged"]),
        ("!a", None, ["headless", "plain"]),
        ("a=1", None, ["tagged"]),
        ("a==1", None, ["tagged"]),
        ("a!=1", None, ["headless", "other", "plain"]),  # a missing key is not equal
        ("a,a!=2", None, ["tagged"]),
        (None, "spec.clusterIP!=None", ["other", "plain", "tagged"]),
        (None, "spec.clusterIP=None", ["headless"]),
        ("!a", "spec.clusterIP!=None,metadata.name=plain", ["plain"]),
    ],
)
async def test_selectors(
    server: FakeApiServer, labels: str | None, fields: str | None, want: list[str]
) -> None:
    listed = await server.list(SERVICES, label_selector=labels, field_selector=fields)
    assert sorted(o["metadata"]["name"] for o in listed.items) == want


async def test_a_watch_sees_an_object_leave_and_enter_its_selection(server: FakeApiServer) -> None:
    start = (await server.list(SERVICES)).resource_version
    events: list[WatchEvent] = []

    async def watch() -> None:
        async for e in server.watch(SERVICES, resource_version=start, label_selector="!a"):
            events.append(e)

    task = asyncio.create_task(watch())
    await asyncio.sleep(0)
    server.modify(SERVICES, "plain", lambda o: o["metadata"]["labels"].update(a="3"), "d")
    server.modify(SERVICES, "plain", lambda o: o["metadata"]["labels"].update(b="x"), "d")
    server.modify(SERVICES, "plain", lambda o: o["metadata"]["labels"].pop("a"), "d")
    server.modify(SERVICES, "plain", lambda o: o["metadata"]["labels"].update(c="y"), "d")
    server.modify(SERVICES, "tagged", lambda o: o["metadata"]["labels"].update(d="z"), "d")
    await asyncio.sleep(0)
    late: list[WatchEvent] = []  # a watch from the same version replays the same events
    async for e in server.watch(SERVICES, resource_version=start, label_selector="!a"):
        late.append(e)
        if len(late) == 3:
            break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    seen = [(e.type, e.object["metadata"]["labels"], e.resource_version) for e in events]
    assert seen == [
        ("DELETED", {}, str(int(start) + 1)),  # the last content it was selected with
        ("ADDED", {"b": "x"}, str(int(start) + 3)),
        ("MODIFIED", {"b": "x", "c": "y"}, str(int(start) + 4)),
    ]
    assert [(e.type, e.object["metadata"]["labels"], e.resource_version) for e in late] == seen
