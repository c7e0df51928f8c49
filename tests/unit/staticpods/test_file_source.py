"""The file source re-reads the manifests every fileCheckFrequency, in virtual time."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from nodeagent.log.facade import record_fields
from nodeagent.staticpods import FileSource
from nodeagent.testing.background import running
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_manifests import DIRECTORY, MemoryManifests

pytestmark = pytest.mark.looptime

NODE = "node-a"


def manifest(name: str, command: str = "sleep 3600") -> str:
    return (
        "apiVersion: v1\nkind: Pod\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n  containers:\n"
        f"  - {{name: app, image: busybox, command: [sh, -c, '{command}']}}\n"
    )


@pytest.fixture
def manifests() -> MemoryManifests:
    return MemoryManifests()


@pytest.fixture
def source(manifests: MemoryManifests) -> FileSource:
    return FileSource(
        path=DIRECTORY, node_name=NODE, clock=LoopClock(), period=20.0, reader=manifests
    )


def names(source: FileSource) -> list[str]:
    return [p["metadata"]["name"] for p in source.items()]


def by_name(source: FileSource, name: str) -> dict[str, Any]:
    return next(p for p in source.items() if p["metadata"]["name"] == name)


async def test_manifests_are_read_at_start_and_stamped_with_when_they_were_first_seen(
    manifests: MemoryManifests,
) -> None:
    manifests.write("web.yaml", manifest("web"))
    manifests.write("db.yaml", manifest("db"))
    src = FileSource(path=DIRECTORY, node_name=NODE, clock=LoopClock(), reader=manifests)
    assert not src.synced and src.resource_version == ""
    await asyncio.sleep(1.5)
    task = asyncio.create_task(src.run())
    await src.wait_synced()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    assert names(src) == ["db-node-a", "web-node-a"]
    web = by_name(src, "web-node-a")
    annotations = web["metadata"]["annotations"]
    assert annotations["kubernetes.io/config.seen"] == "2026-01-01T00:00:01.500000000Z"
    assert annotations["kubernetes.io/config.source"] == "file"
    assert src.has(web["metadata"]["uid"])
    assert src.manifest_path(web["metadata"]["uid"]) == f"{DIRECTORY}/web.yaml"
    assert src.resource_version == "1"


async def test_a_new_manifest_is_picked_up_at_the_next_file_check(
    manifests: MemoryManifests, source: FileSource
) -> None:
    async with running(source):
        await source.wait_synced()
        assert names(source) == []
        await asyncio.sleep(5)
        manifests.write("web.yaml", manifest("web"))
        loop = asyncio.get_running_loop()
        await source.wait_for(lambda s: bool(s.items()))
        assert loop.time() == pytest.approx(20.0)
        assert names(source) == ["web-node-a"]


async def test_an_unchanged_manifest_keeps_its_uid_and_seen_time_and_the_source_does_not_move(
    manifests: MemoryManifests, source: FileSource
) -> None:
    async with running(source):
        manifests.write("web.yaml", manifest("web"))
        await source.wait_synced()
        first = by_name(source, "web-node-a")
        version = source.resource_version
        await asyncio.sleep(90)  # four more file checks: at 20, 40, 60 and 80s
        assert manifests.reads == 5
        assert source.resource_version == version
        assert by_name(source, "web-node-a") == first


async def test_a_changed_manifest_replaces_the_pod_with_one_of_a_new_uid(
    manifests: MemoryManifests, source: FileSource
) -> None:
    async with running(source):
        manifests.write("web.yaml", manifest("web"))
        await source.wait_synced()
        old = by_name(source, "web-node-a")["metadata"]["uid"]
        manifests.write("web.yaml", manifest("web", "sleep 60"))
        await source.wait_for(lambda s: not s.has(old))

        new = by_name(source, "web-node-a")
        assert new["metadata"]["uid"] != old
        assert (
            new["metadata"]["annotations"]["kubernetes.io/config.seen"]
            == "2026-01-01T00:00:20.000000000Z"
        )
        assert source.issued(old) and not source.has(old)


async def test_a_bad_manifest_is_reported_once_with_its_file_and_field_and_the_others_run(
    manifests: MemoryManifests, source: FileSource, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(source):
        caplog.set_level(logging.INFO, logger="nodeagent.staticpods")
        manifests.write("web.yaml", manifest("web"))
        manifests.write("bad.yaml", manifest("bad").replace("image: busybox", "image: ''"))
        await source.wait_synced()
        await asyncio.sleep(60)

        assert names(source) == ["web-node-a"]
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert [r.getMessage() for r in errors] == ["Invalid static pod manifest; ignoring it"]
        assert record_fields(errors[0]) == {
            "static_pod_path": DIRECTORY,
            "path": f"{DIRECTORY}/bad.yaml",
            "field": "spec.containers[0].image",
            "error": "Required value",
        }

        manifests.write("bad.yaml", manifest("bad"))  # fixed
        await source.wait_for(lambda s: len(s.items()) == 2)
        assert names(source) == ["bad-node-a", "web-node-a"]


async def test_the_first_of_two_manifests_naming_the_same_pod_wins(
    manifests: MemoryManifests, source: FileSource, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(source):
        manifests.write("a.yaml", manifest("web"))
        manifests.write("b.yaml", manifest("web", "sleep 5"))
        await source.wait_synced()
        [pod] = source.items()
        assert source.manifest_path(pod["metadata"]["uid"]) == f"{DIRECTORY}/a.yaml"
        [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert record_fields(error)["path"] == f"{DIRECTORY}/b.yaml"
        assert "duplicate pod name default/web-node-a" in str(record_fields(error)["error"])


async def test_a_directory_that_disappears_means_no_static_pods(
    manifests: MemoryManifests, source: FileSource
) -> None:
    async with running(source):
        manifests.write("web.yaml", manifest("web"))
        await source.wait_synced()
        manifests.exists = False
        await source.wait_for(lambda s: not s.items())
        assert source.synced


async def test_an_unreadable_directory_keeps_the_pods_and_syncs_only_once_read(
    manifests: MemoryManifests, caplog: pytest.LogCaptureFixture
) -> None:
    manifests.unreadable = "Permission denied"
    src = FileSource(path=DIRECTORY, node_name=NODE, clock=LoopClock(), reader=manifests)
    task = asyncio.create_task(src.run())
    try:
        await asyncio.sleep(50)
        assert not src.synced
        assert [r.getMessage() for r in caplog.records] == ["Cannot read the static pod path"]
        manifests.unreadable = ""
        manifests.write("web.yaml", manifest("web"))
        await src.wait_synced()
        assert asyncio.get_running_loop().time() == pytest.approx(60.0)
        manifests.unreadable = "Permission denied"
        await asyncio.sleep(40)
        assert names(src) == ["web-node-a"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_without_a_static_pod_path_the_source_is_empty_and_synced_at_once() -> None:
    manifests = MemoryManifests()
    src = FileSource(path="", node_name=NODE, clock=LoopClock(), reader=manifests)
    task = asyncio.create_task(src.run())
    try:
        await src.wait_synced()
        await asyncio.sleep(100)
        assert src.items() == [] and manifests.reads == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
