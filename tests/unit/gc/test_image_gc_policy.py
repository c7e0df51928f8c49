"""Which images image GC picks, and the numbers and texts it reports (pure)."""

from __future__ import annotations

import pytest

from nodeagent.gc.imagepolicy import (
    ImageGCPolicy,
    ImageRecord,
    ListedImage,
    bytes_to_free,
    detect,
    eviction_order,
    format_size,
    images_in_use,
    insufficient_space_message,
    space_candidates,
    too_old,
    usage_percent,
)

BUSYBOX = ListedImage(
    id="sha256:bb",
    size=1000,
    names=("docker.io/library/busybox:1.36", "docker.io/library/busybox@sha256:d1"),
)
PAUSE = ListedImage(id="sha256:pp", size=300, names=("registry.k8s.io/pause:3.10",))
NGINX = ListedImage(id="sha256:nn", size=5000, names=("docker.io/library/nginx:1.27",))


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        pytest.param("sha256:bb", {"sha256:bb"}, id="image id (containerd's image_ref)"),
        pytest.param("docker.io/library/busybox:1.36", {"sha256:bb"}, id="repo tag"),
        pytest.param("docker.io/library/busybox@sha256:d1", {"sha256:bb"}, id="repo digest"),
        pytest.param("busybox:1.36", {"sha256:bb"}, id="short name, normalised"),
        pytest.param("busybox:latest", set(), id="another tag"),
        pytest.param("", set(), id="empty"),
        pytest.param("Not A Ref", set(), id="not a reference"),
    ],
)
def test_images_in_use_are_matched_by_id_tag_or_digest(ref: str, expected: set[str]) -> None:
    assert images_in_use([BUSYBOX, PAUSE, NGINX], [ref]) == expected


def test_detection_stamps_new_images_and_use_and_forgets_vanished_ones() -> None:
    records = {
        "sha256:bb": ImageRecord(id="sha256:bb", size=1, first_detected=10.0, last_used=20.0),
        "sha256:gone": ImageRecord(id="sha256:gone", size=1, first_detected=10.0),
    }
    pinned_pause = ListedImage(id=PAUSE.id, size=PAUSE.size, pinned=True, names=PAUSE.names)

    new = detect(records, [BUSYBOX, pinned_pause, NGINX], in_use={"sha256:nn"}, now=100.0)

    assert new == {
        "sha256:bb": ImageRecord(id="sha256:bb", size=1000, first_detected=10.0, last_used=20.0),
        "sha256:pp": ImageRecord(id="sha256:pp", size=300, first_detected=100.0, pinned=True),
        "sha256:nn": ImageRecord(id="sha256:nn", size=5000, first_detected=100.0, last_used=100.0),
    }


def test_eviction_order_is_least_recently_used_then_first_detected_never_used_or_pinned() -> None:
    records = [
        ImageRecord(id="recent", size=1, first_detected=1.0, last_used=50.0),
        ImageRecord(id="never-late", size=1, first_detected=30.0),
        ImageRecord(id="never-early", size=1, first_detected=5.0),
        ImageRecord(id="old-use", size=1, first_detected=1.0, last_used=10.0),
        ImageRecord(id="pinned", size=1, first_detected=0.0, pinned=True),
        ImageRecord(id="in-use", size=1, first_detected=0.0),
    ]

    order = eviction_order(records, in_use={"in-use"})

    assert [r.id for r in order] == ["never-early", "never-late", "old-use", "recent"]


def test_space_candidates_skip_images_younger_than_min_age_and_images_used_now() -> None:
    candidates = [
        ImageRecord(id="old", size=1, first_detected=0.0),
        ImageRecord(id="just-pulled", size=1, first_detected=90.0),
        ImageRecord(id="used-now", size=1, first_detected=0.0, last_used=100.0),
        ImageRecord(id="exactly-min-age", size=1, first_detected=80.0),
    ]

    eligible = space_candidates(candidates, now=100.0, min_age=20.0)

    assert [r.id for r in eligible] == ["old", "exactly-min-age"]


@pytest.mark.parametrize(
    ("now", "began", "expected"),
    [
        pytest.param(1000.0, 0.0, ["never-used", "stale"], id="unused longer than max age"),
        pytest.param(1000.0, 950.0, [], id="not before the agent has run for max age"),
    ],
)
def test_maximum_age_removes_images_unused_for_longer(
    now: float, began: float, expected: list[str]
) -> None:
    candidates = [
        ImageRecord(id="never-used", size=1, first_detected=900.0),
        ImageRecord(id="stale", size=1, first_detected=0.0, last_used=800.0),
        ImageRecord(id="fresh", size=1, first_detected=0.0, last_used=950.0),
    ]

    old = too_old(candidates, now=now, began=began, max_age=100.0)

    assert [r.id for r in old] == expected


def test_zero_maximum_age_removes_nothing_by_age() -> None:
    candidates = [ImageRecord(id="never-used", size=1, first_detected=0.0)]
    assert too_old(candidates, now=1e9, began=0.0, max_age=0.0) == []


def test_usage_and_amount_to_free_use_the_kubelets_integer_arithmetic() -> None:
    capacity, available = 1000, 149  # 85.1% used -> 100 - 14 = 86
    assert usage_percent(capacity=capacity, available=available) == 86
    # down to 80%: 1000 * 20 / 100 - 149 = 51 bytes
    assert bytes_to_free(capacity=capacity, available=available, low_threshold_percent=80) == 51


@pytest.mark.parametrize(
    ("policy", "enabled"),
    [
        pytest.param(ImageGCPolicy(), True, id="defaults"),
        pytest.param(ImageGCPolicy(high_threshold_percent=100), False, id="high 100 disables"),
        pytest.param(
            ImageGCPolicy(high_threshold_percent=100, max_age=3600.0),
            True,
            id="high 100 with a maximum age still removes old images",
        ),
    ],
)
def test_image_gc_is_disabled_only_by_high_100_without_max_age(
    policy: ImageGCPolicy, enabled: bool
) -> None:
    assert policy.enabled is enabled


@pytest.mark.parametrize(
    ("size", "text"),
    [
        pytest.param(512, "512 B", id="bytes"),
        pytest.param(1536, "1.5 KiB", id="KiB"),
        pytest.param(int(26.4 * 2**30), "26.4 GiB", id="GiB"),
        pytest.param(100 * 2**30, "100.0 GiB", id="round GiB"),
        pytest.param(3 * 2**40, "3.0 TiB", id="TiB"),
    ],
)
def test_sizes_are_written_in_binary_units(size: int, text: str) -> None:
    assert format_size(size) == text


def test_insufficient_space_message_is_the_kubelets() -> None:
    message = insufficient_space_message(usage=88, capacity=int(26.4 * 2**30), freed=385820817)

    assert message == (
        "Insufficient free disk space on the node's image filesystem (88% of 26.4 GiB used). "
        "Failed to free sufficient space by deleting unused images (freed 385820817 bytes). "
        "Investigate disk usage, as it could be used by active images, logs, volumes, or "
        "other data."
    )
