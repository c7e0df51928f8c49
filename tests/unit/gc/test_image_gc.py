"""Image GC against the fake runtime, with the image filesystem's usage injected."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

import pytest

from nodeagent.clock import FrozenClock
from nodeagent.gc import ImageGC, ImageGCError, ImageGCPolicy
from nodeagent.gc.files import FsStats
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import cri_error
from nodeagent.testing.fake_images import IMAGE_FS_MOUNTPOINT
from nodeagent.testing.fake_runtime import FakeRuntime

MB = 1_000_000
PAUSE = "registry.k8s.io/pause:3.10"


class Disk:
    """The image filesystem: ``other`` bytes of non-image data plus the images present."""

    def __init__(self, runtime: FakeRuntime, *, capacity: int, other: int) -> None:
        self.runtime = runtime
        self.capacity = capacity
        self.other = other
        self.paths: list[str] = []
        self.error: OSError | None = None

    async def __call__(self, path: str) -> FsStats:
        self.paths.append(path)
        if self.error is not None:
            raise self.error
        images = sum(i.size for i in await self.runtime.list_images())
        return FsStats(capacity=self.capacity, available=self.capacity - self.other - images)


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record(self, type: str, reason: str, message: str) -> None:
        self.recorded.append((type, reason, message))


@dataclasses.dataclass
class Node:
    runtime: FakeRuntime
    clock: FrozenClock
    disk: Disk
    events: Events

    def gc(self, **policy: float) -> ImageGC:
        return ImageGC(
            images=self.runtime,
            runtime=self.runtime,
            clock=self.clock,
            events=self.events,
            policy=ImageGCPolicy(**policy),  # type: ignore[arg-type]  # test overrides by name
            fs_stats=self.disk,
        )

    async def present(self) -> set[str]:
        """Short names of the images present (``example.com/app:1`` -> ``app``)."""
        return {
            tag.rsplit("/", 1)[-1].split(":")[0]
            for image in await self.runtime.list_images()
            for tag in image.repo_tags
        }

    async def run_container(self, ref: str, *, exit: bool = False) -> str:
        config = cri.sandbox_config(name="p", namespace="default", uid=f"uid-{ref}")
        sandbox = await self.runtime.run_pod_sandbox(config)
        container = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="c"), image=cri.ImageSpec(image=ref)
        )
        cid = await self.runtime.create_container(sandbox, container, config)
        if exit:
            self.runtime.exit_container(cid, exit_code=0)
        return cid


@pytest.fixture
def node() -> Node:
    clock = FrozenClock()
    runtime = FakeRuntime(clock=clock)
    # 100 MB disk, 70 MB other data, 25 MB of images: 95% used.
    runtime.add_image(PAUSE, size=1 * MB)
    runtime.add_image("example.com/app:1", size=4 * MB)
    runtime.add_image("example.com/old:1", size=5 * MB)
    runtime.add_image("example.com/older:1", size=6 * MB)
    runtime.add_image("example.com/big:1", size=7 * MB)
    runtime.add_image("example.com/pinned:1", size=2 * MB, pinned=True)
    return Node(
        runtime=runtime,
        clock=clock,
        disk=Disk(runtime, capacity=100 * MB, other=70 * MB),
        events=Events(),
    )


ALL = {"pause", "app", "old", "older", "big", "pinned"}


async def test_nothing_is_removed_below_the_high_threshold(node: Node) -> None:
    node.disk.other = 55 * MB  # 80% used

    result = await node.gc(min_age=0).garbage_collect(began=0.0)

    assert result.usage_percent == 80
    assert result.removed == []
    assert await node.present() == ALL
    assert node.disk.paths == [IMAGE_FS_MOUNTPOINT]  # the filesystem ImageFsInfo names


async def test_unused_images_go_least_recently_used_first_until_down_to_the_low_threshold(
    node: Node,
) -> None:
    gc = node.gc(min_age=0)
    older = await node.run_container("example.com/older:1", exit=True)
    await node.run_container("example.com/old:1")
    node.disk.other = 0
    await gc.garbage_collect(began=0.0)  # 25% used: only records who uses what
    await node.runtime.remove_container(older)
    node.clock.advance(100)
    node.disk.other = 65 * MB  # 90% used: 100 * 20% - 10 = 10 MB to free

    result = await gc.garbage_collect(began=0.0)

    # Never used (app 4 MB, then big 7 MB) before "older" (used 100 s ago); "old" is used by
    # a container, "pause" is the runtime's sandbox image, "pinned" is pinned.
    assert result.freed == 11 * MB
    assert await node.present() == {"pause", "old", "older", "pinned"}


async def test_an_image_used_only_by_an_exited_container_is_in_use(node: Node) -> None:
    await node.run_container("example.com/big:1", exit=True)

    with pytest.raises(ImageGCError):  # it cannot get down to 0%
        await node.gc(min_age=0, low_threshold_percent=0).garbage_collect(began=0.0)

    assert await node.present() == {"pause", "big", "pinned"}


@pytest.mark.parametrize(
    ("status_image", "explicit", "kept"),
    [
        pytest.param(PAUSE, "", True, id="sandboxImage of the runtime's verbose status"),
        pytest.param("", PAUSE, True, id="given explicitly"),
        pytest.param("", "", False, id="unknown sandbox image, not pinned"),
    ],
)
async def test_the_sandbox_image_is_never_removed(
    node: Node, status_image: str, explicit: str, kept: bool
) -> None:
    node.runtime.sandbox_image = status_image
    gc = ImageGC(
        images=node.runtime,
        runtime=node.runtime,
        clock=node.clock,
        events=node.events,
        policy=ImageGCPolicy(min_age=0, low_threshold_percent=0),
        sandbox_image=explicit,
        fs_stats=node.disk,
    )

    with pytest.raises(ImageGCError):
        await gc.garbage_collect(began=0.0)

    assert ("pause" in await node.present()) is kept


async def test_images_younger_than_the_minimum_age_survive_until_old_enough(node: Node) -> None:
    gc = node.gc(min_age=120)

    with pytest.raises(ImageGCError, match=r"freed 0 bytes"):
        await gc.garbage_collect(began=0.0)
    assert await node.present() == ALL

    node.clock.advance(120)
    await gc.garbage_collect(began=0.0)
    assert await node.present() < ALL


async def test_a_shortfall_records_free_disk_space_failed_with_the_kubelets_text(
    node: Node,
) -> None:
    await node.run_container("example.com/old:1")

    with pytest.raises(ImageGCError) as raised:
        await node.gc(min_age=0, low_threshold_percent=10).garbage_collect(began=0.0)

    message = (
        "Insufficient free disk space on the node's image filesystem (95% of 95.4 MiB used). "
        f"Failed to free sufficient space by deleting unused images (freed {17 * MB} bytes). "
        "Investigate disk usage, as it could be used by active images, logs, volumes, or "
        "other data."
    )
    assert str(raised.value) == message
    assert node.events.recorded == [("Warning", "FreeDiskSpaceFailed", message)]
    assert await node.present() == {"pause", "old", "pinned"}


@pytest.mark.parametrize("broken", ["zero capacity", "statvfs fails"])
async def test_an_unreadable_image_filesystem_records_invalid_disk_capacity(
    node: Node, broken: str
) -> None:
    if broken == "zero capacity":
        node.disk.capacity = 0
    else:
        node.disk.error = PermissionError(13, "Permission denied")

    with pytest.raises(ImageGCError, match=r"^invalid capacity 0 on image filesystem$"):
        await node.gc().garbage_collect(began=0.0)

    assert node.events.recorded == [
        ("Warning", "InvalidDiskCapacity", "invalid capacity 0 on image filesystem")
    ]
    assert await node.present() == ALL


async def test_maximum_age_removes_long_unused_images_whatever_the_usage(node: Node) -> None:
    node.disk.other = 0
    await node.run_container("example.com/app:1")
    gc = node.gc(high_threshold_percent=100, max_age=600)
    began = node.clock.now().timestamp()

    await gc.garbage_collect(began=began)
    assert await node.present() == ALL  # the agent has not run for 600 s yet

    node.clock.advance(601)
    result = await gc.garbage_collect(began=began)
    assert await node.present() == {"pause", "app", "pinned"}
    assert result.freed == 18 * MB


@pytest.mark.looptime
async def test_image_gc_failed_is_recorded_only_when_a_run_fails_twice_in_a_row(
    node: Node,
) -> None:
    node.runtime.remove_image = fail_removal  # type: ignore[method-assign]  # inject the failure
    task = asyncio.create_task(node.gc(min_age=0).run())
    try:
        await asyncio.sleep(1)
        reasons = [reason for _, reason, _ in node.events.recorded]
        assert reasons == []  # the first failure is only logged
        await asyncio.sleep(300)  # the second run, one period (5 min) later
        reasons = [reason for _, reason, _ in node.events.recorded]
        assert reasons == ["ImageGCFailed"]
        assert node.events.recorded[0][2].startswith(
            f"wanted to free {15 * MB} bytes, but freed 0 bytes space with errors in image "
            "deletion: [rpc error: code = Unknown desc = busy sha256:"
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def fail_removal(image: str | cri.ImageSpec) -> None:
    raise cri_error(rpc="RemoveImage", endpoint="fake", code="Unknown", details=f"busy {image}")


async def test_disk_pressure_reclaim_removes_every_unused_image_old_enough(node: Node) -> None:
    """The eviction manager's ``DeleteUnusedImages``: whatever the thresholds (the disk is only
    30% used here), every image not in use, not pinned and past the minimum age goes."""
    node.disk.other = 5 * MB
    await node.run_container("example.com/app:1")
    gc = node.gc(min_age=60)
    first = await gc.delete_unused_images()
    assert first.removed == []  # all just detected: younger than the minimum age
    node.clock.advance(61)
    second = await gc.delete_unused_images()
    assert second.freed == 18 * MB  # old, older, big; the sandbox image counts as in use
    assert await node.present() == {"app", "pause", "pinned"}


async def test_after_each_pass_the_hook_learns_every_image_still_on_the_node(node: Node) -> None:
    """The pull records' pruning: told the images left (in use and pinned ones too, unlike
    the kubelet's hook) and the time taken before they were listed; a failed pass too."""
    calls: list[tuple[set[str], dt.datetime]] = []
    gc = ImageGC(
        images=node.runtime,
        runtime=node.runtime,
        clock=node.clock,
        events=node.events,
        policy=ImageGCPolicy(min_age=0),
        fs_stats=node.disk,
        post_gc=[lambda images, until: calls.append((set(images), until))],
    )
    await node.run_container("example.com/old:1")
    ids = {
        t.rsplit("/", 1)[-1].split(":")[0]: i.id
        for i in await node.runtime.list_images()
        for t in i.repo_tags
    }
    started = node.clock.now()

    result = await gc.garbage_collect(began=0.0)  # 95% used: 15 MB to free

    removed = set(result.removed)
    assert removed and ids["old"] not in removed and ids["pinned"] not in removed
    [(left, until)] = calls
    assert left == set(ids.values()) - removed
    assert until == started

    node.disk.other = 100 * MB  # nothing can get it under the threshold now
    with pytest.raises(ImageGCError):
        await gc.garbage_collect(began=0.0)
    assert len(calls) == 2
    assert calls[1][0] == {i.id for i in await node.runtime.list_images()}
