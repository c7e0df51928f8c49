"""The content source the volume manager calls: objects from the (fake) API through the TTL
cache, tokens, the atomic writer on disk, forget."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest
from volume_clocks import ManualClock

from nodeagent.apiserver import CONFIGMAPS, SECRETS, ServerError
from nodeagent.objectmanager import config_map_manager
from nodeagent.podspec import Pod, Volume, decode_pod
from nodeagent.testing.fake_apiserver import Call, FakeApiServer
from nodeagent.volumemanager.content import VolumeSetupError, content_source

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def make_pod(*volumes: dict[str, Any], uid: str = "uid-1") -> Pod:
    return decode_pod(
        {
            "metadata": {"name": f"p-{uid}", "namespace": "shop", "uid": uid},
            "spec": {
                "serviceAccountName": "default",
                "containers": [{"name": "c"}],
                "volumes": list(volumes),
            },
        }
    )


def issue(call: Call) -> dict[str, Any]:
    return {
        **call.body,
        "status": {"token": "the-token", "expirationTimestamp": "2026-01-01T01:00:07Z"},
    }


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def server() -> FakeApiServer:
    s = FakeApiServer()
    s.seed(CONFIGMAPS, {"metadata": {"name": "y", "namespace": "shop"}, "data": {"a": "1"}})
    s.seed(
        CONFIGMAPS,
        {"metadata": {"name": "kube-root-ca.crt", "namespace": "shop"}, "data": {"ca.crt": "CA"}},
    )
    s.seed(
        SECRETS,
        {"metadata": {"name": "s", "namespace": "shop"}, "data": {"pw": "aHVudGVyMg=="}},
    )
    s.react("create", "serviceaccounts", issue, times=None)
    return s


def volume(pod: Pod) -> Volume:
    return pod.spec.volumes[0]


def files(target: Path) -> dict[str, str]:
    return {n: (target / n).read_text() for n in sorted(os.listdir(target)) if n[:2] != ".."}


def set_cm(server: FakeApiServer, value: str) -> None:
    def mutate(obj: dict[str, Any]) -> None:
        obj["data"] = {"a": value}

    server.modify(CONFIGMAPS, "y", mutate, "shop")


async def test_config_map_update_appears_after_the_ttl(
    server: FakeApiServer, clock: ManualClock, tmp_path: Path
) -> None:
    source = content_source(api=server, clock=clock)
    pod = make_pod({"name": "cfg", "configMap": {"name": "y"}})
    await source.set_up(pod, volume(pod), tmp_path)
    assert files(tmp_path) == {"a": "1"}
    set_cm(server, "2")
    clock.advance(30)
    await source.set_up(pod, volume(pod), tmp_path)
    assert files(tmp_path) == {"a": "1"}  # still cached
    assert len(server.calls_to("get", "configmaps")) == 1
    clock.advance(31)
    await source.set_up(pod, volume(pod), tmp_path)
    assert files(tmp_path) == {"a": "2"}
    assert len(server.calls_to("get", "configmaps")) == 2


async def test_missing_objects(server: FakeApiServer, clock: ManualClock, tmp_path: Path) -> None:
    source = content_source(api=server, clock=clock)
    pod = make_pod({"name": "cfg", "configMap": {"name": "later"}})
    with pytest.raises(VolumeSetupError) as raised:
        await source.set_up(pod, volume(pod), tmp_path)
    assert raised.value.message == 'configmap "later" not found'
    assert os.listdir(tmp_path) == []
    # a missing object is not cached: created, it is seen on the next sync
    server.seed(
        CONFIGMAPS, {"metadata": {"name": "later", "namespace": "shop"}, "data": {"k": "v"}}
    )
    await source.set_up(pod, volume(pod), tmp_path)
    assert files(tmp_path) == {"k": "v"}

    optional = make_pod({"name": "sec", "secret": {"secretName": "nope", "optional": True}})
    empty = tmp_path / "empty"
    empty.mkdir()
    await source.set_up(optional, volume(optional), empty)
    assert os.readlink(empty / "..data").startswith("..2026_01_01_00_00_00.")
    assert files(empty) == {}


async def test_api_errors_keep_the_last_good_copy(
    server: FakeApiServer, clock: ManualClock, tmp_path: Path
) -> None:
    source = content_source(api=server, clock=clock)
    pod = make_pod({"name": "s", "secret": {"secretName": "s", "defaultMode": 0o400}})
    await source.set_up(pod, volume(pod), tmp_path)
    assert files(tmp_path) == {"pw": "hunter2"}
    assert oct((tmp_path / "pw").stat().st_mode & 0o777) == "0o400"
    server.react("get", "secrets", ServerError("etcdserver: request timed out"))
    clock.advance(120)
    await source.set_up(pod, volume(pod), tmp_path)
    assert files(tmp_path) == {"pw": "hunter2"}
    other = make_pod({"name": "s", "secret": {"secretName": "s2"}}, uid="uid-2")
    server.react("get", "secrets", ServerError("etcdserver: request timed out"))
    with pytest.raises(VolumeSetupError) as raised:
        await source.set_up(other, volume(other), tmp_path / "x")
    assert raised.value.message == "etcdserver: request timed out"


async def test_kube_api_access(server: FakeApiServer, clock: ManualClock, tmp_path: Path) -> None:
    source = content_source(api=server, clock=clock)
    pod = make_pod(
        {
            "name": "kube-api-access-abcde",
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ]
            },
        }
    )
    await source.set_up(pod, volume(pod), tmp_path)
    assert files(tmp_path) == {"ca.crt": "CA", "namespace": "shop", "token": "the-token"}
    (call,) = server.calls_to("create", "serviceaccounts")
    assert call.body["spec"]["boundObjectRef"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p-uid-1",
        "uid": "uid-1",
    }
    before = os.readlink(tmp_path / "..data")
    await source.set_up(pod, volume(pod), tmp_path)
    assert os.readlink(tmp_path / "..data") == before  # nothing changed, nothing written
    assert len(server.calls_to("create", "serviceaccounts")) == 1


async def test_unsupported_and_invalid(
    server: FakeApiServer, clock: ManualClock, tmp_path: Path
) -> None:
    source = content_source(api=server, clock=clock)
    pod = make_pod(
        {"name": "b", "projected": {"sources": [{"clusterTrustBundle": {"path": "ca"}}]}}
    )
    with pytest.raises(VolumeSetupError) as raised:
        await source.set_up(pod, volume(pod), tmp_path)
    assert raised.value.message == "clusterTrustBundle is not supported on this node"
    bad = make_pod(
        {"name": "cfg", "configMap": {"name": "y", "items": [{"key": "a", "path": "../x"}]}}
    )
    with pytest.raises(VolumeSetupError) as raised:
        await source.set_up(bad, volume(bad), tmp_path)
    assert raised.value.message == "invalid path: must not contain '..': ../x"
    assert os.listdir(tmp_path) == []


async def test_forget_drops_what_only_that_pod_used(
    server: FakeApiServer, clock: ManualClock, tmp_path: Path
) -> None:
    config_maps = config_map_manager(api=server, clock=clock)
    source = content_source(api=server, clock=clock, config_maps=config_maps)
    a = make_pod({"name": "cfg", "configMap": {"name": "y"}}, uid="a")
    b = make_pod({"name": "cfg", "configMap": {"name": "y"}}, uid="b")
    for pod in (a, b):  # both pods run: the pod manager registers them before their volumes
        config_maps.register_pod(pod)
    for pod in (a, b):
        (tmp_path / pod.uid).mkdir()
        await source.set_up(pod, volume(pod), tmp_path / pod.uid)
    assert len(server.calls_to("get", "configmaps")) == 1
    source.forget("a")
    await source.set_up(b, volume(b), tmp_path / "b")
    assert len(server.calls_to("get", "configmaps")) == 1  # b still holds it
    source.forget("b")
    await source.set_up(b, volume(b), tmp_path / "b")
    assert len(server.calls_to("get", "configmaps")) == 2


async def test_concurrent_set_ups_of_one_volume_write_one_after_the_other(
    server: FakeApiServer, clock: ManualClock, tmp_path: Path
) -> None:
    source = content_source(api=server, clock=clock)
    pods = [
        make_pod(
            {
                "name": "info",
                "downwardAPI": {
                    "items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]
                },
            },
            uid=f"u{i}",
        )
        for i in range(8)
    ]
    await asyncio.gather(*(source.set_up(p, volume(p), tmp_path) for p in pods))
    assert files(tmp_path) == {"name": "p-u7"}
    stamped = [n for n in os.listdir(tmp_path) if n.startswith("..") and n != "..data"]
    assert stamped == [os.readlink(tmp_path / "..data")]
