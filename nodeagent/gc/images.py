"""Image GC: every 5 minutes, remove unused images when the image filesystem is fuller than
``imageGCHighThresholdPercent`` (down to the low threshold), and images unused for longer than
``imageMaximumGCAge``; the kubelet's ``realImageGCManager.GarbageCollect``.

An image is in use when any container (running or not) was created from it, or it is the
runtime's sandbox image (``sandboxImage`` of containerd's CRI config, read with a verbose
``Status``, or given explicitly), or the runtime pins it. The filesystem's size and free space
come from ``statvfs`` of the mountpoint ``ImageFsInfo`` names (cAdvisor's reading).

Failures: an unfreeable shortfall records ``FreeDiskSpaceFailed``, a zero capacity
``InvalidDiskCapacity``; a run that fails twice in a row records ``ImageGCFailed``, as the
kubelet does (the first failure is often stats that are not ready yet).

After each pass, ``post_gc`` (the kubelet's ``PostImageGCHook``: the pull records' pruning)
learns the images still on the node and the time taken before they were listed. Unlike the
kubelet, every pass runs it (the kubelet's runs only after a pass that freed space by the
thresholds, so records of images removed by age or by hand stay until then), and it is given
every image still listed, in use or not (the kubelet's ``freeSpace`` hands over only the unused
images it kept, which drops the records of images in use: an image pulled with a secret then
serves any pod as if preloaded).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from nodeagent.clock import Clock
from nodeagent.errors import AgentError
from nodeagent.events import EventSink
from nodeagent.gc.files import FsStats, statvfs_stats
from nodeagent.gc.imagepolicy import (
    IMAGE_GC_PERIOD,
    INVALID_CAPACITY,
    ImageGCPolicy,
    ImageRecord,
    ListedImage,
    aggregate,
    bytes_to_free,
    detect,
    eviction_order,
    images_in_use,
    insufficient_space_message,
    space_candidates,
    too_old,
    usage_percent,
)
from nodeagent.gc.metrics import IMAGES_COLLECTED
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.service import ImageService, RuntimeService
from nodeagent.kuberuntime.statusinfo import runtime_config_of
from nodeagent.log import Logger, get_logger

FREE_DISK_SPACE_FAILED: Final = "FreeDiskSpaceFailed"
IMAGE_GC_FAILED: Final = "ImageGCFailed"
INVALID_DISK_CAPACITY: Final = "InvalidDiskCapacity"

FsStatsReader = Callable[[str], Awaitable[FsStats]]
PostGcHook = Callable[[list[str], datetime.datetime], object]
"""(the image IDs still on the node, a time taken before they were listed)."""


class ImageGCError(AgentError):
    """A run of image GC that did not do its job; ``str()`` is the kubelet's text."""


@dataclass
class ImageGCResult:
    removed: list[str] = field(default_factory=list)
    freed: int = 0
    usage_percent: int | None = None


def listed_image(image: cri.Image) -> ListedImage:
    return ListedImage(
        id=image.id,
        size=image.size,
        pinned=image.pinned,
        names=(*image.repo_tags, *image.repo_digests),
    )


def sandbox_image_of(status: cri.StatusResponse) -> str:
    """containerd's ``sandboxImage`` from a verbose ``Status`` (empty when not given)."""
    value = runtime_config_of(status).get("sandboxImage", "")
    return value if isinstance(value, str) else ""


class ImageGC:
    def __init__(
        self,
        *,
        images: ImageService,
        runtime: RuntimeService,
        clock: Clock,
        events: EventSink,
        policy: ImageGCPolicy = ImageGCPolicy(),  # noqa: B008 - frozen
        sandbox_image: str = "",
        fs_stats: FsStatsReader = statvfs_stats,
        period: float = IMAGE_GC_PERIOD,
        post_gc: Sequence[PostGcHook] = (),
        log: Logger | None = None,
    ) -> None:
        self._images = images
        self._runtime = runtime
        self._clock = clock
        self._events = events
        self._policy = policy
        self._sandbox_image = sandbox_image
        self._fs_stats = fs_stats
        self._period = period
        self._log = log or get_logger("gc.images")
        self._records: dict[str, ImageRecord] = {}
        self._post_gc = tuple(post_gc)
        self._listed: list[str] = []

    @property
    def name(self) -> str:
        return "gc:images"

    async def run(self) -> None:
        began = self._clock.now().timestamp()
        failed = False
        while True:
            try:
                await self.garbage_collect(began=began)
            except (CriError, ImageGCError) as e:
                text = e.status_text if isinstance(e, CriError) else str(e)
                if failed:
                    self._log.error(
                        "Image garbage collection failed multiple times in a row", error=str(e)
                    )
                    self._events.record("Warning", IMAGE_GC_FAILED, text)
                else:
                    self._log.error(
                        "Image garbage collection failed once. Stats initialization may not "
                        "have completed yet",
                        error=str(e),
                    )
                failed = True
            else:
                self._log.v(1 if failed else 4).info("Image garbage collection succeeded")
                failed = False
            await asyncio.sleep(self._period)

    async def _in_use_refs(self) -> list[str]:
        refs = [
            ref
            for c in await self._runtime.list_containers()
            for ref in (c.image_ref, c.image_id, c.image.image)
        ]
        sandbox_image = self._sandbox_image
        if not sandbox_image:
            with contextlib.suppress(CriError):
                sandbox_image = sandbox_image_of(await self._runtime.status(verbose=True))
        return [*refs, sandbox_image]

    async def garbage_collect(self, *, began: float) -> ImageGCResult:
        result = ImageGCResult()
        started = self._clock.now()
        candidates = await self._candidates(started.timestamp())
        try:
            return await self._collect(candidates, result, began=began, now=started.timestamp())
        finally:
            self._run_post_gc(result, started)

    async def _collect(
        self, candidates: list[ImageRecord], result: ImageGCResult, *, began: float, now: float
    ) -> ImageGCResult:
        old = too_old(candidates, now=now, began=began, max_age=self._policy.max_age)
        errors = [e for e in [await self._remove(r, result, "age") for r in old] if e]
        if errors:
            raise ImageGCError(
                f"wanted to free images older than {self._policy.max_age:g}s, encountered "
                f"errors in image deletion: {aggregate(errors)}"
            )
        candidates = [r for r in candidates if r.id in self._records]

        capacity, available = await self._image_fs()
        if available > capacity:
            self._log.info(
                "Availability is larger than capacity", available=available, capacity=capacity
            )
            available = capacity
        if capacity == 0:
            self._events.record("Warning", INVALID_DISK_CAPACITY, INVALID_CAPACITY)
            raise ImageGCError(INVALID_CAPACITY)
        usage = result.usage_percent = usage_percent(capacity=capacity, available=available)
        if usage < self._policy.high_threshold_percent:
            return result
        amount = bytes_to_free(
            capacity=capacity,
            available=available,
            low_threshold_percent=self._policy.low_threshold_percent,
        )
        self._log.info(
            "Disk usage on image filesystem is over the high threshold, trying to free bytes "
            "down to the low threshold",
            usage=usage,
            high_threshold=self._policy.high_threshold_percent,
            amount_to_free=amount,
            low_threshold=self._policy.low_threshold_percent,
        )
        freed_before = result.freed
        for record in space_candidates(candidates, now=now, min_age=self._policy.min_age):
            if error := await self._remove(record, result, "space"):
                errors.append(error)
            elif result.freed - freed_before >= amount:
                break
        freed = result.freed - freed_before
        if errors:
            raise ImageGCError(
                f"wanted to free {amount} bytes, but freed {freed} bytes space with errors in "
                f"image deletion: {aggregate(errors)}"
            )
        if freed < amount:
            message = insufficient_space_message(usage=usage, capacity=capacity, freed=freed)
            self._events.record("Warning", FREE_DISK_SPACE_FAILED, message)
            raise ImageGCError(message)
        return result

    async def delete_unused_images(self) -> ImageGCResult:
        """Remove every image no container uses (older than the minimum age, not pinned),
        whatever the thresholds: the eviction manager's node-level reclaim under disk pressure
        (the kubelet's ``DeleteUnusedImages``)."""
        result = ImageGCResult()
        started = self._clock.now()
        now = started.timestamp()
        candidates = await self._candidates(now)
        try:
            errors = [
                e
                for r in space_candidates(candidates, now=now, min_age=self._policy.min_age)
                if (e := await self._remove(r, result, "space"))
            ]
        finally:
            self._run_post_gc(result, started)
        if errors:
            raise ImageGCError(
                f"wanted to free all unused images, encountered errors in image deletion: "
                f"{aggregate(errors)}"
            )
        return result

    def _run_post_gc(self, result: ImageGCResult, started: datetime.datetime) -> None:
        removed = set(result.removed)
        remaining = [image for image in self._listed if image not in removed]
        for hook in self._post_gc:
            hook(remaining, started)

    async def _candidates(self, now: float) -> list[ImageRecord]:
        """The images present now, recorded with when they were first seen and last used,
        in the order they are removed (the kubelet's ``detectImages`` then the eviction
        order); images in use and pinned ones are left out."""
        listed = [listed_image(i) for i in await self._images.list_images()]
        self._listed = [image.id for image in listed]
        in_use = images_in_use(listed, await self._in_use_refs())
        self._records = detect(self._records, listed, in_use=in_use, now=now)
        return eviction_order(self._records.values(), in_use=in_use)

    async def _image_fs(self) -> tuple[int, int]:
        filesystems = (await self._images.image_fs_info()).image_filesystems
        if not filesystems:
            raise ImageGCError("imageFs information is unavailable")
        mountpoint = filesystems[0].fs_id.mountpoint
        try:
            stats = await self._fs_stats(mountpoint)
        except OSError as e:
            self._log.error(
                "Failed to get the info of the filesystem with mountpoint",
                mountpoint=mountpoint,
                error=str(e),
            )
            return 0, 0
        return stats.capacity, stats.available

    async def _remove(self, record: ImageRecord, result: ImageGCResult, reason: str) -> str:
        """Remove one image; returns the error text, empty on success."""
        self._log.info(
            "Removing image to free bytes", image_id=record.id, size=record.size, reason=reason
        )
        try:
            await self._images.remove_image(record.id)
        except CriError as e:
            self._log.error("Failed to remove image", image_id=record.id, error=str(e))
            return e.status_text
        IMAGES_COLLECTED.labels(reason).inc()
        self._records.pop(record.id, None)
        result.removed.append(record.id)
        result.freed += record.size
        return ""
