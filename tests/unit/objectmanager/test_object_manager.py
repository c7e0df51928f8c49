"""The ConfigMap and Secret managers over the fake API server: the TTL cache, missing objects,
failed fetches, and the pods' registrations that keep objects cached."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodeagent.apiserver import CONFIGMAPS, SECRETS, ServerError, TransportError
from nodeagent.clock import FrozenClock
from nodeagent.objectmanager import OBJECT_TTL, ObjectManager, config_map_manager, secret_manager
from nodeagent.podspec import Pod, decode_pod
from nodeagent.testing.fake_apiserver import FakeApiServer

pytestmark = pytest.mark.looptime

NS = "shop"


def make_pod(uid: str, *, config_maps: tuple[str, ...] = (), secrets: tuple[str, ...] = ()) -> Pod:
    env: list[dict[str, Any]] = [
        {"name": f"C{i}", "valueFrom": {"configMapKeyRef": {"name": n, "key": "a"}}}
        for i, n in enumerate(config_maps)
    ]
    volumes = [{"name": f"s{i}", "secret": {"secretName": n}} for i, n in enumerate(secrets)]
    return decode_pod(
        {
            "metadata": {"name": f"p-{uid}", "namespace": NS, "uid": uid},
            "spec": {"containers": [{"name": "c", "env": env}], "volumes": volumes},
        }
    )


def config_map(name: str, value: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "data": {"a": value}}


@pytest.fixture
def server() -> FakeApiServer:
    s = FakeApiServer()
    s.seed(CONFIGMAPS, config_map("y", "1"))
    s.seed(SECRETS, {"metadata": {"name": "s", "namespace": NS}, "data": {"pw": "aHVudGVyMg=="}})
    return s


@pytest.fixture
def manager(server: FakeApiServer) -> ObjectManager:
    return config_map_manager(api=server, clock=FrozenClock())


def gets(server: FakeApiServer, resource: str = "configmaps") -> int:
    return len(server.calls_to("get", resource))


def set_value(server: FakeApiServer, value: str) -> None:
    def mutate(obj: dict[str, Any]) -> None:
        obj["data"] = {"a": value}

    server.modify(CONFIGMAPS, "y", mutate, NS)


async def test_a_registered_object_is_reused_until_the_ttl_runs_out(
    server: FakeApiServer, manager: ObjectManager
) -> None:
    manager.register_pod(make_pod("a", config_maps=("y",)))
    first = await manager.get(NS, "y")
    assert first is not None and first["data"] == {"a": "1"}
    set_value(server, "2")
    await asyncio.sleep(OBJECT_TTL - 1)
    again = await manager.get(NS, "y")
    assert again is not None and again["data"] == {"a": "1"}
    assert gets(server) == 1
    await asyncio.sleep(2)
    fresh = await manager.get(NS, "y")
    assert fresh is not None and fresh["data"] == {"a": "2"}
    assert gets(server) == 2


async def test_an_object_no_pod_registered_is_fetched_every_time(
    server: FakeApiServer, manager: ObjectManager
) -> None:
    await manager.get(NS, "y")
    await manager.get(NS, "y")
    assert gets(server) == 2
    assert manager.cached() == ()


async def test_a_missing_object_is_none_and_not_cached(
    server: FakeApiServer, manager: ObjectManager
) -> None:
    manager.register_pod(make_pod("a", config_maps=("later",)))
    assert await manager.get(NS, "later") is None
    server.seed(CONFIGMAPS, config_map("later", "v"))
    found = await manager.get(NS, "later")
    assert found is not None and found["data"] == {"a": "v"}
    assert gets(server) == 2


async def test_a_failed_fetch_keeps_the_last_good_copy_or_raises(
    server: FakeApiServer, manager: ObjectManager
) -> None:
    manager.register_pod(make_pod("a", config_maps=("y", "z")))
    await manager.get(NS, "y")
    await asyncio.sleep(OBJECT_TTL * 2)
    server.react("get", "configmaps", ServerError("etcdserver: request timed out"))
    kept = await manager.get(NS, "y")
    assert kept is not None and kept["data"] == {"a": "1"}
    server.react("get", "configmaps", ServerError("etcdserver: request timed out"))
    with pytest.raises(ServerError) as raised:
        await manager.get(NS, "z")
    assert raised.value.message == "etcdserver: request timed out"


async def test_objects_are_dropped_when_no_registered_pod_reads_them(
    server: FakeApiServer, manager: ObjectManager
) -> None:
    a = make_pod("a", config_maps=("y",))
    b = make_pod("b", config_maps=("y",))
    manager.register_pod(a)
    manager.register_pod(b)
    await manager.get(NS, "y")
    manager.unregister_pod("a")
    await manager.get(NS, "y")
    assert gets(server) == 1  # b still reads it
    manager.unregister_pod("b")
    assert manager.cached() == ()
    await manager.get(NS, "y")
    assert gets(server) == 2


async def test_registering_again_follows_the_spec(
    server: FakeApiServer, manager: ObjectManager
) -> None:
    manager.register_pod(make_pod("a", config_maps=("y",)))
    await manager.get(NS, "y")
    manager.register_pod(make_pod("a", config_maps=("y",)))
    await manager.get(NS, "y")
    assert gets(server) == 1  # the same references: nothing fetched again
    manager.register_pod(make_pod("a", config_maps=("other",)))
    assert manager.cached() == ()  # y is no longer read
    manager.unregister_pod("a")
    manager.unregister_pod("a")  # twice is harmless


async def test_a_new_pod_reads_its_objects_fresh(
    server: FakeApiServer, manager: ObjectManager
) -> None:
    manager.register_pod(make_pod("old", config_maps=("y",)))
    await manager.get(NS, "y")
    set_value(server, "2")  # then kubectl rollout restart
    manager.register_pod(make_pod("new", config_maps=("y",)))
    fresh = await manager.get(NS, "y")
    assert fresh is not None and fresh["data"] == {"a": "2"}
    assert gets(server) == 2
    manager.register_pod(make_pod("new", config_maps=("y",)))
    await manager.get(NS, "y")
    assert gets(server) == 2  # registered again (the pod's next sync): the copy stands


async def test_the_secret_manager_reads_secrets_a_volume_names(server: FakeApiServer) -> None:
    secrets = secret_manager(api=server, clock=FrozenClock())
    secrets.register_pod(make_pod("a", secrets=("s",)))
    found = await secrets.get(NS, "s")
    assert found is not None and found["data"] == {"pw": "aHVudGVyMg=="}
    assert secrets.cached() == ((NS, "s"),)
    assert gets(server, "secrets") == 1


async def test_without_an_api_server_every_get_says_so() -> None:
    manager = config_map_manager(api=None, clock=FrozenClock())
    with pytest.raises(TransportError) as raised:
        await manager.get(NS, "y")
    assert raised.value.message == "cannot get configmap shop/y: no API server configured"
