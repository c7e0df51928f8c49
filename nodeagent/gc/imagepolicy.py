"""Which images image GC removes. Pure.

The kubelet's ``image_gc_manager.go``: every image the runtime lists gets a record (first
detected, last used, size, pinned), refreshed on each run. Candidates are the images no
container uses (running or not), that are not pinned and are not the sandbox image, least
recently used first (then first detected first). Then:

- with ``imageMaximumGCAge`` set, once the agent has run that long, candidates unused for longer
  are removed whatever the disk usage;
- when the image filesystem's usage (``100 - available*100/capacity``, integer percent) is at or
  above ``imageGCHighThresholdPercent``, candidates first detected at least
  ``imageMinimumGCAge`` ago are removed until ``capacity*(100-low)/100 - available`` bytes are
  freed (down to ``imageGCLowThresholdPercent``).

``high = 100`` with no maximum age disables image GC. Times are wall-clock seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Final

from nodeagent.kuberuntime.imageref import normalize_image_ref

IMAGE_GC_PERIOD: Final = 300.0  # ImageGCPeriod
INVALID_CAPACITY: Final = "invalid capacity 0 on image filesystem"


@dataclass(frozen=True, kw_only=True)
class ImageGCPolicy:
    high_threshold_percent: int = 85
    low_threshold_percent: int = 80
    min_age: float = 120.0
    """Seconds since an image was first detected before disk pressure may remove it."""
    max_age: float = 0.0
    """Seconds unused after which an image is removed whatever the disk usage; 0: never."""

    @property
    def enabled(self) -> bool:
        return self.high_threshold_percent < 100 or self.max_age > 0


@dataclass(frozen=True, slots=True)
class ListedImage:
    """An image as the runtime lists it, reduced to what GC reads."""

    id: str
    size: int
    pinned: bool = False
    names: tuple[str, ...] = ()
    """Repo tags and repo digests."""


@dataclass(frozen=True, slots=True)
class ImageRecord:
    id: str
    size: int
    first_detected: float
    last_used: float = 0.0
    """When a container was last seen using it; 0: never seen in use."""
    pinned: bool = False


def images_in_use(images: Sequence[ListedImage], refs: Iterable[str]) -> set[str]:
    """Ids of the images that ``refs`` (image ids, tags, digests, short names) name."""
    by_name: dict[str, str] = {}
    for image in images:
        by_name[image.id] = image.id
        for name in image.names:
            by_name[name] = image.id
    used: set[str] = set()
    for ref in refs:
        if not ref:
            continue
        found = by_name.get(ref)
        if found is None:
            try:
                found = by_name.get(normalize_image_ref(ref))
            except ValueError:
                found = None
        if found is not None:
            used.add(found)
    return used


def detect(
    records: Mapping[str, ImageRecord],
    images: Sequence[ListedImage],
    *,
    in_use: Set[str],
    now: float,
) -> dict[str, ImageRecord]:
    """The records after a listing (``detectImages``): new images are first detected now,
    images in use are last used now, vanished images are forgotten."""
    out: dict[str, ImageRecord] = {}
    for image in images:
        record = records.get(image.id) or ImageRecord(
            id=image.id, size=image.size, first_detected=now
        )
        out[image.id] = replace(
            record,
            size=image.size,
            pinned=image.pinned,
            last_used=now if image.id in in_use else record.last_used,
        )
    return out


def eviction_order(records: Iterable[ImageRecord], *, in_use: Set[str]) -> list[ImageRecord]:
    """Images GC may remove, least recently used first (``imagesInEvictionOrder``)."""
    candidates = [r for r in records if r.id not in in_use and not r.pinned]
    return sorted(candidates, key=lambda r: (r.last_used, r.first_detected))


def too_old(
    candidates: Iterable[ImageRecord], *, now: float, began: float, max_age: float
) -> list[ImageRecord]:
    """Candidates unused for more than ``max_age`` (``freeOldImages``); none until the agent
    has run for ``max_age``, so images are not removed for what happened before it started."""
    if max_age <= 0 or now - began <= max_age:
        return []
    return [r for r in candidates if now - r.last_used > max_age]


def usage_percent(*, capacity: int, available: int) -> int:
    return 100 - available * 100 // capacity


def bytes_to_free(*, capacity: int, available: int, low_threshold_percent: int) -> int:
    return capacity * (100 - low_threshold_percent) // 100 - available


def space_candidates(
    candidates: Iterable[ImageRecord], *, now: float, min_age: float
) -> list[ImageRecord]:
    """Candidates disk pressure may remove, in order (``freeSpace``): not used at ``now``, first
    detected at least ``min_age`` ago (an image just pulled is about to be used)."""
    return [r for r in candidates if r.last_used < now and now - r.first_detected >= min_age]


def format_size(size: int) -> str:
    """Bytes in binary units with one decimal, as the kubelet writes them (``26.4 GiB``)."""
    if size < 1024:
        return f"{size} B"
    value, exp = size / 1024, 0
    while value >= 1024 and exp < 5:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp]}iB"


def insufficient_space_message(*, usage: int, capacity: int, freed: int) -> str:
    """The ``FreeDiskSpaceFailed`` event text."""
    return (
        f"Insufficient free disk space on the node's image filesystem ({usage}% of "
        f"{format_size(capacity)} used). Failed to free sufficient space by deleting unused "
        f"images (freed {freed} bytes). Investigate disk usage, as it could be used by active "
        "images, logs, volumes, or other data."
    )


def aggregate(errors: Sequence[str]) -> str:
    """Several error texts as one, as Go's ``utilerrors.NewAggregate`` prints them."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
