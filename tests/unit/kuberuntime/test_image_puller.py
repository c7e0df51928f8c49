"""The image puller's bounds: ``registryPullQPS``/``registryBurst`` (a token bucket full at
start, the kubelet's ``throttleImagePulling``) and the pull slots, over the fake image service."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.puller import QPS_EXCEEDED, ImagePuller, PullFailed
from nodeagent.log.facade import record_fields
from nodeagent.log.facade import settings as log_settings
from nodeagent.testing.fake_images import FakeImageService


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def images() -> FakeImageService:
    service = FakeImageService(endpoint="unix:///fake.sock")
    for name in ("a", "b", "c", "d"):
        service.publish(f"registry.example.com/{name}:1")
    return service


async def pull(puller: ImagePuller, name: str) -> str:
    spec = cri.ImageSpec(image=f"registry.example.com/{name}:1")
    try:
        await puller.pull(spec, [], None)
    except PullFailed as e:
        return e.text
    return "pulled"


async def test_pulls_over_the_burst_fail_until_the_bucket_refills(
    images: FakeImageService,
) -> None:
    clock = Clock()
    puller = ImagePuller(images=images, monotonic=clock, limit=None, qps=1, burst=2)
    assert [await pull(puller, n) for n in "abc"] == ["pulled", "pulled", QPS_EXCEEDED]
    assert len(images.pulls) == 2  # the refused one never reached the runtime
    clock.now = 1.0
    assert [await pull(puller, n) for n in "cd"] == ["pulled", QPS_EXCEEDED]


async def test_no_qps_means_no_limit(images: FakeImageService) -> None:
    puller = ImagePuller(images=images, monotonic=Clock(), limit=None, qps=0, burst=0)
    assert [await pull(puller, n) for n in "abcd"] == ["pulled"] * 4


async def test_a_burst_of_zero_refuses_every_pull(images: FakeImageService) -> None:
    """As Go's rate.Limiter with burst 0 (the kubelet accepts registryBurst: 0)."""
    puller = ImagePuller(images=images, monotonic=Clock(), limit=None, qps=5, burst=0)
    assert await pull(puller, "a") == QPS_EXCEEDED


async def test_serialized_pulls_wait_for_their_slot_then_for_a_token(
    images: FakeImageService,
) -> None:
    """One slot: the second pull waits for the first instead of being refused for it."""
    gate = asyncio.Event()
    original = images.pull_image

    async def slow(image: object, **kw: object) -> str:
        await gate.wait()
        return await original(image, **kw)  # type: ignore[arg-type]  # passes its args through

    images.pull_image = slow  # type: ignore[method-assign]  # hold the fake pull open
    puller = ImagePuller(images=images, monotonic=Clock(), limit=1, qps=10, burst=10)
    first = asyncio.create_task(pull(puller, "a"))
    second = asyncio.create_task(pull(puller, "b"))
    await asyncio.sleep(0)
    assert images.pulls == []
    gate.set()
    assert list(await asyncio.gather(first, second)) == ["pulled", "pulled"]
    assert images.pulls == ["registry.example.com/a:1", "registry.example.com/b:1"]


class Seen(logging.Handler):
    """Sets ``event`` when ``message`` is logged."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message
        self.event = asyncio.Event()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == self.message:
            self.records.append(record)
            self.event.set()


async def test_a_long_pull_is_logged_at_v2_while_it_runs(images: FakeImageService) -> None:
    gate = asyncio.Event()
    original = images.pull_image

    async def slow(image: object, **kw: object) -> str:
        await gate.wait()
        return await original(image, **kw)  # type: ignore[arg-type]  # passes its args through

    images.pull_image = slow  # type: ignore[method-assign]  # hold the fake pull open
    clock = Clock()
    puller = ImagePuller(images=images, monotonic=clock, progress_every=0.01)
    seen = Seen("Image pull in progress")
    logger = logging.getLogger("nodeagent.kuberuntime")
    logger.addHandler(seen)
    level = logger.level
    logger.setLevel(logging.INFO)
    log_settings.verbosity = 2
    try:
        spec = cri.ImageSpec(image="registry.example.com/a:1")
        pulling = asyncio.create_task(puller.pull(spec, [], None, pod="default/web"))
        await asyncio.sleep(0)  # the pull starts at 0 s
        clock.now = 25.0
        async with asyncio.timeout(5):  # a watchdog against a hang, not a timing assertion
            await seen.event.wait()
        gate.set()
        await pulling
        count = len(seen.records)
        await asyncio.sleep(0.05)
        assert len(seen.records) == count  # the progress log stops with the pull
    finally:
        log_settings.verbosity = 0
        logger.removeHandler(seen)
        logger.setLevel(level)
    assert record_fields(seen.records[0]) == {
        "image": "registry.example.com/a:1",
        "pod": "default/web",
        "elapsed": "25s",
    }
